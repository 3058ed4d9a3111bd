#include "core/proxy/proxy_thread.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "courier/error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace courier {

namespace {
// Empty steps after a refused post before it is retried without a
// completion having arrived.
constexpr uint32_t kRetryHoldoffSteps = 16;
// Full completion batches one step reads before it moves on.
constexpr uint32_t kMaxPollBatchesPerStep = 64;

constexpr uint32_t kMaxGroup = ProxyThread::kMaxGroup;

// The proxy's clock (stall reports, last completions).
uint64_t now_ns() { return JobFailure::now_ns(); }

// The TransferCmd carries a 32-bit two's-complement addend; widen it.
uint64_t widen_operand(AtomicOp op, uint32_t operand) {
  if (op == AtomicOp::add_u32) return operand;
  return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(operand)));
}

// What WRITEs merged into one share: op, flags, window and rank (word0 below
// the sequence number).
constexpr uint64_t kRouteMask = (uint64_t{1} << TransferCmd::kSeqShift) - 1;

// Whether WRITE `next` may join the write `prev` starts: same route (and
// so the same source), no immediate data, contiguous at both ends. Inline:
// the per-command check that most commands fail, before coalesce() looks
// further.
[[gnu::always_inline]] inline bool continues(const TransferCmd& prev, const TransferCmd& next) {
  constexpr uint64_t kImmBit = uint64_t{kCmdFlagImm} << TransferCmd::kFlagsShift;
  // The source first: commands that do not merge usually fail there.
  return uint64_t{next.src_offset()} == uint64_t{prev.src_offset()} + prev.length() &&
         ((next.word0 ^ prev.word0) & kRouteMask) == 0 && (prev.word0 & kImmBit) == 0 &&
         uint64_t{next.dst_offset()} == uint64_t{prev.dst_offset()} + prev.length();
}

TransferCmd with_length(TransferCmd cmd, uint64_t length) {
  constexpr uint64_t kLengthField = TransferCmd::kMaxLength << TransferCmd::kLengthShift;
  cmd.word0 = (cmd.word0 & ~kLengthField) | (length << TransferCmd::kLengthShift);
  return cmd;
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
      watched_(transport, options.job_failure),
      upper_(options.upper_layers ? options.upper_layers(watched_) : nullptr),
      transport_(upper_ ? *upper_ : static_cast<ProxyTransport&>(watched_)),
      channels_(std::move(channels)),
      options_(options),
      log_(log),
      batch_(options.dequeue_batch),
      completions_(options.poll_batch),
      backoff_(options.may_sleep),
      last_completion_ns_(options.world_size, 0) {
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

void ProxyThread::request_stop() {
  stop_.store(true);
  options_.doorbell.ring();  // a sleeping thread sees stop_ now
}

void ProxyThread::stop() {
  request_stop();
  if (thread_.joinable()) thread_.join();
  running_.store(false);
}

bool ProxyThread::try_stop(std::string* why) {
  request_stop();
  if (!thread_.joinable()) {
    running_.store(false);
    return true;
  }
  {
    std::unique_lock lock(mutex_);
    const uint64_t start = JobFailure::now_ns();
    const uint64_t turns = turns_.load(std::memory_order_relaxed);
    // Slices: the bound shrinks when the job fails meanwhile.
    while (!loop_exited_) {
      if (still_unresponsive()) {
        *why = unresponsive_why_;
        return false;
      }
      if (task_done_.wait_for(lock, std::chrono::milliseconds(50), [&] { return loop_exited_; })) {
        break;
      }
      const uint64_t now = JobFailure::now_ns();
      if (wait_expired(start, now)) {
        *why = give_up_on("stop", now - start, turns).what();
        return false;
      }
    }
  }
  // The loop ended: what is left is returning from the thread function.
  thread_.join();
  running_.store(false);
  return true;
}

bool ProxyThread::wait_expired(uint64_t start_ns, uint64_t now_ns) const {
  const JobFailure* failure = options_.job_failure;
  if (failure != nullptr && failure->tripped() &&
      now_ns - std::max(start_ns, failure->since_ns()) >= options_.after_failure_wait_ns) {
    return true;
  }
  return options_.stall_timeout_ns != 0 && now_ns - start_ns >= options_.stall_timeout_ns;
}

bool ProxyThread::still_unresponsive() const {
  return unresponsive_ && turns_.load(std::memory_order_relaxed) == unresponsive_turns_;
}

ProxyUnresponsive ProxyThread::give_up_on(const char* what, uint64_t waited_ns,
                                          uint64_t turns_at_start) {
  const uint64_t turns = turns_.load(std::memory_order_relaxed);
  const WatchedTransport::Activity activity = watched_.activity();
  const JobFailure* failure = options_.job_failure;
  const std::string bound = failure != nullptr && failure->tripped()
                                ? "the bound once " + failure->summary()
                                : std::string("COURIER_TIMEOUT_S");
  std::string doing;
  if (turns == turns_at_start) {
    // The loop did not come round at all: one call never returned.
    doing = fmt::format(
        "its loop has not come round since: it is {}{}", WatchedTransport::describe(activity),
        activity.call == WatchedTransport::Call::none
            ? ""
            : ", a call that does not return (a NIC provider blocked for good, e.g. on a lock "
              "or queue that a killed rank held)");
  } else {
    doing = fmt::format("its loop came round {} times meanwhile (now it is {})",
                        turns - turns_at_start, WatchedTransport::describe(activity));
  }
  std::string text = fmt::format(
      "proxy thread {} did not {}: waited {:.1f} s ({}); {}; giving up on it rather "
      "than hanging",
      index_, what, static_cast<double>(waited_ns) / 1e9, bound, doing);
  const bool in_post = activity.call == WatchedTransport::Call::post_write ||
                       activity.call == WatchedTransport::Call::post_atomic;
  unresponsive_ = true;
  unresponsive_turns_ = turns;
  unresponsive_why_ = text;
  unresponsive_peer_ = in_post ? static_cast<int>(activity.peer) : -1;
  return ProxyUnresponsive(text, unresponsive_peer_);
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
  if (still_unresponsive()) {
    // An earlier wait gave up on it and it has not moved since: do not
    // wait again (teardown calls run() once per window).
    throw ProxyUnresponsive(unresponsive_why_, unresponsive_peer_);
  }
  tasks_.push_back(&pending);
  has_tasks_.store(true, std::memory_order_release);
  options_.doorbell.ring();  // a sleeping thread takes the task now
  const uint64_t start = JobFailure::now_ns();
  const uint64_t turns = turns_.load(std::memory_order_relaxed);
  // In slices: the bound shrinks when the job fails meanwhile.
  while (!task_done_.wait_for(lock, std::chrono::milliseconds(50), [&] { return pending.taken; })) {
    const uint64_t now = JobFailure::now_ns();
    if (!wait_expired(start, now)) continue;
    // Withdrawn while still queued, so the thread can never run it (it
    // refers to the caller's frame, which is about to go).
    std::erase(tasks_, &pending);
    has_tasks_.store(!tasks_.empty(), std::memory_order_release);
    throw give_up_on("take the task", now - start, turns);
  }
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
    for (Task* task : tasks) task->taken = true;
    unresponsive_ = false;  // it answers again
  }
  task_done_.notify_all();
  for (Task* task : tasks) execute(*task);
  return true;
}

void ProxyThread::loop() {
  try {
    const bool may_block = options_.sleep_after_ns != 0 && options_.doorbell.valid();
    while (!stop_.load(std::memory_order_relaxed)) {
      turns_.store(turns_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      bool worked = step();
      if (worked) {
        backoff_.reset();
        idle_since_ns_ = 0;
      } else {
        backoff_.idle(outstanding_ > 0 || refused_ || transport_.busy());
        if (may_block) {
          const uint64_t now = now_ns();
          if (idle_since_ns_ == 0) {
            idle_since_ns_ = now;
          } else if (now - idle_since_ns_ >= options_.sleep_after_ns && sleep_if_idle()) {
            worked = true;
          }
        }
      }
      check_stall(!worked);
    }
  } catch (const std::exception& e) {
    log_.error("proxy", "proxy thread {} stopped: {}", index_, e.what());
    // Producers of these channels would otherwise wait for COURIER_TIMEOUT_S.
    for (ProxyChannel* channel : channels_) {
      mark_channel_fatal(*channel->control, channel->consumer.next_ticket(),
                         ChannelErrorCode::proxy_failed);
      wake_producers(*channel->control);  // blocked producers re-check
    }
    std::lock_guard lock(mutex_);
    fatal_ = e.what();
  }
  // Tasks queued after the loop ended must not wait forever.
  std::vector<Task*> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(tasks_);
    for (Task* task : left) task->taken = true;
    loop_exited_ = true;
  }
  task_done_.notify_all();  // try_stop() waits for loop_exited_
  for (Task* task : left) execute(*task);
}

bool ProxyThread::quiescent() const {
  if (outstanding_ != 0 || transport_.busy() || has_tasks_.load()) return false;
  for (const ProxyChannel* c : channels_) {
    if (c->tracker.prefix() < c->consumer.next_ticket() || c->consumer.ready()) return false;
  }
  return true;
}

bool ProxyThread::sleep_if_idle() {
  // Sleeps until a ring or work; a timeout only looks for work (commands
  // pushed by a kernel nobody rang for, progress a provider needs) and
  // sleeps again, longer, without going through the polling loop.
  if (next_sleep_ns_ == 0) next_sleep_ns_ = std::max<uint64_t>(options_.max_sleep_ns / 16, 1);
  bool woke = false;
  while (!woke && quiescent() && !stop_.load(std::memory_order_relaxed)) {
    turns_.store(turns_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    const uint32_t ticket = options_.doorbell.begin_sleep();
    // Announced as a sleeper: whatever a ringer published before it looked
    // at the sleepers is visible to this step.
    woke = step();
    if (!woke && quiescent()) {
      woke = options_.doorbell.sleep(ticket, next_sleep_ns_);
      if (!woke) next_sleep_ns_ = std::min(next_sleep_ns_ * 2, options_.max_sleep_ns);
    }
    options_.doorbell.end_sleep();
  }
  if (woke) {
    backoff_.reset();
    idle_since_ns_ = 0;
    next_sleep_ns_ = 0;
  }
  return woke;
}

void ProxyThread::check_stall(bool idle_step) {
  // After the job failed, work outstanding to the ranks stays so: every
  // channel is failed and the failure was reported already.
  if (options_.stall_timeout_ns == 0 || failed_) return;
  // Reading the clock every iteration would cost the hot path; every 1024th
  // is plenty for a timeout counted in seconds. An idle step (which yields
  // or sleeps anyway) reads it every time: under load 1024 yields can take
  // longer than the producers' own COURIER_TIMEOUT_S waits, and the report
  // must come first. A channel stalls when it has commands taken but its
  // completion prefix did not move for the timeout, whatever the thread's
  // other channels do.
  if (!idle_step && ++stall_polls_ % 1024 != 0) return;
  const uint64_t now = now_ns();
  bool newly_stalled = false;
  bool still_stalled = false;
  for (ProxyChannel* c : channels_) {
    const uint64_t prefix = c->tracker.prefix();
    // Commands waiting in the ring (a full transport) count as work.
    const bool idle = prefix >= c->consumer.next_ticket() && !c->consumer.ready();
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
    still_stalled |= c->stall_reported;
  }
  if (!still_stalled) stall_deferred_since_ns_ = 0;  // it moved again
  if (!newly_stalled && stall_deferred_since_ns_ == 0) return;
  // A tie waiting for another rank's verdict: nothing to look at before
  // its wait is over (the report walks every command in flight).
  const bool waited = stall_deferred_since_ns_ != 0;
  if (waited && now - stall_deferred_since_ns_ < options_.stall_tie_wait_ns) return;
  uint32_t suspect = UINT32_MAX;
  bool tied = false;
  const std::string report = stall_report(now, &suspect, &tied);
  // A tie is no evidence: over shm a stopped rank soon stalls the ranks
  // that answer it, and from here they look alike. A rank that sees no tie
  // names it first, and its report fails this job too (failed_, above);
  // only if none does within the wait does this rank name its best guess.
  // The wait (ProxyOptions::stall_tie_wait_ns) stays well inside the
  // producers' extra second, so that they still fail with a named rank.
  if (tied && !waited && options_.stall_tie_wait_ns != 0) {
    stall_deferred_since_ns_ = now;
    return;
  }
  stall_deferred_since_ns_ = 0;
  log_.error("proxy", "{}", report);
  // A hang is the job's failure: every rank learns which rank this one
  // waits on, through the path a death takes, instead of each timing out
  // on its own with nothing but "timed out".
  if (suspect != UINT32_MAX && options_.on_transport_failure) {
    options_.on_transport_failure(
        static_cast<int>(suspect),
        fmt::format("proxy thread {} made no progress for {} s (COURIER_TIMEOUT_S) with work "
                    "outstanding, most likely stuck on rank {} (the dump above says why)",
                    index_, options_.stall_timeout_ns / 1'000'000'000u, suspect));
  }
}

// Per rank: the commands posted to it and not completed, from the channels'
// own records (everything taken from a ring was posted or failed, so: the
// span between each channel's completion prefix and its tail, less what
// completed out of order; a BARRIER has no rank). Walks every command in
// flight: for the stall report only.
std::vector<uint64_t> ProxyThread::commands_in_flight() const {
  std::vector<uint64_t> count(options_.world_size, 0);
  for (const ProxyChannel* c : channels_) {
    for (uint64_t t = c->tracker.prefix(); t < c->consumer.next_ticket(); ++t) {
      if (c->tracker.is_done(t)) continue;
      const uint32_t peer = c->destinations[t & c->tickets_mask];
      if (peer < count.size()) ++count[peer];
    }
  }
  return count;
}

// Per rank: the commands waiting in the channels' rings, not yet posted
// (behind a post the full transport refused, or a BARRIER), up to a
// batch per channel.
std::vector<uint64_t> ProxyThread::commands_waiting(uint64_t* total) const {
  std::vector<uint64_t> count(options_.world_size, 0);
  std::vector<TransferCmd> cmds(options_.dequeue_batch);
  *total = 0;
  for (const ProxyChannel* c : channels_) {
    const uint32_t n = c->consumer.peek(cmds.data(), options_.dequeue_batch);
    *total += n;
    for (uint32_t i = 0; i < n; ++i) {
      if (cmds[i].op() != CmdOp::barrier && cmds[i].dst_rank() < count.size()) {
        ++count[cmds[i].dst_rank()];
      }
    }
  }
  return count;
}

std::string ProxyThread::stall_report(uint64_t now, uint32_t* suspect_out, bool* tied_out) const {
  uint64_t oldest = now;
  for (const ProxyChannel* c : channels_) {
    if (c->stall_reported) oldest = std::min(oldest, c->stall_since_ns);
  }
  const double seconds = static_cast<double>(now - oldest) / 1e9;
  uint64_t waiting_total = 0;
  const std::vector<uint64_t> waiting = commands_waiting(&waiting_total);
  std::string text = fmt::format(
      "proxy thread {} made no progress for {:.1f} s (COURIER_TIMEOUT_S) with work outstanding: "
      "{} operations posted and not completed, {} commands waiting in the rings{}",
      index_, seconds, outstanding_, waiting_total,
      refused_ ? " (the transport refused the last post: full)" : "");
  // The oldest incomplete command of each channel holds its completion
  // prefix back: its peer is the first suspect.
  // Channels held back by a posted command that never completed weigh more
  // than those held back by a refused post: a full transport can be the
  // doing of any stuck peer, a missing completion points at its own.
  const uint32_t world = options_.world_size;
  std::vector<uint64_t> blocking(world, 0);
  std::vector<uint64_t> blocking_posted(world, 0);
  for (const ProxyChannel* c : channels_) {
    const uint64_t tail = c->consumer.next_ticket();
    const uint64_t completed = c->tracker.prefix();
    const std::string head =
        c->head ? std::to_string(std::atomic_ref<const uint64_t>(*c->head).load()) : "n/a";
    text += fmt::format(
        "\n  channel {}: head {} (pushed), tail {} (taken by the proxy), "
        "completed {}, in flight {}",
        c->id, head, tail, completed, tail - completed);
    if (c->barrier_posted && c->barrier_ticket == completed) {
      text += fmt::format("; oldest incomplete: command {}, a BARRIER waiting for other ranks",
                          completed);
      continue;
    }
    // Posted (a merged write completes as a whole, so the prefix stops at
    // the first ticket of one), or still in the ring.
    uint32_t peer = c->destinations[completed & c->tickets_mask];
    const bool posted = completed < tail;
    if (!posted) {
      TransferCmd next;
      if (c->consumer.peek(&next, 1) == 0 || next.op() == CmdOp::barrier) continue;
      peer = next.dst_rank();
    }
    text += fmt::format(
        "; oldest incomplete: command {} for {} ({})", completed,
        peer == UINT32_MAX ? std::string("an unknown rank") : fmt::format("rank {}", peer),
        posted ? "posted, no completion" : "not posted: the transport is full");
    if (peer < blocking.size()) {
      ++blocking[peer];
      if (posted) ++blocking_posted[peer];
    }
  }
  // Commands waiting to be posted count against their peer (below): a peer
  // that stopped making room is the likeliest cause of a stall.
  const std::vector<uint64_t> in_flight = commands_in_flight();
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
  uint32_t at_top = 0;  // ranks that hold back as many channels as the suspect
  for (uint32_t peer = 0; peer < world; ++peer) {
    PeerActivity activity;
    (void)transport_.peer_activity(peer, &activity);
    const uint64_t operations = in_flight[peer];
    const uint32_t atomics = activity.atomics_awaiting_answer;
    const uint32_t held = activity.atomics_held;
    if (operations + held + waiting[peer] == 0 && activity.next_seq_to == 0 &&
        activity.expected_from == 0) {
      continue;
    }
    const uint64_t last = peer < last_completion_ns_.size() ? last_completion_ns_[peer] : 0;
    text += fmt::format(
        "\n  rank {}: {} commands outstanding to it ({} of them emulated atomics awaiting "
        "its answer), {} commands for it waiting in the rings; last sequence number sent "
        "to it: {}, seen from it in order: {}; {} of its atomics held back here; {}",
        peer, operations, atomics, waiting[peer], seq_text(activity.next_seq_to),
        seq_text(activity.expected_from), held,
        last == 0
            ? std::string("no completion from it yet")
            : fmt::format("last completion {:.1f} s ago", static_cast<double>(now - last) / 1e9));
    const uint64_t outstanding = operations + waiting[peer];
    if (blocking[peer] + outstanding == 0) continue;  // nothing of ours waits on it
    const uint64_t weight = blocking_posted[peer] * 1'000'000 + blocking[peer] * 1'000;
    if (suspect == UINT32_MAX || weight > suspect_weight) {
      at_top = 1;
    } else if (weight == suspect_weight) {
      ++at_top;
    }
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
    if (at_top > 1) {
      text += fmt::format(
          " ({} ranks hold back as many; no rank that could tell them apart named one first: "
          "the one silent longest)",
          at_top);
    }
  }
  if (suspect_out != nullptr) *suspect_out = suspect;
  if (tied_out != nullptr) *tied_out = at_top > 1;
  return text;
}

bool ProxyThread::step() {
  bool worked = run_pending_tasks();
  if (!failed_ && watched_.failed()) {
    enter_failed_mode();
    worked = true;
  }
  worked |= poll_completions();
  worked |= failed_ ? fail_new_commands() : dequeue_and_post();
  publish();
  return worked;
}

void ProxyThread::enter_failed_mode() {
  failed_ = true;
  failed_why_ = "not posted: " + options_.job_failure->describe();
  refused_ = false;
  // Commands waiting in the rings (refused by a full transport, behind a
  // BARRIER) fail from the next step on, with those still to come; a
  // BARRIER the transport has completes from there, cancelled.
  for (ProxyChannel* channel : channels_) channel->barrier_posted = false;
  log_.warn("proxy",
            "proxy thread {}: {}; posting nothing more (commands not posted so far fail on their "
            "channels, and so will those taken from now on)",
            index_, options_.job_failure->summary());
}

bool ProxyThread::fail_new_commands() {
  bool worked = false;
  for (ProxyChannel* channel : channels_) {
    const uint64_t first = channel->consumer.next_ticket();
    const uint32_t n = channel->consumer.poll(batch_.data(), options_.dequeue_batch);
    if (n == 0) continue;
    worked = true;
    channel->commands.store(channel->commands.load(std::memory_order_relaxed) + n,
                            std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) {
      fail_command(*channel, first + i, ChannelErrorCode::post_failed, failed_why_);
    }
  }
  return worked;
}

bool ProxyThread::dequeue_and_post() {
  // A transport that said -EAGAIN is full until one of our operations
  // completes: retrying earlier only contends for its locks with the peer
  // that has to make room (shm takes the target's queue lock on every
  // attempt). So wait for a completion, or a few empty steps in case room
  // appears another way. The refused command waits in its ring meanwhile,
  // ahead of everything after it.
  if (refused_ && retry_holdoff_ > 0) {
    --retry_holdoff_;
    return false;
  }
  refused_ = false;
  bool worked = false;
  const bool merging = options_.coalesce_bytes != 0;
  const size_t channel_count = channels_.size();
  for (size_t visit = 0; visit < channel_count; ++visit) {
    // From the channel after the one last refused: a channel whose commands
    // fill the transport every time must not starve the others.
    const size_t index = (first_channel_ + visit) % channel_count;
    ProxyChannel* channel = channels_[index];
    if (channel->barrier_posted) {
      // Its later commands follow the BARRIER (other channels go on).
      if (channel->tracker.prefix() <= channel->barrier_ticket) continue;
      channel->barrier_posted = false;
      worked = true;
    }
    // Up to a batch per visit, taken in pieces: after a stop at the ring's
    // head (refused, or a BARRIER waiting) only a few commands first, so a
    // transport that stays full does not cost a whole batch taken and given
    // back per attempt.
    uint32_t budget = options_.dequeue_batch;
    uint32_t piece = channel->stopped ? std::min(kHeadPeek, budget) : budget;
    channel->stopped = false;
    while (budget > 0) {
      const uint64_t first = channel->consumer.next_ticket();
      const uint32_t n = channel->consumer.poll(batch_.data(), piece);
      bool stop = false;
      const uint32_t taken = post_taken(*channel, first, n, merging, &stop);
      // What could not be posted goes back into the ring, ahead of the rest.
      if (taken < n) channel->consumer.give_back(&batch_[taken], n - taken);
      if (taken > 0) {
        // This thread is the only writer: no locked instruction needed.
        channel->commands.store(channel->commands.load(std::memory_order_relaxed) + taken,
                                std::memory_order_relaxed);
        worked = true;
      }
      budget -= taken;
      if (stop) {
        channel->stopped = true;
        break;
      }
      if (n < piece) break;  // the ring is empty
      piece = budget;
    }
    if (refused_) {
      retry_holdoff_ = kRetryHoldoffSteps;
      first_channel_ = (index + 1) % channel_count;
      break;
    }
  }
  return worked;
}

uint32_t ProxyThread::post_taken(ProxyChannel& channel, uint64_t first, uint32_t n, bool merging,
                                 bool* stop) {
  uint32_t taken = 0;  // commands dealt with (posted or failed), from the first
  while (taken < n) {
    const TransferCmd& cmd = batch_[taken];
    const uint64_t ticket = first + taken;
    if (cmd.op() == CmdOp::write) {
      // The common case, straight to the transport.
      if (merging && taken + 1 < n && continues(cmd, batch_[taken + 1])) {
        TransferCmd merged;
        const uint32_t count = coalesce(&batch_[taken], n - taken, &merged);
        if (count > 1) {
          const uint32_t done = post_group(channel, &batch_[taken], merged, ticket, count);
          taken += done;
          if (done < count) {
            refused_ = *stop = true;
            return taken;
          }
          continue;
        }
      }
      if (!post_write(channel, cmd, ticket)) {
        refused_ = *stop = true;
        return taken;
      }
      ++taken;
      continue;
    }
    if (cmd.op() == CmdOp::barrier) {
      const BarrierStart start = start_barrier(channel, cmd, ticket);
      if (start == BarrierStart::wait) {
        *stop = true;
        return taken;
      }
      ++taken;
      if (start == BarrierStart::posted) {
        *stop = true;  // the channel waits for it
        return taken;
      }
      continue;
    }
    if (!post_one(channel, cmd, ticket)) {
      refused_ = *stop = true;
      return taken;
    }
    ++taken;
  }
  return taken;
}

ProxyThread::BarrierStart ProxyThread::start_barrier(ProxyChannel& channel,
                                                     const TransferCmd& barrier, uint64_t ticket) {
  // A BARRIER starts once the channel's earlier commands completed.
  if (channel.tracker.prefix() != ticket) return BarrierStart::wait;
  const uint32_t scope = barrier.flags();
  int rc = -EINVAL;
  if (scope == kBarrierWorld || scope == kBarrierRail) {
    BarrierRequest request;
    request.channel = channel.id;
    request.scope =
        scope == kBarrierRail ? BarrierRequest::Scope::rail : BarrierRequest::Scope::world;
    request.epoch = barrier.word1;
    rc = transport_.post_barrier(request, cookie::of_command(channel.thread_slot, ticket), &error_);
  } else {
    error_ = fmt::format("BARRIER with unknown scope {}", scope);
  }
  if (rc == -EAGAIN || rc == -EBUSY) return BarrierStart::wait;
  if (rc == COURIER_OK) {
    posted(channel, ticket, 1, kNoPeer);
    channel.barrier_posted = true;
    channel.barrier_ticket = ticket;
    return BarrierStart::posted;
  }
  fail_command(channel, ticket,
               rc == -ENOTSUP ? ChannelErrorCode::unsupported : ChannelErrorCode::completion_failed,
               error_);
  error_.clear();
  return BarrierStart::failed;
}

uint32_t ProxyThread::coalesce(const TransferCmd* cmds, uint32_t n, TransferCmd* merged) const {
  const TransferCmd& head = cmds[0];
  // A write with immediate data is one notification per command.
  if ((head.flags() & kCmdFlagImm) != 0) return 1;
  const uint64_t limit =
      std::min<uint64_t>(options_.coalesce_bytes, TransferCmd::kMaxLength);  // 24-bit length
  const uint64_t src = head.src_offset();
  const uint64_t dst = head.dst_offset();
  uint64_t length = head.length();
  const uint32_t most = std::min(n, kMaxGroup);
  uint32_t count = 1;
  for (; count < most; ++count) {
    const TransferCmd& next = cmds[count];
    if (((next.word0 ^ head.word0) & kRouteMask) != 0 || next.src_offset() != src + length ||
        next.dst_offset() != dst + length || length + next.length() > limit) {
      break;
    }
    length += next.length();
  }
  if (count == 1) return 1;
  *merged = with_length(head, length);
  return count;
}

uint32_t ProxyThread::post_group(ProxyChannel& channel, const TransferCmd* members,
                                 const TransferCmd& merged, uint64_t ticket, uint32_t count) {
  const int rc = transport_.post_write(write_of(channel, merged),
                                       cookie::of_command(channel.thread_slot, ticket), &error_);
  if (rc == COURIER_OK) {
    posted(channel, ticket, count, merged.dst_rank());
    channel.coalesced.store(channel.coalesced.load(std::memory_order_relaxed) + count - 1,
                            std::memory_order_relaxed);  // the only writer
    return count;
  }
  if (rc == -EAGAIN || rc == -EBUSY) return 0;
  // Refused as a whole (one of them may lie beyond the window, say): post
  // the commands one by one, so that each gets its own verdict.
  log_.debug("proxy",
             "channel {}: one write for commands {}..{} was refused ({}); posting them one by one",
             channel.id, ticket, ticket + count - 1, error_);
  error_.clear();
  uint32_t done = 0;
  while (done < count && post_one(channel, members[done], ticket + done)) ++done;
  return done;
}

bool ProxyThread::post_refused(ProxyChannel& channel, uint64_t ticket, int rc) {
  if (rc == -EAGAIN || rc == -EBUSY) return false;
  fail_command(channel, ticket,
               rc == -ENOTSUP ? ChannelErrorCode::unsupported : ChannelErrorCode::post_failed,
               error_);
  error_.clear();
  return true;
}

// Returns false when the transport is full (-EAGAIN) and the command must be
// retried; true when it was posted, completed or failed.
bool ProxyThread::post_one(ProxyChannel& channel, const TransferCmd& cmd, uint64_t ticket) {
  switch (cmd.op()) {
    case CmdOp::write:
      return post_write(channel, cmd, ticket);
    case CmdOp::atomic: {
      const auto op = static_cast<AtomicOp>(cmd.flags());
      if (op != AtomicOp::add_u64 && op != AtomicOp::add_u32) {
        fail_command(channel, ticket, ChannelErrorCode::post_failed,
                     fmt::format("unknown atomic op {}", cmd.flags()));
        return true;
      }
      AtomicRequest atomic;
      atomic.peer = cmd.dst_rank();
      atomic.window = cmd.window();
      atomic.offset = cmd.dst_offset();
      atomic.op = op == AtomicOp::add_u64 ? COURIER_NIC_ATOMIC_ADD_U64 : COURIER_NIC_ATOMIC_ADD_U32;
      atomic.operand = widen_operand(op, cmd.operand());
      atomic.result_window = cmd.window();  // non-fetching: no result is written
      atomic.channel = channel.id;
      const int rc =
          transport_.post_atomic(atomic, cookie::of_command(channel.thread_slot, ticket), &error_);
      if (rc != COURIER_OK) return post_refused(channel, ticket, rc);
      posted(channel, ticket, 1, atomic.peer);
      return true;
    }
    case CmdOp::drain:
      // Completion is a prefix: the DRAIN ticket becomes visible as complete
      // only after every earlier ticket of the channel completed.
      channel.tracker.complete(ticket);
      return true;
    case CmdOp::barrier:  // dequeue_and_post starts it (start_barrier), never here
      throw Error(
          fmt::format("proxy thread {}: BARRIER {} of channel {} was to be posted as a "
                      "plain command",
                      index_, ticket, channel.id));
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

void ProxyThread::complete(uint64_t cookie, uint32_t count, int status, const std::string& why) {
  ProxyChannel& channel = *channels_.at(cookie::channel_slot(cookie));
  const uint64_t ticket = cookie::ticket(cookie, channel.tracker.prefix());
  for (uint32_t k = 0; k < count; ++k) {
    if (status != COURIER_OK) {
      fail_command(channel, ticket + k, ChannelErrorCode::completion_failed, why);
    } else {
      channel.tracker.complete(ticket + k);
    }
  }
}

bool ProxyThread::poll_completions() {
  bool worked = false;
  uint64_t batch_now = 0;
  // Full batches are read again at once, but not without end: a flood of
  // incoming notifications must not keep the thread from its tasks and posts.
  // Loaded once: the calls below could change them as far as the compiler
  // knows, and reloading costs the per-completion path.
  const size_t channel_count = channels_.size();
  const size_t peer_count = last_completion_ns_.size();
  for (uint32_t batches = 0; batches < kMaxPollBatchesPerStep; ++batches) {
    int n = transport_.poll(completions_.data(), options_.poll_batch);
    if (n < 0) {
      throw Error("proxy thread " + std::to_string(index_) +
                  ": polling completions failed: " + transport_.last_error());
    }
    for (int i = 0; i < n; ++i) {
      const courier_nic_completion_v1& c = completions_[i];
      if (c.kind == COURIER_NIC_COMP_RX_IMM) {
        if (c.status == COURIER_OK) {  // a user notification (the semantics layer keeps its own)
          imm_received_.fetch_add(1, std::memory_order_relaxed);
        } else {
          imm_failed_.fetch_add(1, std::memory_order_relaxed);
          log_.error("proxy", "proxy thread {}: an incoming write from rank {} failed ({}): {}",
                     index_, static_cast<int>(c.peer), c.status, transport_.last_error());
        }
        continue;
      }
      const uint32_t slot = cookie::channel_slot(c.cookie);
      if (slot >= channel_count) {
        throw Error(fmt::format(
            "proxy thread {}: the transport completed cookie {:#x}, which names no channel of "
            "this thread",
            index_, c.cookie));
      }
      ProxyChannel& channel = *channels_[slot];
      const size_t at = c.cookie & channel.tickets_mask;
      const uint32_t tickets = channel.tickets[at];
      const uint32_t peer = channel.destinations[at];
      if (peer < peer_count) {
        if (batch_now == 0) batch_now = now_ns();  // one clock read per batch
        last_completion_ns_[peer] = batch_now;
      }
      --outstanding_;
      // At least one ticket: a stale or duplicated completion then fails the
      // tracker's check instead of passing unnoticed.
      const uint32_t count = std::max<uint32_t>(tickets, 1);
      if (c.status == COURIER_OK) {  // the common case, without a message
        const uint64_t ticket = cookie::ticket(c.cookie, channel.tracker.prefix());
        channel.tracker.complete(ticket);
        for (uint32_t k = 1; k < count; ++k) channel.tracker.complete(ticket + k);
      } else {
        const std::string why = "transport reported status " + std::to_string(c.status) + ": " +
                                transport_.last_error();
        // -EINVAL and -EOPNOTSUPP: the command itself was bad (a write held
        // back by fault injection is checked only when posted late); it
        // fails on its channel only. Any other status: the transport gave up.
        const bool bad_command =
            c.status == -EINVAL || c.status == -EOPNOTSUPP || c.status == -ENOTSUP;
        // After the job failed, or a retry dropped because it did: a
        // consequence of a failure every rank knows, nothing new to report.
        const bool report = !bad_command && !failed_ && c.status != kCancelledByFailure &&
                            options_.on_transport_failure;
        // A write that timed out may be stuck behind another rank (a stopped
        // rank stalls the ranks that answer it too): the suspect is then the
        // rank this thread's work waits on most, as in the stall report,
        // taken while the command still counts as outstanding.
        uint32_t suspect = peer;
        if (report && c.status == -ETIMEDOUT) {
          uint32_t stuck = UINT32_MAX;
          (void)stall_report(now_ns(), &stuck);
          if (stuck != UINT32_MAX) suspect = stuck;
        }
        complete(c.cookie, count, c.status, why);
        if (report) {
          options_.on_transport_failure(
              static_cast<int>(suspect),
              fmt::format("channel {}: a command to rank {} failed: {}{}", channel.id, peer, why,
                          suspect != peer
                              ? fmt::format(" (this rank's work waits most on rank {})", suspect)
                              : std::string()));
        }
      }
    }
    if (n > 0) retry_holdoff_ = 0;  // room on the transport: retry refused posts now
    worked |= n > 0;
    if (static_cast<uint32_t>(n) < options_.poll_batch) break;
  }
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
