// One fake HCA: the state one physical adapter holds for one process (each
// process is one "host" with its own adapter). All contexts that open the
// same device share it. Its mutex guards every table and every object on it;
// the engine thread and the application threads take it for each step.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "fake_engine.hpp"
#include "fake_objects.hpp"
#include "fake_profile.hpp"
#include "fake_wire.hpp"

namespace courier::fake_verbs {

// The node GUID of HCA `number` of `profile` (host byte order).
uint64_t node_guid(const Profile& profile, uint32_t number);
// GID table entry `index` of HCA `number`; nothing for an empty entry.
std::optional<ibv_gid_entry> gid_entry(const Profile& profile, uint32_t number, uint32_t index);
// The HCA number a RoCE GID or an InfiniBand LID names, if it is one a fake
// HCA could own.
std::optional<uint32_t> number_from_gid(const ibv_gid& gid);
std::optional<uint32_t> number_from_lid(uint16_t lid);

class Hca {
 public:
  // Takes the socket bound to this HCA's number, listens on it and starts
  // the engine.
  Hca(const Profile& profile, BoundSocket socket);
  ~Hca();
  Hca(const Hca&) = delete;
  Hca& operator=(const Hca&) = delete;

  const Profile& profile() const { return profile_; }
  uint32_t number() const { return number_; }
  pid_t owner_pid() const { return owner_pid_; }
  uint16_t lid() const { return profile_.roce() ? 0 : static_cast<uint16_t>(number_); }
  void ring() { engine_.ring(); }

  // Everything below is guarded by mutex.
  std::mutex mutex;
  std::unordered_map<Pd*, std::unique_ptr<Pd>> pds;
  std::unordered_map<Mr*, std::unique_ptr<Mr>> mrs;
  std::unordered_map<uint32_t, Mr*> mr_by_lkey;
  std::unordered_map<uint32_t, Mr*> mr_by_rkey;
  std::unordered_map<Cq*, std::unique_ptr<Cq>> cqs;
  std::unordered_map<uint32_t, std::unique_ptr<Qp>> qps;  // by QP number
  std::unordered_map<Ah*, std::unique_ptr<Ah>> ahs;

  // A memory key not issued before on this HCA (never 0).
  uint32_t fresh_key();
  // A QP number not issued before on this HCA (24 bits, never 0 or 1).
  uint32_t fresh_qpn();

  // Adds a completion; on overflow the CQ is marked overrun instead.
  void push_completion(Cq& cq, const CqEntry& entry);
  // Produces the send completions whose results are known, in post order;
  // the first error moves the QP to ERR.
  void complete_in_order(Qp& qp);
  // Moves the QP to ERR and flushes every queued WR (send and receive) with
  // IBV_WC_WR_FLUSH_ERR.
  void enter_error(Qp& qp);
  // A send-side completion entry for `wr` (slots it frees included).
  void complete_send(Qp& qp, const SendWr& wr, ibv_wc_status status);
  void complete_recv(Qp& qp, const RecvWr& wr, const ibv_wc& wc);
  // The MR of `pd` that key `lkey` names and that covers the range with
  // `needed` access, or nullptr.
  Mr* local_mr(const Pd* pd, uint32_t lkey, uint64_t address, uint64_t bytes, unsigned needed);

 private:
  Profile profile_;
  uint32_t number_;
  pid_t owner_pid_;
  std::mt19937_64 random_;
  std::unordered_set<uint32_t> issued_keys_;
  uint32_t next_qpn_;
  Engine engine_;  // last: its thread stops before the tables go
};

}  // namespace courier::fake_verbs
