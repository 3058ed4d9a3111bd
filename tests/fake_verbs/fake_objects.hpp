// The fake's verbs objects. Each wraps the rdma-core struct the caller sees
// (first member of a standard-layout Handle, so the caller's pointer converts
// back) and holds the state real hardware keeps in its context tables. All
// mutable state is guarded by the owning Hca's mutex.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

namespace courier::fake_verbs {

using Clock = std::chrono::steady_clock;

class Hca;
struct Device;
struct Context;
struct Pd;
struct Mr;
struct Cq;
struct Qp;
struct Ah;

template <class Ibv, class Impl>
struct Handle {
  Ibv ibv;
  Impl* impl;
};

struct ContextHandle {
  verbs_context vctx;  // ibv_context is its last member
  Context* impl;
};

struct Context {
  ContextHandle handle{};
  std::shared_ptr<Hca> hca;
  Device* device = nullptr;
  ibv_context* ibv() { return &handle.vctx.context; }
};

struct Pd {
  Handle<ibv_pd, Pd> handle{};
  Context* context = nullptr;
  int users = 0;  // MRs, QPs and AHs on it: dealloc is EBUSY while nonzero
};

struct Mr {
  Handle<ibv_mr, Mr> handle{};
  Pd* pd = nullptr;
  unsigned access = 0;
  uint64_t iova = 0;  // the address the keys are used with
  uint64_t length = 0;
  std::byte* host = nullptr;  // where iova maps in this process
  void* mapping = nullptr;    // a dmabuf's mmap, unmapped at dereg
  size_t mapping_length = 0;

  // The host address of [address, address + bytes) if it lies in the MR.
  std::byte* translate(uint64_t address, uint64_t bytes) const {
    if (address < iova || bytes > length || address - iova > length - bytes) return nullptr;
    return host + (address - iova);
  }
};

// Where an address vector (QP path or AH) leads: the fake HCA number, if the
// address names one a fake HCA could own.
struct Destination {
  std::optional<uint32_t> hca_number;
  bool global = false;
  ibv_gid dgid{};
  uint16_t dlid = 0;
  uint8_t sgid_index = 0;
};

struct Ah {
  Handle<ibv_ah, Ah> handle{};
  Pd* pd = nullptr;
  Destination destination;
};

struct CqEntry {
  ibv_wc wc{};
  // Send and receive queue slots the entry frees when polled: real providers
  // advance the queue's consumer index only when the completion is polled,
  // and an unsignalled WR's slot is freed by the next polled completion.
  uint32_t qp_num = 0;
  uint64_t qp_generation = 0;
  uint32_t send_slots = 0;
  uint32_t recv_slots = 0;
};

struct Cq {
  Handle<ibv_cq, Cq> handle{};
  Context* context = nullptr;
  size_t capacity = 0;
  std::deque<CqEntry> entries;
  bool overrun = false;
  int users = 0;  // QPs using it: destroy is EBUSY while nonzero
};

struct SendWr {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  std::vector<ibv_sge> sges;
  std::optional<std::vector<std::byte>> inline_data;  // copied at post time
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  Destination ud_destination;  // UD: from the AH at post time
  uint32_t ud_remote_qpn = 0;
  uint32_t ud_remote_qkey = 0;

  // Requester progress.
  uint64_t serial = 0;  // matches the response
  std::optional<uint32_t> psn;
  bool transmitted = false;
  uint64_t connection_id = 0;  // the stream it went out on
  Clock::time_point ack_deadline{};
  std::optional<Clock::time_point> retry_deadline;  // set at the first retryable NAK
  int rnr_naks = 0;
  std::optional<ibv_wc_status> result;
  uint64_t atomic_original = 0;

  uint64_t total_length() const;
};

struct RecvWr {
  uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
};

struct Qp {
  Handle<ibv_qp, Qp> handle{};
  Context* context = nullptr;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  ibv_qp_type type = IBV_QPT_RC;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  uint64_t generation = 1;  // bumped at RESET: stale responses and CQ entries are ignored

  ibv_qp_state state = IBV_QPS_RESET;
  ibv_qp_attr attr{};  // every attribute set so far
  Destination destination;

  std::deque<SendWr> send_queue;  // posted, not yet completed, in post order
  size_t next_to_transmit = 0;
  uint32_t next_psn = 0;
  uint64_t next_serial = 1;
  Clock::time_point resume_at{};  // backoff after a NAK or an unreachable peer
  uint32_t send_slots_used = 0;
  uint32_t unsignaled_retired = 0;  // completed unsignalled WRs whose slots await a poll

  std::deque<RecvWr> recv_queue;
  uint32_t recv_slots_used = 0;

  // Responder.
  uint32_t expected_psn = 0;

  uint32_t qpn() const { return handle.ibv.qp_num; }
};

inline uint64_t SendWr::total_length() const {
  if (inline_data) return inline_data->size();
  uint64_t total = 0;
  for (const ibv_sge& sge : sges) total += sge.length;
  return total;
}

// The wrappers from the caller's pointers.
inline Context* context_of(ibv_context* ctx) {
  verbs_context* vctx = verbs_get_ctx(ctx);
  return vctx ? reinterpret_cast<ContextHandle*>(vctx)->impl : nullptr;
}
inline Pd* pd_of(ibv_pd* pd) { return reinterpret_cast<Handle<ibv_pd, Pd>*>(pd)->impl; }
inline Mr* mr_of(ibv_mr* mr) { return reinterpret_cast<Handle<ibv_mr, Mr>*>(mr)->impl; }
inline Cq* cq_of(ibv_cq* cq) { return reinterpret_cast<Handle<ibv_cq, Cq>*>(cq)->impl; }
inline Qp* qp_of(ibv_qp* qp) { return reinterpret_cast<Handle<ibv_qp, Qp>*>(qp)->impl; }
inline Ah* ah_of(ibv_ah* ah) { return reinterpret_cast<Handle<ibv_ah, Ah>*>(ah)->impl; }

}  // namespace courier::fake_verbs
