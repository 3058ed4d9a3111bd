#include "core/semantics/semantic_transport.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "core/check.hpp"

namespace courier {

namespace {

using cookie::SemanticKind;

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

SemanticTransport::SemanticTransport(ProxyTransport& inner, const SemanticsOptions& options,
                                     AtomicMailbox* mailbox, Logger& log)
    : TransportDecorator(inner), options_(options), mailbox_(mailbox), log_(log) {
  set_up();
}

SemanticTransport::SemanticTransport(std::unique_ptr<ProxyTransport> inner,
                                     const SemanticsOptions& options, AtomicMailbox* mailbox,
                                     Logger& log)
    : TransportDecorator(std::move(inner)), options_(options), mailbox_(mailbox), log_(log) {
  set_up();
}

void SemanticTransport::set_up() {
  ordered_ = (inner_.caps() & COURIER_NIC_CAP_ORDERED_WRITES) != 0;
  peers_.resize(options_.world_size);
  peer_count_ = options_.world_size;
  writes_in_flight_.assign(options_.world_size, 0);
  windows_.resize(kUserWindows);
  fault_rng_.seed(options_.fault_seed ^ (uint64_t{options_.rank} << 32));
  const bool any_imm =
      options_.add_u64 == AtomicStrategyKind::imm || options_.add_u32 == AtomicStrategyKind::imm;
  tag_writes_ = any_imm && !ordered_;
  other_writes_ = !ordered_;
  if (any_imm) {
    if (mailbox_ == nullptr) fail("emulated atomics need an atomic mailbox");
    for (Peer& peer : peers_) peer.slots.resize(kMailboxSlots);
  }
  if (options_.barrier != nullptr) {
    barrier_ = std::make_unique<BarrierEngine>(inner_, options_.barrier, options_.barrier_staging,
                                               options_.barrier_landing, options_.channels);
  }
}

int SemanticTransport::post_barrier(const BarrierRequest& barrier, uint64_t cookie,
                                    std::string* error) {
  if (!barrier_) {
    *error = "BARRIER needs the barrier set-up of a Context";
    return -ENOTSUP;
  }
  // Started now; the completion follows from poll() once every rank arrived.
  barriers_.push_back({barrier, cookie});
  advance_barriers();
  return COURIER_OK;
}

void SemanticTransport::advance_barriers() {
  const bool cancelled = options_.job_failure != nullptr && options_.job_failure->tripped();
  for (size_t i = 0; i < barriers_.size();) {
    const PendingBarrier b = barriers_[i];
    if (cancelled) {
      finish(b.cookie, UINT32_MAX, kCancelledByFailure,
             "BARRIER not completed: " + options_.job_failure->describe());
      barriers_.erase(barriers_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    std::string error;
    switch (barrier_->advance(b.request.channel, b.request.scope, b.request.epoch, &error)) {
      case BarrierEngine::Step::waiting:
        ++i;
        continue;
      case BarrierEngine::Step::done:
        finish(b.cookie, UINT32_MAX, COURIER_OK, {});
        break;
      case BarrierEngine::Step::failed:
        // The ranks disagree (epochs, channels): the command was bad, and
        // it fails on its channel only.
        finish(b.cookie, UINT32_MAX, -EINVAL, std::move(error));
        break;
    }
    barriers_.erase(barriers_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void SemanticTransport::finish(uint64_t cookie, uint32_t peer, int status, std::string why) {
  courier_nic_completion_v1 c{};
  c.kind = COURIER_NIC_COMP_TX;
  c.status = status;
  c.peer = peer;
  c.cookie = cookie;
  finished_.emplace_back(c, std::move(why));
}

void SemanticTransport::set_local_window(uint32_t window, void* base, uint64_t bytes) {
  windows_.at(window) = {static_cast<std::byte*>(base), bytes};
}

AtomicStrategyKind SemanticTransport::strategy_for(uint32_t nic_op) const {
  switch (nic_op) {
    case COURIER_NIC_ATOMIC_ADD_U64:
      return options_.add_u64;
    case COURIER_NIC_ATOMIC_ADD_U32:
      return options_.add_u32;
    default:
      return AtomicStrategyKind::none;
  }
}

int SemanticTransport::refuse_rank(const char* what, uint32_t peer, std::string* error) const {
  *error = fmt::format("{} to rank {} but the job has {} ranks", what, peer, peers_.size());
  return -EINVAL;
}

int SemanticTransport::post_other_write(const WriteRequest& in, uint64_t cookie,
                                        std::string* error) {
  const uint32_t peer = in.peer;
  Peer& p = peers_[peer];
  WriteRequest write = in;
  // Only this layer sets immediate data: what the caller put there goes.
  const bool sequenced = in.notify || tag_writes_;
  write.with_imm = sequenced;
  write.imm = sequenced ? encode_write_imm(in.notify, in.channel, p.next_seq) : 0;
  const uint32_t index = begin_flight(cookie, peer, true);
  const int rc = inner_.post_write(write, cookie::of_user_post(index), error);
  if (rc != COURIER_OK) {
    end_flight(index);
    return rc;
  }
  if (sequenced) ++p.next_seq;
  ++writes_in_flight_[peer];
  return COURIER_OK;
}

int SemanticTransport::post_atomic(const AtomicRequest& atomic, uint64_t cookie,
                                   std::string* error) {
  if (atomic.peer >= peer_count_) return refuse_rank("ATOMIC", atomic.peer, error);
  switch (strategy_for(atomic.op)) {
    case AtomicStrategyKind::hw:
      return post_hw_atomic(atomic, cookie, error);
    case AtomicStrategyKind::imm:
      return post_imm_atomic(atomic, cookie, error);
    case AtomicStrategyKind::none:
      break;
  }
  *error = fmt::format("{} has no atomic strategy here (see COURIER_ATOMICS)",
                       courier_nic_atomic_name(atomic.op));
  return -ENOTSUP;
}

int SemanticTransport::post_hw_atomic(const AtomicRequest& atomic, uint64_t cookie,
                                      std::string* error) {
  if (!ordered_ && writes_in_flight_[atomic.peer] > 0) {
    // Write-then-atomic on an unordered transport: the earlier writes must
    // have completed (= landed, with delivery-complete) first.
    ++stats_.fenced;
    return -EAGAIN;
  }
  const uint32_t index = begin_flight(cookie, atomic.peer, false);
  const int rc = inner_.post_atomic(atomic, cookie::of_user_post(index), error);
  if (rc != COURIER_OK) end_flight(index);
  return rc;
}

int SemanticTransport::post_imm_atomic(const AtomicRequest& atomic, uint64_t cookie,
                                       std::string* error) {
  const uint32_t peer = atomic.peer;
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
  record.op = atomic.op;
  record.seq = p.next_seq;
  record.window = static_cast<uint8_t>(atomic.window);
  record.offset = atomic.offset;
  record.operand = atomic.operand;
  record.channel = atomic.channel;
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
        record.offset += courier_nic_atomic_width(atomic.op) / 2;  // misaligned
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
      inner_.post_write(write, cookie::of_internal(SemanticKind::request, peer, slot), error);
  if (rc != COURIER_OK) return rc;
  p.slots[slot] = SlotOwner{true, p.next_seq, cookie, atomic.op};
  p.free_hint = (slot + 1) % kMailboxSlots;
  ++p.next_seq;
  ++internal_in_flight_;
  ++awaiting_answers_;
  return COURIER_OK;
}

int SemanticTransport::poll(courier_nic_completion_v1* out, uint32_t max) {
  last_.clear();
  if (!barriers_.empty()) advance_barriers();
  // A failure of this layer's own goes out alone (last_error() says why).
  if (!finished_.empty() && !finished_.front().second.empty()) {
    return take_finished(out, max, true);
  }
  const int n = inner_.poll(out, max);
  if (n < 0) return n;
  uint32_t kept = 0;
  for (int i = 0; i < n; ++i) {
    courier_nic_completion_v1& c = out[i];
    if (c.kind == COURIER_NIC_COMP_RX_IMM) {
      // A failed incoming write goes up for the log; what arrived is this
      // layer's, except the user notifications.
      if (c.status != COURIER_OK || on_rx_imm(c)) out[kept++] = c;
      continue;
    }
    const SemanticKind kind = cookie::kind(c.cookie);
    // A plain write comes back with the caller's cookie as it posted it.
    if (kind == SemanticKind::user) {
      finish_flight(c);  // back to the caller's cookie
    } else if (kind != SemanticKind::write) {
      on_internal_tx(c);  // this layer's own
      continue;
    }
    if (kept != static_cast<uint32_t>(i)) out[kept] = c;
    ++kept;
  }
  // Commands finished here meanwhile, where they fit (failures wait for a
  // poll of their own, unless nothing else goes up).
  if (kept < max && !finished_.empty()) {
    kept += static_cast<uint32_t>(take_finished(out + kept, max - kept, kept == 0));
  }
  return static_cast<int>(kept);
}

void SemanticTransport::finish_flight(courier_nic_completion_v1& c) {
  const uint32_t index = cookie::user_index(c.cookie);
  if (index > flight_mask_ || !flights_[index].live) [[unlikely]]
    throw_unknown_cookie(c.cookie);
  Flight& f = flights_[index];
  if (f.is_write) {
    uint32_t& writes = writes_in_flight_[f.peer];
    if (writes > 0) --writes;
  }
  c.cookie = f.cookie;
  f.live = false;
}

void SemanticTransport::throw_unknown_cookie(uint64_t cookie) const {
  throw Error(fmt::format(
      "the transport completed cookie {:#x}, which names no operation in flight", cookie));
}

uint32_t SemanticTransport::free_flight() {
  for (uint32_t i = 0; i <= flight_mask_; ++i) {
    const uint32_t index = (next_flight_ + i) & flight_mask_;
    if (!flights_[index].live) {
      next_flight_ = index + 1;
      return index;
    }
  }
  // Every slot in flight: twice as many (the live ones keep their index).
  const uint32_t size = flight_mask_ + 1;
  flights_.resize(size * 2);
  flight_mask_ = size * 2 - 1;
  next_flight_ = size + 1;
  return size;
}

int SemanticTransport::take_finished(courier_nic_completion_v1* out, uint32_t max,
                                     bool alone_allowed) {
  uint32_t n = 0;
  while (n < max && !finished_.empty()) {
    auto& [completion, why] = finished_.front();
    if (!why.empty()) {
      if (n > 0 || !alone_allowed) break;
      out[0] = completion;
      last_ = std::move(why);
      finished_.pop_front();
      return 1;
    }
    out[n++] = completion;
    finished_.pop_front();
  }
  return static_cast<int>(n);
}

std::string SemanticTransport::last_error() const {
  return last_.empty() ? inner_.last_error() : last_;
}

void SemanticTransport::on_internal_tx(const courier_nic_completion_v1& c) {
  const SemanticKind kind = cookie::kind(c.cookie);
  const uint32_t peer = cookie::internal_peer(c.cookie);
  if (kind == SemanticKind::barrier) {
    if (c.status != COURIER_OK && c.status != kCancelledByFailure) {
      log_.error("proxy", "a barrier message to rank {} failed ({}): {}", peer, c.status,
                 inner_.last_error());
    }
    return;
  }
  if (internal_in_flight_ > 0) --internal_in_flight_;
  if (c.status == COURIER_OK) return;
  const uint32_t slot = cookie::internal_slot(c.cookie);
  if (kind == SemanticKind::request && peer < peers_.size() && !peers_[peer].slots.empty()) {
    SlotOwner& owner = peers_[peer].slots[slot];
    if (owner.busy) {
      finish(owner.cookie, peer, c.status,
             fmt::format("the emulated {} request to rank {} failed ({}): {}",
                         courier_nic_atomic_name(owner.op), peer, c.status, inner_.last_error()));
      owner.busy = false;
      --awaiting_answers_;
    }
    return;
  }
  if (c.status != kCancelledByFailure) {
    log_.error("proxy", "the answer to an emulated atomic from rank {} could not be sent ({}): {}",
               peer, c.status, inner_.last_error());
  }
}

bool SemanticTransport::on_rx_imm(const courier_nic_completion_v1& c) {
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
        on_answer(peer, imm);
      }
      return false;
  }
  return false;
}

void SemanticTransport::on_request(uint32_t peer, uint32_t slot, uint16_t seq) {
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

void SemanticTransport::apply_ready(uint32_t peer) {
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
    post_answer(PendingAnswer{peer, held.slot, held.seq, kind, old});
  }
}

ControlKind SemanticTransport::apply(uint32_t peer, uint16_t seq, const AtomicRecord& r,
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

void SemanticTransport::post_answer(const PendingAnswer& answer) {
  mailbox_->reply_out(answer.peer, answer.slot) = answer.old;
  WriteRequest write;
  write.peer = answer.peer;
  write.src_window = kReplyStagingWindow;
  write.src_offset = AtomicMailbox::reply_offset(answer.peer, answer.slot);
  write.dst_window = kReplyMailboxWindow;
  write.dst_offset = AtomicMailbox::reply_offset(options_.rank, answer.slot);
  write.length = sizeof(uint64_t);
  write.with_imm = true;
  write.imm = encode_reply_imm(answer.kind, answer.slot, answer.seq);
  write.keep_when_full = true;  // no caller to refuse to: kept below while full
  std::string error;
  const int rc = inner_.post_write(
      write, cookie::of_internal(SemanticKind::answer, answer.peer, answer.slot), &error);
  if (rc == COURIER_OK) {
    ++internal_in_flight_;
    return;
  }
  // Dropped (the requester reports a timeout): the job failed, the post was
  // invalid, or no layer below keeps posts refused for room.
  if (rc != kCancelledByFailure) {
    log_.error("proxy", "answering rank {}'s emulated atomic failed ({}): {}", answer.peer, rc,
               error);
  }
}

void SemanticTransport::on_answer(uint32_t peer, const DecodedImm& imm) {
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
    finish(owner.cookie, peer, COURIER_OK, {});
  } else {
    finish(owner.cookie, peer, -EINVAL,
           fmt::format("rank {} rejected the emulated {} (seq {}); its log says why", peer,
                       courier_nic_atomic_name(owner.op), imm.seq));
  }
  owner.busy = false;
  --awaiting_answers_;
}

uint32_t SemanticTransport::atomics_awaiting_answer_from(uint32_t peer) const {
  const auto& slots = peers_[peer].slots;
  return static_cast<uint32_t>(
      std::count_if(slots.begin(), slots.end(), [](const SlotOwner& s) { return s.busy; }));
}

bool SemanticTransport::busy() const {
  if (internal_in_flight_ > 0 || awaiting_answers_ > 0 || !finished_.empty() ||
      !barriers_.empty()) {
    return true;
  }
  if (barrier_ && barrier_->busy()) return true;
  if (std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.held.empty(); })) {
    return true;
  }
  return inner_.busy();
}

bool SemanticTransport::peer_activity(uint32_t peer, PeerActivity* out) const {
  if (peer >= peers_.size()) return false;
  const Peer& p = peers_[peer];
  out->atomics_awaiting_answer = atomics_awaiting_answer_from(peer);
  out->atomics_held = static_cast<uint32_t>(p.held.size());
  out->next_seq_to = p.next_seq;
  out->expected_from = p.in.expected();
  return true;
}

}  // namespace courier
