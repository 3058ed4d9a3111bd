// A proxy thread: owns some FIFO channels and one transport endpoint, turns
// the commands it dequeues into transport operations, and publishes
// completions back to the producers.
//
// Channels are mapped to threads round-robin (channel c -> thread c % P).
// Everything that touches the endpoint runs on this thread, including the
// set-up tasks other threads hand it with run().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/log.hpp"
#include "core/proxy/cookie_codec.hpp"
#include "core/proxy/doorbell.hpp"
#include "core/proxy/fifo_consumer.hpp"
#include "core/proxy/job_failure.hpp"
#include "core/proxy/proxy_transport.hpp"
#include "core/proxy/watched_transport.hpp"
#include "courier/device_channel.hpp"
#include "courier/error.hpp"

namespace courier {

// Host-side view of one FIFO channel.
struct ProxyChannel {
  ProxyChannel(uint32_t id, TransferCmd* slots, FifoControl* control, uint32_t depth)
      : id(id),
        consumer(slots, depth, id),
        tracker(depth),
        control(control),
        tickets(depth),
        tickets_mask(depth - 1),
        destinations(depth) {}

  uint32_t id;
  FifoConsumer consumer;
  CompletionTracker tracker;
  FifoControl* control;
  uint64_t published = 0;    // last value stored to control->completed
  uint32_t thread_slot = 0;  // index among its proxy thread's channels (cookie_codec.hpp)
  std::atomic<uint64_t> commands{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> coalesced{0};  // commands merged into another's write
  // Per ring slot of a posted operation's (first) ticket: the tickets its
  // TX completion completes (more than one for merged WRITEs).
  std::vector<uint32_t> tickets;
  uint32_t tickets_mask;  // tickets.size() - 1, kept: the per-command paths index with it
  // Per ring slot of a posted command: the rank it went to, for the stall
  // report ("oldest incomplete: command 7 for rank 2", commands in flight
  // and the last completion per rank).
  std::vector<uint32_t> destinations;
  // A BARRIER went to the transport and has not completed: the channel's
  // later commands wait in the ring behind it (other channels go on).
  bool barrier_posted = false;
  uint64_t barrier_ticket = 0;
  // The last visit stopped at the ring's head (a refused post, a BARRIER):
  // the next reads a few commands first (ProxyThread::dequeue_and_post).
  bool stopped = false;
  // Hang diagnostics (proxy thread only): the prefix last seen, since when.
  uint64_t stall_prefix = 0;
  uint64_t stall_since_ns = 0;
  bool stall_reported = false;
  // The producers' ticket counter when the proxy can read it (host memory),
  // for hang diagnostics; null when it lives in GPU memory.
  const uint64_t* head = nullptr;
};

struct ProxyOptions {
  uint32_t dequeue_batch = 32;  // commands taken from one channel per visit
  // COURIER_COALESCE_BYTES: adjacent contiguous WRITEs of one channel and
  // dequeue batch to one peer and window, without immediate data, go out as
  // one transport write of at most this many bytes; 0 = never merge.
  uint32_t coalesce_bytes = 0;
  uint32_t poll_batch = 32;  // COURIER_DRAIN_BATCH
  // False when the transport only moves data while the target polls
  // (no COURIER_NIC_CAP_PASSIVE_TARGET): an idle proxy then yields but never
  // sleeps, since a peer's write may be waiting for this very thread.
  bool may_sleep = true;
  // Sleeping while idle (docs/fifo-and-proxy.md, "Idle proxies"): after
  // sleep_after_ns with nothing to do and nothing in flight, the thread
  // blocks on `doorbell` for at most max_sleep_ns at a time (1/16 of it
  // first, doubling) and is back to polling once woken by a ring or by work
  // it finds. 0 or no doorbell: never (COURIER_PROXY_SLEEP_MS).
  uint64_t sleep_after_ns = 0;
  uint64_t max_sleep_ns = 0;
  Doorbell doorbell;
  // CPU the thread is pinned to, or -1 to leave placement to the kernel.
  int cpu = -1;
  // Ranks of the job (the stall report's per-rank lines).
  uint32_t world_size = 1;
  // The layers the thread drives above its failure watch (WatchedTransport,
  // over the transport it is given): the Context puts the semantics layer
  // there (core/semantics/semantic_transport.hpp). Unset: the thread drives
  // the watched transport itself.
  std::function<std::unique_ptr<ProxyTransport>(ProxyTransport& below)> upper_layers;
  // Work outstanding without any progress for this long: the thread prints
  // a diagnostic dump (COURIER_TIMEOUT_S); 0 = never.
  uint64_t stall_timeout_ns = 0;
  // A stall whose suspect is a tie (several ranks hold back as many
  // channels) waits this long for a rank that can tell them apart to name
  // one first (its report fails the job, and this thread with it); then it
  // names the one silent longest. 0: no wait.
  uint64_t stall_tie_wait_ns = 0;
  // Called (on this thread) when the transport completes a command with an
  // error, after its own retries, or when the thread stalled for
  // stall_timeout_ns: the peer it was for (or most likely stuck on), and
  // what happened.
  // Nobody else sees such a failure, so the Context makes it the job's.
  // (Bad commands, a bad rank, window or range: -EINVAL, -EOPNOTSUPP,
  // whether refused at posting or completed with that status, fail on their
  // channel only.)
  std::function<void(int peer, const std::string& what)> on_transport_failure;
  // The job's failure (owned by the Context; null: none is ever known).
  // Once it tripped the thread posts nothing more: the commands it holds and
  // those it takes from then on fail on their channels, held retries are
  // dropped, and no failure is reported again (docs/fifo-and-proxy.md,
  // "Failures").
  const JobFailure* job_failure = nullptr;
  // How long run() waits for the thread to take a task, and try_stop() for
  // it to stop, once the job failed (counted from the failure at the
  // earliest). A thread that answers at all answers within microseconds;
  // one that does not is most likely inside a provider call that a dead
  // rank keeps from returning. Before a failure the bound is
  // stall_timeout_ns (none when that is 0).
  uint64_t after_failure_wait_ns = 2'000'000'000;
};

// A proxy thread did not take a task (or did not stop) within its bound;
// the message says what it was doing. The task was withdrawn: it never runs.
class ProxyUnresponsive : public Error {
 public:
  ProxyUnresponsive(const std::string& what, int peer) : Error(what), peer_(peer) {}
  // The rank of the transport call it is stuck in, -1 when not in a post.
  int peer() const { return peer_; }

 private:
  int peer_;
};

// Sleeps more the longer a proxy finds nothing to do, so that several busy
// processes sharing a few cores still make progress; any work resets it.
class IdleBackoff {
 public:
  explicit IdleBackoff(bool may_sleep) : may_sleep_(may_sleep) {}
  void reset() { idle_rounds_ = 0; }
  // `outstanding`: operations are in flight, so completions are due soon:
  // never sleep long.
  void idle(bool outstanding);

 private:
  uint32_t idle_rounds_ = 0;
  bool may_sleep_;
};

class ProxyThread {
 public:
  // WRITEs merged into one transport write at most.
  static constexpr uint32_t kMaxGroup = 0x7fff;

  ProxyThread(uint32_t index, ProxyTransport& transport, std::vector<ProxyChannel*> channels,
              const ProxyOptions& options, Logger& log);
  ~ProxyThread();
  ProxyThread(const ProxyThread&) = delete;
  ProxyThread& operator=(const ProxyThread&) = delete;

  void start();
  // Stops after the current iteration; outstanding operations are abandoned.
  // Waits for the thread as long as it takes: see try_stop().
  void stop();
  // Asks the thread to stop and returns at once (to stop several together).
  void request_stop();
  // stop(), but waits for the loop to end only as long as run() waits for a
  // task. False, with *why saying what the thread is doing, when it did not
  // end in time: the thread then goes on running and may still use all it
  // was given (its transport, channels, options, this object), so the owner
  // must leak this object and all of that rather than destroy it (the
  // destructor would wait for good). Leaking is the lesser evil: the
  // alternative is a process that never exits.
  bool try_stop(std::string* why);

  // Runs `task` on the proxy thread (or inline when not started) and waits.
  // Exceptions thrown by the task are rethrown here. The wait for the
  // thread to take the task is bounded (ProxyOptions::stall_timeout_ns,
  // after_failure_wait_ns once the job failed): past it the task is
  // withdrawn, never to run, and ProxyUnresponsive says what the thread is
  // doing; later calls then fail at once while the thread's loop has not
  // come round since. A task the thread took is waited for to the end: it
  // may use the caller's frame, and it is a short call into the backend on
  // a thread that is back in its loop.
  void run(const std::function<void()>& task);

  // Immediate-data notifications received by this thread's endpoint.
  uint64_t imm_received() const { return imm_received_.load(std::memory_order_relaxed); }
  // Incoming writes with immediate data that completed with an error.
  uint64_t imm_failed() const { return imm_failed_.load(std::memory_order_relaxed); }
  // Set when the thread stopped on an unrecoverable error.
  std::string fatal_error() const;

 private:
  void loop();
  bool step();
  // Nothing taken and not completed, refused, held or owed to a peer.
  bool quiescent() const;
  // Blocks on the doorbell once (ProxyOptions), unless there is work; true
  // when that ended with work to do (a ring, or found before blocking).
  bool sleep_if_idle();
  // Prints what this thread waits for once one of its channels with work
  // taken saw no completion for stall_timeout_ns (once per stall).
  // `idle_step`: the last step found nothing to do.
  void check_stall(bool idle_step);
  // `*suspect` (when given): the rank most likely stuck, UINT32_MAX if none;
  // `*tied` (when given): whether another rank held back as much.
  std::string stall_report(uint64_t now, uint32_t* suspect = nullptr, bool* tied = nullptr) const;
  // Per rank: this thread's commands posted to it and not completed, and
  // those waiting in the rings (*total: all of them, BARRIERs included).
  std::vector<uint64_t> commands_in_flight() const;
  std::vector<uint64_t> commands_waiting(uint64_t* total) const;
  bool dequeue_and_post();
  // Posts the `n` commands poll() took into batch_ (the first with ticket
  // `first`) in order; returns how many were dealt with (posted or failed).
  // *stop: the rest goes back into the ring (the transport refused one:
  // refused_, or a BARRIER waits or was posted).
  uint32_t post_taken(ProxyChannel& channel, uint64_t first, uint32_t n, bool merging, bool* stop);
  // Commands read at first after a channel stopped at its ring's head.
  static constexpr uint32_t kHeadPeek = 4;
  // How many of `cmds` (n > 0, the first a WRITE) go out as one write; for
  // more than one, *merged spans them.
  uint32_t coalesce(const TransferCmd* cmds, uint32_t n, TransferCmd* merged) const;
  // Posts `count` WRITEs (`members`, from `ticket`) as one write, `merged`;
  // a group the transport refuses as a whole (not for room) goes member by
  // member. Returns the tickets dealt with (posted or failed): fewer than
  // `count` when the transport is full (-EAGAIN), the rest then stays in
  // the ring.
  uint32_t post_group(ProxyChannel& channel, const TransferCmd* members, const TransferCmd& merged,
                      uint64_t ticket, uint32_t count);
  // Returns false when the transport is full (-EAGAIN): the command stays in
  // the ring; true when it was posted, completed or failed.
  bool post_one(ProxyChannel& channel, const TransferCmd& cmd, uint64_t ticket);
  // One WRITE (the per-command path, inline); same returns as post_one().
  bool post_write(ProxyChannel& channel, const TransferCmd& cmd, uint64_t ticket) {
    const int rc = transport_.post_write(write_of(channel, cmd),
                                         cookie::of_command(channel.thread_slot, ticket), &error_);
    if (rc != COURIER_OK) return post_refused(channel, ticket, rc);
    posted(channel, ticket, 1, cmd.dst_rank());
    return true;
  }
  // Records an operation the transport took: `count` tickets from `ticket`,
  // for rank `peer` (kNoPeer: a BARRIER).
  void posted(ProxyChannel& channel, uint64_t ticket, uint32_t count, uint32_t peer) {
    ++outstanding_;
    const size_t at = ticket & channel.tickets_mask;
    channel.tickets[at] = count;
    channel.destinations[at] = peer;
    for (uint32_t k = 1; k < count; ++k) {
      channel.destinations[(ticket + k) & channel.tickets_mask] = peer;
    }
  }
  static constexpr uint32_t kNoPeer = UINT32_MAX;
  // What a WRITE command asks of the transport.
  static WriteRequest write_of(const ProxyChannel& channel, const TransferCmd& cmd) {
    WriteRequest write;
    write.peer = cmd.dst_rank();
    write.dst_window = cmd.window();
    write.src_window = cmd.source() == 0 ? cmd.window() : kFirstSourceWindow + cmd.source() - 1;
    write.src_offset = cmd.src_offset();
    write.dst_offset = cmd.dst_offset();
    write.length = cmd.length();
    write.channel = channel.id;
    write.notify = (cmd.flags() & kCmdFlagImm) != 0;
    return write;
  }
  // A post that did not go through: false for -EAGAIN/-EBUSY (offer it
  // again), otherwise the command fails with error_; true.
  bool post_refused(ProxyChannel& channel, uint64_t ticket, int rc);
  // A BARRIER at the head of a channel's ring: posted once the channel's
  // earlier commands completed (then the channel waits for its completion),
  // failed when the transport rejects it, or left in the ring (wait).
  enum class BarrierStart { wait, posted, failed };
  BarrierStart start_barrier(ProxyChannel& channel, const TransferCmd& barrier, uint64_t ticket);
  bool poll_completions();
  void fail_command(ProxyChannel& channel, uint64_t ticket, ChannelErrorCode code,
                    const std::string& why);
  // `count` tickets from the one in `cookie` finished (a TX completion or a
  // semantics-layer answer); all of them fail when status is not COURIER_OK.
  void complete(uint64_t cookie, uint32_t count, int status, const std::string& why);
  void publish();
  bool run_pending_tasks();
  // Once the job failed: stops posting (failed_); what waits in the rings
  // fails from then on (fail_new_commands).
  void enter_failed_mode();
  // In failed mode, in place of dequeue_and_post(): commands taken from now
  // on fail on their channels without reaching the transport.
  bool fail_new_commands();
  // Whether a wait on this thread that began at `start_ns` is over its
  // bound (run(), try_stop()).
  bool wait_expired(uint64_t start_ns, uint64_t now_ns) const;
  // What the thread is doing, for a caller that gave up waiting for it to
  // `what` ("take the task", "stop") after `waited_ns` (mutex_ held); marks
  // it unresponsive.
  ProxyUnresponsive give_up_on(const char* what, uint64_t waited_ns, uint64_t turns_at_start);
  // Whether an earlier wait gave up on the thread and its loop has not come
  // round since (mutex_ held).
  bool still_unresponsive() const;

  uint32_t index_;
  // Every call into the transport below the upper layers goes through it
  // (refused once the job failed; recorded for diagnostics).
  WatchedTransport watched_;
  std::unique_ptr<ProxyTransport> upper_;  // ProxyOptions::upper_layers over watched_
  ProxyTransport& transport_;              // the top: *upper_, or watched_
  std::vector<ProxyChannel*> channels_;
  ProxyOptions options_;
  Logger& log_;

  std::vector<TransferCmd> batch_;
  std::string error_;  // why a post failed (kept empty otherwise: no string per command)
  std::vector<courier_nic_completion_v1> completions_;
  // The transport refused a post with -EAGAIN (the command stays in its
  // ring, retried first: see dequeue_and_post).
  bool refused_ = false;
  uint64_t outstanding_ = 0;
  // Steps left before refused posts are retried without a completion having
  // arrived meanwhile (see dequeue_and_post).
  uint32_t retry_holdoff_ = 0;
  // The channel dequeue_and_post() visits first: the one after the channel
  // whose post the transport last refused.
  size_t first_channel_ = 0;
  IdleBackoff backoff_;
  // Per peer: when a completion of ours for it last arrived (device::now_ns,
  // 0 = never), for the stall report's suspect.
  std::vector<uint64_t> last_completion_ns_;
  uint32_t stall_polls_ = 0;
  // A stall whose suspect is a tie, waiting (check_stall) for a rank that
  // can tell to name one first; 0 when none waits.
  uint64_t stall_deferred_since_ns_ = 0;
  uint64_t idle_since_ns_ = 0;  // when the current run of idle steps began; 0 while working
  uint64_t next_sleep_ns_ = 0;  // the next sleep's bound (doubles up to max_sleep_ns)
  // The job failed and this thread knows it: nothing is posted any more.
  bool failed_ = false;
  std::string failed_why_;  // the message commands fail with from then on

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> imm_received_{0};
  std::atomic<uint64_t> imm_failed_{0};
  // Iterations of the loop so far (this thread writes it): one that does not
  // move while a caller waits means the thread is stuck inside one call.
  std::atomic<uint64_t> turns_{0};

  // A set-up task handed over by run(). Only the message of a failure
  // crosses threads (no exception_ptr: its reference count is invisible to
  // ThreadSanitizer and the message is all the caller needs).
  struct Task {
    const std::function<void()>* fn;
    std::string error;
    bool taken = false;  // the thread has it: it runs to the end
    bool done = false;
  };
  void execute(Task& task);

  mutable std::mutex mutex_;  // guards tasks_, fatal_, every Task and the unresponsive_ state
  std::condition_variable task_done_;  // a task done, taken, or the loop ended
  std::atomic<bool> has_tasks_{false};
  std::vector<Task*> tasks_;
  bool loop_exited_ = false;  // no thread will pick up tasks any more
  std::string fatal_;
  // A wait gave up on this thread when its loop had come round
  // unresponsive_turns_ times; the description it gave.
  bool unresponsive_ = false;
  uint64_t unresponsive_turns_ = 0;
  std::string unresponsive_why_;
  int unresponsive_peer_ = -1;
};

}  // namespace courier
