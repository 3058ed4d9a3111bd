#include "core/proxy/proxy_thread.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <chrono>

#include "core/semantics/imm_codec.hpp"
#include "courier/error.hpp"
#include "gpu/fifo_push.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace courier {

namespace {
constexpr uint64_t kTicketBits = 48;
constexpr uint64_t kTicketMask = (uint64_t{1} << kTicketBits) - 1;
// Empty steps after a refused post before it is retried without a
// completion having arrived.
constexpr uint32_t kRetryHoldoffSteps = 16;

uint64_t make_cookie(uint32_t channel_slot, uint64_t ticket) {
  return (uint64_t{channel_slot} << kTicketBits) | (ticket & kTicketMask);
}

}  // namespace

void IdleBackoff::idle(bool outstanding) {
  ++idle_rounds_;
  if (idle_rounds_ < 64) {
    // With operations in flight a completion is due any moment: poll again
    // at once. A pause here adds to the latency of every message on
    // round-trip-bound transports (shm carries one 4 KiB write at a time).
#if defined(__x86_64__)
    if (!outstanding) _mm_pause();
#endif
    return;
  }
  if (outstanding || !may_sleep_) {
    // Work may arrive any moment (a completion, or a peer's write that this
    // thread must progress): keep polling, but yield between polls so that
    // threads sharing the core (this rank's producers) run promptly.
    std::this_thread::yield();
    return;
  }
  if (idle_rounds_ < 1024) {
    std::this_thread::yield();
    return;
  }
  // Nothing in flight for a while: sleep, longer the longer it lasts.
  auto micros = idle_rounds_ < 4096 ? 10 : (idle_rounds_ < 16384 ? 50 : 200);
  std::this_thread::sleep_for(std::chrono::microseconds(micros));
}

ProxyThread::ProxyThread(uint32_t index, ProxyTransport& transport,
                         std::vector<ProxyChannel*> channels, const ProxyOptions& options,
                         Logger& log)
    : index_(index),
      transport_(transport),
      channels_(std::move(channels)),
      options_(options),
      log_(log),
      batch_(options.dequeue_batch),
      completions_(options.poll_batch),
      backoff_(options.may_sleep),
      semantics_(transport, options.semantics, options.mailbox, log),
      last_completion_ns_(options.semantics.world_size, 0) {
  for (uint32_t i = 0; i < channels_.size(); ++i) channels_[i]->thread_slot = i;
}

ProxyThread::~ProxyThread() { stop(); }

void ProxyThread::start() {
  if (running_.exchange(true)) return;
  stop_.store(false);
  {
    std::lock_guard lock(mutex_);
    loop_exited_ = false;
  }
  thread_ = std::thread([this] {
    // Named for top, perf and gdb: "courier-proxy3".
    pthread_setname_np(pthread_self(), ("courier-proxy" + std::to_string(index_)).c_str());
    if (options_.cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(options_.cpu, &set);
      if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        log_.warn("proxy", "proxy thread {}: cannot pin to CPU {}; running unpinned", index_,
                  options_.cpu);
      }
    }
    loop();
  });
}

void ProxyThread::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  running_.store(false);
}

std::string ProxyThread::fatal_error() const {
  std::lock_guard lock(mutex_);
  return fatal_;
}

void ProxyThread::run(const std::function<void()>& task) {
  if (!running_.load()) {
    task();
    return;
  }
  Task pending{&task, {}, false};
  std::unique_lock lock(mutex_);
  if (!fatal_.empty()) {
    throw Error("proxy thread " + std::to_string(index_) + " stopped: " + fatal_);
  }
  if (loop_exited_) {  // stopping: nobody else uses the endpoint any more
    lock.unlock();
    task();
    return;
  }
  tasks_.push_back(&pending);
  has_tasks_.store(true, std::memory_order_release);
  task_done_.wait(lock, [&] { return pending.done; });
  if (!pending.error.empty()) throw Error(pending.error);
}

void ProxyThread::execute(Task& task) {
  std::string error;
  try {
    (*task.fn)();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard lock(mutex_);
  task.error = std::move(error);
  task.done = true;
  task_done_.notify_all();
}

bool ProxyThread::run_pending_tasks() {
  if (!has_tasks_.load(std::memory_order_acquire)) return false;
  std::vector<Task*> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(tasks_);
    has_tasks_.store(false, std::memory_order_relaxed);
  }
  for (Task* task : tasks) execute(*task);
  return true;
}

void ProxyThread::loop() {
  try {
    while (!stop_.load(std::memory_order_relaxed)) {
      const bool worked = step();
      if (worked) {
        backoff_.reset();
      } else {
        backoff_.idle(outstanding_ > 0 || !pending_.empty() || semantics_.busy());
      }
      check_stall();
    }
  } catch (const std::exception& e) {
    log_.error("proxy", "proxy thread {} stopped: {}", index_, e.what());
    // Producers of these channels would otherwise wait for COURIER_TIMEOUT_S.
    for (ProxyChannel* channel : channels_) {
      device::mark_channel_fatal(channel->control, channel->consumer.next_ticket(),
                                 ChannelErrorCode::proxy_failed);
      device::futex_wake_all(&channel->control->completed);  // blocked producers re-check
    }
    std::lock_guard lock(mutex_);
    fatal_ = e.what();
  }
  // Tasks queued after the loop ended must not wait forever.
  std::vector<Task*> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(tasks_);
    loop_exited_ = true;
  }
  for (Task* task : left) execute(*task);
}

void ProxyThread::check_stall() {
  if (options_.stall_timeout_ns == 0) return;
  // Reading the clock every iteration would cost the hot path; every 1024th
  // is plenty for a timeout counted in seconds. A channel stalls when it has
  // commands taken but its completion prefix did not move for the timeout,
  // whatever the thread's other channels do.
  if (++stall_polls_ % 1024 != 0) return;
  const uint64_t now = device::now_ns();
  bool newly_stalled = false;
  for (ProxyChannel* c : channels_) {
    const uint64_t prefix = c->tracker.prefix();
    const bool idle = prefix >= c->consumer.next_ticket() && c->held.empty();
    if (idle || prefix != c->stall_prefix || c->stall_since_ns == 0) {
      c->stall_prefix = prefix;
      c->stall_since_ns = now;
      c->stall_reported = false;
      continue;
    }
    if (!c->stall_reported && now - c->stall_since_ns >= options_.stall_timeout_ns) {
      c->stall_reported = true;
      newly_stalled = true;
    }
  }
  if (newly_stalled) log_.error("proxy", "{}", stall_report(now));
}

std::string ProxyThread::stall_report(uint64_t now) const {
  uint64_t oldest = now;
  for (const ProxyChannel* c : channels_) {
    if (c->stall_reported) oldest = std::min(oldest, c->stall_since_ns);
  }
  const double seconds = static_cast<double>(now - oldest) / 1e9;
  std::string text = fmt::format(
      "proxy thread {} made no progress for {:.1f} s (COURIER_TIMEOUT_S) with work outstanding: "
      "{} operations posted and not completed, {} commands refused by the transport and "
      "waiting",
      index_, seconds, outstanding_, pending_.size());
  // The oldest incomplete command of each channel holds its completion
  // prefix back: its peer is the first suspect.
  // Channels held back by a posted command that never completed weigh more
  // than those held back by a refused post: a full transport can be the
  // doing of any stuck peer, a missing completion points at its own.
  std::vector<uint64_t> blocking(semantics_.world_size(), 0);
  std::vector<uint64_t> blocking_posted(semantics_.world_size(), 0);
  for (const ProxyChannel* c : channels_) {
    const uint64_t tail = c->consumer.next_ticket();
    const uint64_t completed = c->tracker.prefix();
    const std::string head =
        c->head ? std::to_string(std::atomic_ref<const uint64_t>(*c->head).load()) : "n/a";
    text += fmt::format(
        "\n  channel {}: head {} (pushed), tail {} (taken by the proxy), "
        "completed {}, in flight {}",
        c->id, head, tail, completed, tail - completed);
    if (completed >= tail) continue;
    if (!c->held.empty() && c->held.front().second == completed) {
      text += fmt::format("; oldest incomplete: command {}, a BARRIER waiting for other ranks",
                          completed);
      continue;
    }
    uint32_t peer = c->target[completed & (c->target.size() - 1)] >> 1;
    bool posted = true;
    for (const PendingPost& p : pending_) {
      if (p.channel == c && p.ticket == completed) {
        peer = p.cmd.dst_rank();
        posted = false;
      }
    }
    text += fmt::format("; oldest incomplete: command {} for rank {} ({})", completed, peer,
                        posted ? "posted, no completion" : "refused by the transport");
    if (peer < blocking.size()) {
      ++blocking[peer];
      if (posted) ++blocking_posted[peer];
    }
  }
  // Commands the transport refused count against their peer: a peer that
  // stopped making room is the likeliest cause of a stall.
  std::vector<uint64_t> refused(semantics_.world_size(), 0);
  for (const PendingPost& p : pending_) {
    if (p.cmd.dst_rank() < refused.size()) ++refused[p.cmd.dst_rank()];
  }
  auto seq_text = [](uint16_t next) {
    return next == 0 ? std::string("none") : std::to_string(next - 1);
  };
  // The suspect: the rank that holds back most of this thread's channels
  // with a posted command, then with any command; between equals, the one
  // silent longest (no completion of ours since: a stopped rank usually goes
  // silent first, the ranks that wait on it a little later), then the one
  // with most work outstanding.
  uint32_t suspect = UINT32_MAX;
  uint64_t suspect_silent_since = 0;
  uint64_t suspect_weight = 0;
  uint64_t suspect_outstanding = 0;
  for (uint32_t peer = 0; peer < semantics_.world_size(); ++peer) {
    const uint32_t writes = semantics_.writes_in_flight_to(peer);
    const uint32_t atomics = semantics_.atomics_awaiting_answer_from(peer);
    const uint32_t held = semantics_.atomics_held_from(peer);
    if (writes + atomics + held + refused[peer] == 0 && semantics_.next_seq_to(peer) == 0 &&
        semantics_.expected_from(peer) == 0) {
      continue;
    }
    const uint64_t last = peer < last_completion_ns_.size() ? last_completion_ns_[peer] : 0;
    text += fmt::format(
        "\n  rank {}: {} writes and {} atomics outstanding to it, {} commands for it refused "
        "by the transport; last sequence number sent to it: {}, seen from it in order: {}; {} "
        "of its atomics held back here; {}",
        peer, writes, atomics, refused[peer], seq_text(semantics_.next_seq_to(peer)),
        seq_text(semantics_.expected_from(peer)), held,
        last == 0
            ? std::string("no completion from it yet")
            : fmt::format("last completion {:.1f} s ago", static_cast<double>(now - last) / 1e9));
    const uint64_t outstanding = writes + atomics + refused[peer];
    if (blocking[peer] + outstanding == 0) continue;  // nothing of ours waits on it
    const uint64_t weight = blocking_posted[peer] * 1'000'000 + blocking[peer] * 1'000;
    const bool quieter = suspect == UINT32_MAX || weight > suspect_weight ||
                         (weight == suspect_weight &&
                          (last < suspect_silent_since ||
                           (last == suspect_silent_since && outstanding > suspect_outstanding)));
    if (quieter) {
      suspect = peer;
      suspect_silent_since = last;
      suspect_weight = weight;
      suspect_outstanding = outstanding;
    }
  }
  if (suspect != UINT32_MAX) {
    text +=
        fmt::format("\n  most likely stuck on rank {}: it holds back {} of this thread's channels",
                    suspect, blocking[suspect]);
  }
  return text;
}

bool ProxyThread::step() {
  bool worked = run_pending_tasks();
  worked |= poll_completions();
  worked |= semantics_.progress();
  worked |= dequeue_and_post();
  publish();
  return worked;
}

bool ProxyThread::dequeue_and_post() {
  // Channels held by a waiting BARRIER first: they are independent of the
  // transport's room, and one that is released hands its held commands on.
  bool worked = false;
  for (ProxyChannel* channel : channels_) {
    if (!channel->held.empty()) worked |= advance_held(*channel);
  }
  // Retry what the transport refused before taking anything new, so that
  // commands of a channel are posted in ticket order. A transport that said
  // -EAGAIN is full until one of our operations completes: retrying earlier
  // only contends for its locks with the peer that has to make room (shm
  // takes the target's queue lock on every attempt). So wait for a
  // completion, or a few empty steps in case room appears another way.
  if (!pending_.empty() && retry_holdoff_ > 0) {
    --retry_holdoff_;
    return worked;
  }
  size_t retried = 0;
  while (retried < pending_.size()) {
    PendingPost& p = pending_[retried];
    if (!post(*p.channel, p.cmd, p.ticket)) break;
    ++retried;
  }
  if (retried > 0) pending_.erase(pending_.begin(), pending_.begin() + retried);
  if (!pending_.empty()) {
    retry_holdoff_ = kRetryHoldoffSteps;
    return worked || retried > 0;
  }

  worked |= retried > 0;
  for (ProxyChannel* channel : channels_) {
    // A channel behind a waiting BARRIER takes nothing new: its later
    // commands must follow the barrier (other channels go on).
    if (!channel->held.empty()) continue;
    uint64_t first = channel->consumer.next_ticket();
    uint32_t n = channel->consumer.poll(batch_.data(), options_.dequeue_batch);
    if (n == 0) continue;
    worked = true;
    channel->commands.fetch_add(n, std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) {
      const TransferCmd& cmd = batch_[i];
      if (!channel->held.empty() ||
          (cmd.op() == CmdOp::barrier && !try_barrier(*channel, cmd, first + i))) {
        channel->held.push_back({cmd, first + i});
      } else if (cmd.op() != CmdOp::barrier &&
                 (!pending_.empty() || !post(*channel, cmd, first + i))) {
        pending_.push_back({channel, cmd, first + i});
      }
    }
    if (!pending_.empty()) {
      retry_holdoff_ = kRetryHoldoffSteps;
      break;
    }
  }
  return worked;
}

bool ProxyThread::try_barrier(ProxyChannel& channel, const TransferCmd& cmd, uint64_t ticket) {
  // A BARRIER starts once the channel's earlier commands completed.
  if (channel.tracker.prefix() != ticket) return false;
  std::string error;
  const int rc = semantics_.advance_barrier(channel.id, cmd, &error);
  if (rc == -EAGAIN) return false;
  if (rc == COURIER_OK) {
    channel.tracker.complete(ticket);
  } else {
    fail_command(
        channel, ticket,
        rc == -ENOTSUP ? ChannelErrorCode::unsupported : ChannelErrorCode::completion_failed,
        error);
  }
  return true;
}

bool ProxyThread::advance_held(ProxyChannel& channel) {
  auto& [barrier, ticket] = channel.held.front();
  if (!try_barrier(channel, barrier, ticket)) return false;
  channel.held.pop_front();
  // Hand the commands that waited behind it on, up to the next BARRIER.
  while (!channel.held.empty() && channel.held.front().first.op() != CmdOp::barrier) {
    pending_.push_back({&channel, channel.held.front().first, channel.held.front().second});
    channel.held.pop_front();
  }
  retry_holdoff_ = 0;
  return true;
}

// Returns false when the transport is full (-EAGAIN) and the command must be
// retried; true when it was posted, completed or failed.
bool ProxyThread::post(ProxyChannel& channel, const TransferCmd& cmd, uint64_t ticket) {
  const uint64_t cookie = make_cookie(channel.thread_slot, ticket);
  switch (cmd.op()) {
    case CmdOp::write:
    case CmdOp::atomic: {
      std::string error;
      const bool is_write = cmd.op() == CmdOp::write;
      bool completes_later = false;
      const int rc =
          is_write ? semantics_.post_write(channel.id, cmd, cookie, &error)
                   : semantics_.post_atomic(channel.id, cmd, cookie, &completes_later, &error);
      if (rc == COURIER_OK) {
        if (!completes_later) {
          ++outstanding_;
          channel.target[ticket & (channel.target.size() - 1)] =
              (cmd.dst_rank() << 1) | (is_write ? 1u : 0u);
        }
        return true;
      }
      if (rc == -EAGAIN || rc == -EBUSY) return false;
      fail_command(channel, ticket,
                   rc == -ENOTSUP ? ChannelErrorCode::unsupported : ChannelErrorCode::post_failed,
                   error);
      return true;
    }
    case CmdOp::drain:
      // Completion is a prefix: the DRAIN ticket becomes visible as complete
      // only after every earlier ticket of the channel completed.
      channel.tracker.complete(ticket);
      return true;
    case CmdOp::barrier:  // handled by dequeue_and_post (try_barrier), never pending
      return try_barrier(channel, cmd, ticket);
    default:
      fail_command(channel, ticket, ChannelErrorCode::bad_command,
                   "unknown op " + std::to_string(static_cast<int>(cmd.op())));
      return true;
  }
}

void ProxyThread::fail_command(ProxyChannel& channel, uint64_t ticket, ChannelErrorCode code,
                               const std::string& why) {
  channel.errors.fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t> error(channel.control->error);
  uint64_t expected = 0;
  if (error.compare_exchange_strong(expected, encode_channel_error(ticket, code))) {
    log_.error("proxy", "channel {} command {} failed: {}", channel.id, ticket, why);
  } else {
    log_.debug("proxy", "channel {} command {} failed: {}", channel.id, ticket, why);
  }
  channel.tracker.complete(ticket);
}

void ProxyThread::complete(uint64_t cookie, int status, const std::string& why) {
  const uint32_t local_index = static_cast<uint32_t>(cookie >> kTicketBits);
  ProxyChannel& channel = *channels_.at(local_index);
  // Rebuild the full ticket: it lies within one ring depth above the prefix.
  const uint64_t prefix = channel.tracker.prefix();
  const uint64_t ticket = prefix + (((cookie & kTicketMask) - prefix) & kTicketMask);
  if (status != COURIER_OK) {
    fail_command(channel, ticket, ChannelErrorCode::completion_failed, why);
  } else {
    channel.tracker.complete(ticket);
  }
}

bool ProxyThread::poll_completions() {
  bool worked = false;
  uint64_t batch_now = 0;
  for (;;) {
    int n = transport_.poll(completions_.data(), options_.poll_batch);
    if (n < 0) {
      throw Error("proxy thread " + std::to_string(index_) +
                  ": polling completions failed: " + transport_.last_error());
    }
    for (int i = 0; i < n; ++i) {
      const courier_nic_completion_v1& c = completions_[i];
      if (c.kind == COURIER_NIC_COMP_RX_IMM) {
        if (c.status == COURIER_OK) {
          if (semantics_.on_rx_imm(c)) imm_received_.fetch_add(1, std::memory_order_relaxed);
        } else {
          imm_failed_.fetch_add(1, std::memory_order_relaxed);
          log_.error("proxy", "proxy thread {}: an incoming write from rank {} failed ({}): {}",
                     index_, static_cast<int>(c.peer), c.status, transport_.last_error());
        }
        continue;
      }
      if ((c.cookie >> kTicketBits) == ProxySemantics::kInternalSlot) {
        semantics_.on_internal_tx(c);
        continue;
      }
      ProxyChannel& channel = *channels_.at(static_cast<uint32_t>(c.cookie >> kTicketBits));
      const uint32_t target = channel.target[c.cookie & (channel.target.size() - 1)];
      semantics_.on_user_tx(target >> 1, (target & 1) != 0);
      if ((target >> 1) < last_completion_ns_.size()) {
        if (batch_now == 0) batch_now = device::now_ns();  // one clock read per batch
        last_completion_ns_[target >> 1] = batch_now;
      }
      --outstanding_;
      complete(c.cookie, c.status,
               c.status == COURIER_OK ? std::string()
                                      : "transport reported status " + std::to_string(c.status) +
                                            ": " + transport_.last_error());
    }
    if (n > 0) retry_holdoff_ = 0;  // room on the transport: retry refused posts now
    worked |= n > 0;
    if (static_cast<uint32_t>(n) < options_.poll_batch) break;
  }
  // Commands the semantics layer finished (emulated atomics answered).
  for (const UserCompletion& done : semantics_.completions()) {
    complete(done.cookie, done.status, done.error);
    worked = true;
  }
  semantics_.completions().clear();
  return worked;
}

void ProxyThread::publish() {
  for (ProxyChannel* channel : channels_) {
    uint64_t prefix = channel->tracker.prefix();
    if (prefix != channel->published) {
      channel->published = prefix;
      publish_completed(*channel->control, prefix);
    }
  }
}

}  // namespace courier
