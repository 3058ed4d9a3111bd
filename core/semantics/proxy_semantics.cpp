#include "core/semantics/proxy_semantics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "core/check.hpp"
#include "core/proxy/nic_endpoint.hpp"

namespace courier {

namespace {

// Internal cookies: [63:48] kInternalSlot  [47:40] kind  [39:24] peer  [7:0] slot.
enum class InternalKind : uint64_t { request = 1, reply = 2, barrier = 3 };

uint64_t internal_cookie(InternalKind kind, uint32_t peer, uint32_t slot) {
  return (ProxySemantics::kInternalSlot << 48) | (static_cast<uint64_t>(kind) << 40) |
         (uint64_t{peer & 0xffffu} << 24) | (slot & 0xffu);
}

uint32_t nic_op_of(AtomicOp op) {
  return op == AtomicOp::add_u64 ? COURIER_NIC_ATOMIC_ADD_U64 : COURIER_NIC_ATOMIC_ADD_U32;
}

// The TransferCmd carries a 32-bit two's-complement addend; widen it.
uint64_t widen_operand(AtomicOp op, uint32_t operand) {
  if (op == AtomicOp::add_u32) return operand;
  return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(operand)));
}

}  // namespace

const char* to_string(AtomicStrategyKind kind) {
  switch (kind) {
    case AtomicStrategyKind::none:
      return "none";
    case AtomicStrategyKind::hw:
      return "hw";
    case AtomicStrategyKind::imm:
      return "imm";
  }
  return "?";
}

ProxySemantics::ProxySemantics(ProxyTransport& transport, const SemanticsOptions& options,
                               AtomicMailbox* mailbox, Logger& log)
    : transport_(transport),
      options_(options),
      mailbox_(mailbox),
      log_(log),
      ordered_((transport.caps() & COURIER_NIC_CAP_ORDERED_WRITES) != 0),
      peers_(options.world_size),
      peer_count_(options.world_size),
      windows_(kUserWindows),
      fault_rng_(options.fault_seed ^ (uint64_t{options.rank} << 32)) {
  const bool any_imm =
      options.add_u64 == AtomicStrategyKind::imm || options.add_u32 == AtomicStrategyKind::imm;
  tag_writes_ = any_imm && !ordered_;
  if (any_imm) {
    if (mailbox_ == nullptr) fail("emulated atomics need an atomic mailbox");
    for (Peer& peer : peers_) peer.slots.resize(kMailboxSlots);
  }
  if (options.barrier != nullptr) {
    barrier_ = std::make_unique<BarrierEngine>(transport, options.barrier, options.barrier_staging,
                                               options.barrier_landing, options.channels);
  }
}

int ProxySemantics::advance_barrier(uint32_t channel, const TransferCmd& cmd, std::string* error) {
  if (!barrier_) {
    *error = "BARRIER needs the barrier set-up of a Context";
    return -ENOTSUP;
  }
  const auto scope =
      cmd.flags() == kBarrierRail ? BarrierEngine::Scope::rail : BarrierEngine::Scope::world;
  if (cmd.flags() != kBarrierWorld && cmd.flags() != kBarrierRail) {
    *error = fmt::format("BARRIER with unknown scope {}", cmd.flags());
    return -EINVAL;
  }
  switch (barrier_->advance(channel, scope, cmd.word1, error)) {
    case BarrierEngine::Step::done:
      return COURIER_OK;
    case BarrierEngine::Step::waiting:
      return -EAGAIN;
    case BarrierEngine::Step::failed:
      break;
  }
  return -EPROTO;
}

void ProxySemantics::set_local_window(uint32_t window, void* base, uint64_t bytes) {
  windows_.at(window) = {static_cast<std::byte*>(base), bytes};
}

AtomicStrategyKind ProxySemantics::strategy_for(AtomicOp op) const {
  switch (op) {
    case AtomicOp::add_u64:
      return options_.add_u64;
    case AtomicOp::add_u32:
      return options_.add_u32;
  }
  return AtomicStrategyKind::none;
}

int ProxySemantics::refuse_rank(const char* what, uint32_t peer, std::string* error) const {
  *error = fmt::format("{} to rank {} but the job has {} ranks", what, peer, peers_.size());
  return -EINVAL;
}

int ProxySemantics::post_atomic(uint32_t channel, const TransferCmd& cmd, uint64_t cookie,
                                bool* completes_later, std::string* error) {
  *completes_later = false;
  const auto op = static_cast<AtomicOp>(cmd.flags());
  if (op != AtomicOp::add_u64 && op != AtomicOp::add_u32) {
    *error = fmt::format("unknown atomic op {}", cmd.flags());
    return -EINVAL;
  }
  if (cmd.dst_rank() >= peers_.size()) return refuse_rank("ATOMIC", cmd.dst_rank(), error);
  switch (strategy_for(op)) {
    case AtomicStrategyKind::hw:
      return post_hw_atomic(nic_op_of(op), cmd, cookie, error);
    case AtomicStrategyKind::imm: {
      const int rc = post_imm_atomic(channel, nic_op_of(op), cmd, cookie, error);
      *completes_later = rc == COURIER_OK;
      return rc;
    }
    case AtomicStrategyKind::none:
      break;
  }
  *error = fmt::format("{} has no atomic strategy here (see COURIER_ATOMICS)",
                       courier_nic_atomic_name(nic_op_of(op)));
  return -ENOTSUP;
}

int ProxySemantics::post_hw_atomic(uint32_t op, const TransferCmd& cmd, uint64_t cookie,
                                   std::string* error) {
  Peer& p = peers_[cmd.dst_rank()];
  if (!ordered_ && p.writes_in_flight > 0) {
    // Write-then-atomic on an unordered transport: the earlier writes must
    // have completed (= landed, with delivery-complete) first.
    ++stats_.fenced;
    return -EAGAIN;
  }
  AtomicRequest atomic;
  atomic.peer = cmd.dst_rank();
  atomic.window = cmd.window();
  atomic.offset = cmd.dst_offset();
  atomic.op = op;
  atomic.operand = widen_operand(static_cast<AtomicOp>(cmd.flags()), cmd.operand());
  atomic.result_window = cmd.window();  // non-fetching: no result is written
  atomic.result_offset = 0;
  return transport_.post_atomic(atomic, cookie, error);
}

int ProxySemantics::post_imm_atomic(uint32_t channel, uint32_t op, const TransferCmd& cmd,
                                    uint64_t cookie, std::string* error) {
  const uint32_t peer = cmd.dst_rank();
  Peer& p = peers_[peer];
  uint32_t slot = kMailboxSlots;
  for (uint32_t i = 0; i < kMailboxSlots; ++i) {
    const uint32_t candidate = (p.free_hint + i) % kMailboxSlots;
    if (!p.slots[candidate].busy) {
      slot = candidate;
      break;
    }
  }
  if (slot == kMailboxSlots) return -EAGAIN;  // every request slot awaits its answer

  AtomicRecord& record = mailbox_->request_out(peer, slot);
  record = AtomicRecord{};
  record.op = op;
  record.seq = p.next_seq;
  record.window = static_cast<uint8_t>(cmd.window());
  record.offset = cmd.dst_offset();
  record.operand = widen_operand(static_cast<AtomicOp>(cmd.flags()), cmd.operand());
  record.channel = channel;
  record.check = kRecordCheck ^ p.next_seq;
  if (options_.malform > 0 && cookie != malform_decided_for_) {
    // Drawn once per command: a post the transport refused comes back with
    // the same cookie and keeps its fate.
    malform_decided_for_ = cookie;
    malform_kind_ = std::uniform_real_distribution<double>(0, 1)(fault_rng_) < options_.malform
                        ? static_cast<int>(malformed_++ % 3)
                        : -1;
  }
  if (options_.malform > 0 && malform_kind_ >= 0) {
    // Injected fault: the three ways a request can be wrong, in turn.
    switch (malform_kind_) {
      case 0:
        record.offset = uint64_t{1} << 40;  // beyond any window (4 GiB at most)
        break;
      case 1:
        record.offset += courier_nic_atomic_width(op) / 2;  // misaligned
        break;
      default:
        record.op = 1u << 30;  // no such op
        break;
    }
  }

  WriteRequest write;
  write.peer = peer;
  write.src_window = kRequestStagingWindow;
  write.src_offset = AtomicMailbox::request_offset(peer, slot);
  write.dst_window = kRequestMailboxWindow;
  write.dst_offset = AtomicMailbox::request_offset(options_.rank, slot);
  write.length = sizeof(AtomicRecord);
  write.with_imm = true;
  write.imm = encode_atomic_imm(slot, p.next_seq);
  const int rc =
      transport_.post_write(write, internal_cookie(InternalKind::request, peer, slot), error);
  if (rc != COURIER_OK) return rc;
  p.slots[slot] = SlotOwner{true, p.next_seq, cookie, op};
  p.free_hint = (slot + 1) % kMailboxSlots;
  ++p.next_seq;
  ++internal_in_flight_;
  ++awaiting_replies_;
  return COURIER_OK;
}

void ProxySemantics::on_internal_tx(const courier_nic_completion_v1& c) {
  const auto kind = static_cast<InternalKind>((c.cookie >> 40) & 0xff);
  if (kind == InternalKind::barrier) {
    if (c.status != COURIER_OK) {
      log_.error("proxy", "a barrier message to rank {} failed ({}): {}", c.peer, c.status,
                 transport_.last_error());
    }
    return;
  }
  if (internal_in_flight_ > 0) --internal_in_flight_;
  if (c.status == COURIER_OK) return;
  const uint32_t peer = static_cast<uint32_t>((c.cookie >> 24) & 0xffff);
  const uint32_t slot = static_cast<uint32_t>(c.cookie & 0xff);
  if (kind == InternalKind::request && peer < peers_.size() && !peers_[peer].slots.empty()) {
    SlotOwner& owner = peers_[peer].slots[slot];
    if (owner.busy) {
      done_.push_back({owner.cookie, c.status,
                       fmt::format("the emulated {} request to rank {} failed ({}): {}",
                                   courier_nic_atomic_name(owner.op), peer, c.status,
                                   transport_.last_error())});
      owner.busy = false;
      --awaiting_replies_;
    }
    return;
  }
  log_.error("proxy", "the answer to an emulated atomic from rank {} could not be sent ({}): {}",
             peer, c.status, transport_.last_error());
}

bool ProxySemantics::on_rx_imm(const courier_nic_completion_v1& c) {
  const uint32_t peer = c.peer;
  if (peer >= peers_.size()) {
    log_.error("proxy", "immediate data {:#x} from an unknown sender ({}) ignored", c.imm, peer);
    return false;
  }
  const DecodedImm imm = decode_imm(c.imm);
  switch (imm.kind) {
    case ImmKind::ordered_write:
    case ImmKind::notify_write:
      if (peers_[peer].in.arrive(imm.seq) == ReceiveStream::Arrival::duplicate) {
        ++stats_.duplicates;
        return false;
      }
      apply_ready(peer);
      return imm.kind == ImmKind::notify_write;
    case ImmKind::atomic:
      on_request(peer, imm.slot, imm.seq);
      return false;
    case ImmKind::control:
      if (is_barrier(imm.control)) {
        if (barrier_) barrier_->on_message(peer, imm);
      } else {
        on_reply(peer, imm);
      }
      return false;
  }
  return false;
}

void ProxySemantics::on_request(uint32_t peer, uint32_t slot, uint16_t seq) {
  Peer& p = peers_[peer];
  if (p.in.arrive(seq) == ReceiveStream::Arrival::duplicate) {
    ++stats_.duplicates;
    return;
  }
  if (mailbox_ == nullptr) {
    ++stats_.atomics_rejected;
    log_.error("proxy",
               "rank {} sent an emulated atomic, but this rank has no atomic mailbox "
               "(COURIER_ATOMICS differs between ranks?); rejected",
               peer);
    return;  // no mailbox to answer from; the sender times out with a diagnostic
  }
  // The record landed before its immediate data was reported: copy it now.
  p.held.push_back({seq, slot, mailbox_->request_in(peer, slot)});
  if (!p.in.complete_through(seq)) ++stats_.held_back;
  apply_ready(peer);
}

void ProxySemantics::apply_ready(uint32_t peer) {
  Peer& p = peers_[peer];
  for (size_t i = 0; i < p.held.size();) {
    if (!p.in.complete_through(p.held[i].seq)) {
      ++i;
      continue;
    }
    const HeldAtomic held = p.held[i];
    p.held.erase(p.held.begin() + static_cast<std::ptrdiff_t>(i));
    uint64_t old = 0;
    const ControlKind kind = apply(peer, held.seq, held.record, &old);
    PendingReply reply{peer, held.slot, held.seq, kind, old};
    if (!replies_.empty() || !post_reply(reply)) replies_.push_back(reply);
  }
}

ControlKind ProxySemantics::apply(uint32_t peer, uint16_t seq, const AtomicRecord& r,
                                  uint64_t* old) {
  std::string why;
  const uint32_t width = courier_nic_atomic_width(r.op);
  if (r.check != (kRecordCheck ^ seq) || r.seq != seq) {
    why = fmt::format("its record (seq {}) does not match the notification (seq {})", r.seq, seq);
  } else if (r.op != COURIER_NIC_ATOMIC_ADD_U64 && r.op != COURIER_NIC_ATOMIC_ADD_U32) {
    why = fmt::format("unknown op {:#x}", r.op);
  } else if (r.window >= windows_.size() || windows_[r.window].base == nullptr) {
    why = fmt::format("window {} is not registered here", r.window);
  } else if (r.offset % width != 0) {
    why = fmt::format("offset {} is not {}-byte aligned", r.offset, width);
  } else if (r.offset > windows_[r.window].bytes || width > windows_[r.window].bytes - r.offset) {
    why = fmt::format("offset {} + {} bytes lies outside window {} ({} bytes)", r.offset, width,
                      r.window, windows_[r.window].bytes);
  }
  if (!why.empty()) {
    ++stats_.atomics_rejected;
    *old = 0;
    log_.error("proxy", "rank {} sent a malformed emulated atomic (channel {}): {}; rejected", peer,
               r.channel, why);
    return ControlKind::atomic_rejected;
  }
  std::byte* target = windows_[r.window].base + r.offset;
  if (width == 8) {
    *old = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(target)).fetch_add(r.operand);
  } else {
    *old = std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(target))
               .fetch_add(static_cast<uint32_t>(r.operand));
  }
  ++stats_.atomics_applied;
  return ControlKind::atomic_applied;
}

bool ProxySemantics::post_reply(const PendingReply& reply) {
  mailbox_->reply_out(reply.peer, reply.slot) = reply.old;
  WriteRequest write;
  write.peer = reply.peer;
  write.src_window = kReplyStagingWindow;
  write.src_offset = AtomicMailbox::reply_offset(reply.peer, reply.slot);
  write.dst_window = kReplyMailboxWindow;
  write.dst_offset = AtomicMailbox::reply_offset(options_.rank, reply.slot);
  write.length = sizeof(uint64_t);
  write.with_imm = true;
  write.imm = encode_reply_imm(reply.kind, reply.slot, reply.seq);
  std::string error;
  const int rc = transport_.post_write(
      write, internal_cookie(InternalKind::reply, reply.peer, reply.slot), &error);
  if (rc == COURIER_OK) {
    ++internal_in_flight_;
    return true;
  }
  if (rc == -EAGAIN || rc == -EBUSY) return false;
  log_.error("proxy", "answering rank {}'s emulated atomic failed ({}): {}", reply.peer, rc, error);
  return true;  // dropped: the requester reports a timeout
}

void ProxySemantics::on_reply(uint32_t peer, const DecodedImm& imm) {
  if (imm.control != ControlKind::atomic_applied && imm.control != ControlKind::atomic_rejected) {
    log_.error("proxy", "unknown control message {} from rank {} ignored",
               static_cast<uint32_t>(imm.control), peer);
    return;
  }
  Peer& p = peers_[peer];
  if (p.slots.empty()) return;
  SlotOwner& owner = p.slots[imm.slot];
  if (!owner.busy || owner.seq != imm.seq) {
    ++stats_.duplicates;
    return;
  }
  if (imm.control == ControlKind::atomic_applied) {
    done_.push_back({owner.cookie, COURIER_OK, {}});
  } else {
    done_.push_back({owner.cookie, -EINVAL,
                     fmt::format("rank {} rejected the emulated {} (seq {}); its log says why",
                                 peer, courier_nic_atomic_name(owner.op), imm.seq)});
  }
  owner.busy = false;
  --awaiting_replies_;
}

bool ProxySemantics::retry_replies() {
  bool worked = false;
  while (!replies_.empty() && post_reply(replies_.front())) {
    replies_.pop_front();
    worked = true;
  }
  return worked;
}

uint32_t ProxySemantics::atomics_awaiting_answer_from(uint32_t peer) const {
  const auto& slots = peers_[peer].slots;
  return static_cast<uint32_t>(
      std::count_if(slots.begin(), slots.end(), [](const SlotOwner& s) { return s.busy; }));
}

bool ProxySemantics::busy() const {
  if (internal_in_flight_ > 0 || awaiting_replies_ > 0 || !replies_.empty()) return true;
  if (barrier_ && barrier_->busy()) return true;
  return std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.held.empty(); });
}

}  // namespace courier
