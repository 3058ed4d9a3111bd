// Helpers for the fake verbs tests: an opened device with a PD, registered
// buffers, RC and UD endpoints wired with the same verbs calls a backend
// makes, and bounded polling (a deadline is a failure, never a measurement).
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace courier::fake_verbs::testing {

inline constexpr std::chrono::seconds kWaitLimit{30};

// Sets FAKE_VERBS_DEVICES for the scope, restoring it afterwards.
class ScopedProfiles {
 public:
  explicit ScopedProfiles(const char* value);
  ~ScopedProfiles();

 private:
  std::optional<std::string> previous_;
};

// The first device FAKE_VERBS_DEVICES = `profile` lists, opened, with a PD.
class OpenDevice {
 public:
  explicit OpenDevice(const char* profile);
  ~OpenDevice();
  OpenDevice(const OpenDevice&) = delete;
  OpenDevice& operator=(const OpenDevice&) = delete;

  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_port_attr port{};
};

// Page-aligned memory registered on a PD.
class Buffer {
 public:
  Buffer(ibv_pd* pd, size_t bytes, int access);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t* words() const { return reinterpret_cast<uint64_t*>(data_); }
  uint64_t address(size_t offset = 0) const { return reinterpret_cast<uintptr_t>(data_) + offset; }
  size_t size() const { return size_; }
  ibv_mr* mr = nullptr;

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// What a peer needs to reach a QP.
struct QpAddress {
  uint32_t qpn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
};

class Endpoint {
 public:
  Endpoint(OpenDevice& device, ibv_qp_type type, uint32_t max_send_wr = 64, int cq_entries = 256,
           bool sq_sig_all = false);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  QpAddress address() const;
  // RESET -> INIT -> RTR -> RTS towards `remote` (RC), or to RTS (UD).
  void connect(const QpAddress& remote,
               int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  // The full attribute set for one transition, for the state-machine tests.
  ibv_qp_attr init_attr(int access) const;
  ibv_qp_attr rtr_attr(const QpAddress& remote) const;
  ibv_qp_attr rts_attr() const;

  OpenDevice& device;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
};

inline constexpr int kInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
inline constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
inline constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

// Posts one send WR; returns post_send's result.
int post_write(ibv_qp* qp, const Buffer& source, size_t offset, uint32_t length,
               uint64_t remote_addr, uint32_t rkey, uint64_t wr_id, bool signaled = true,
               std::optional<uint32_t> imm = std::nullopt);
int post_atomic(ibv_qp* qp, const Buffer& result, ibv_wr_opcode opcode, uint64_t remote_addr,
                uint32_t rkey, uint64_t compare_add, uint64_t swap, uint64_t wr_id);
int post_receive(ibv_qp* qp, uint64_t wr_id, const Buffer* buffer = nullptr, size_t offset = 0,
                 uint32_t length = 0);

// Polls until `count` completions arrived; fewer only if kWaitLimit passed.
std::vector<ibv_wc> poll(ibv_cq* cq, size_t count);

}  // namespace courier::fake_verbs::testing
