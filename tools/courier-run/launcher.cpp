#include "tools/courier-run/launcher.hpp"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "core/bootstrap/collective_messages.hpp"
#include "core/bootstrap/socket.hpp"
#include "core/check.hpp"
#include "tools/courier-run/child_process.hpp"
#include "tools/courier-run/line_relay.hpp"
#include "tools/courier-run/shm_files.hpp"

extern char** environ;

namespace courier::run {

namespace {

using Clock = std::chrono::steady_clock;

// How long ranks get to exit after SIGTERM before they are killed.
constexpr std::chrono::seconds kStopGrace{5};
// After the last rank exited, how long to wait for its output pipes to close
// (a background process it left behind may hold them open).
constexpr std::chrono::seconds kOutputDrain{2};

// Blocks the signals courier-run reacts to and delivers them through a
// signalfd, so the main poll() loop sees them like any other input. The
// original mask is restored on destruction (children restore it themselves
// before exec).
class SignalWatch {
 public:
  SignalWatch() {
    sigemptyset(&handled_);
    for (int signal : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, signal);
    if (::sigprocmask(SIG_BLOCK, &handled_, &original_) != 0) {
      fail("courier-run: sigprocmask failed: {}", std::strerror(errno));
    }
    fd_.reset(::signalfd(-1, &handled_, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!fd_) {
      ::sigprocmask(SIG_SETMASK, &original_, nullptr);
      fail("courier-run: signalfd failed: {}", std::strerror(errno));
    }
  }
  ~SignalWatch() {
    fd_.reset();
    ::sigprocmask(SIG_SETMASK, &original_, nullptr);
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  int fd() const { return fd_.get(); }
  const sigset_t& original_mask() const { return original_; }

  // The signals that arrived since the last call, in order.
  std::vector<int> take() {
    std::vector<int> signals;
    signalfd_siginfo info{};
    while (::read(fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      signals.push_back(static_cast<int>(info.ssi_signo));
    }
    return signals;
  }

 private:
  sigset_t handled_{};
  sigset_t original_{};
  net::Fd fd_;
};

std::string random_token() {
  net::Fd urandom(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!urandom) fail("courier-run: cannot open /dev/urandom: {}", std::strerror(errno));
  unsigned char bytes[32];
  size_t have = 0;
  while (have < sizeof bytes) {
    ssize_t got = ::read(urandom.get(), bytes + have, sizeof bytes - have);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail("courier-run: cannot read /dev/urandom: {}", std::strerror(errno));
    have += static_cast<size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char byte : bytes) {
    token += kHex[byte >> 4];
    token += kHex[byte & 0xf];
  }
  return token;
}

bool is_job_variable(std::string_view entry) {
  for (std::string_view name :
       {"COURIER_RANK=", "COURIER_WORLD_SIZE=", "COURIER_LOCAL_RANK=", "COURIER_LOCAL_SIZE=",
        "COURIER_BOOTSTRAP=", "COURIER_JOB_TOKEN="}) {
    if (entry.rfind(name, 0) == 0) return true;
  }
  return false;
}

// courier-run's own environment, with the job's variables for `rank` in place
// of any inherited ones (a nested courier-run must not leak its parent's).
std::vector<std::string> rank_environment(int rank, int ranks, uint16_t port,
                                          const std::string& token) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!is_job_variable(*entry)) env.emplace_back(*entry);
  }
  env.push_back(fmt::format("COURIER_RANK={}", rank));
  env.push_back(fmt::format("COURIER_WORLD_SIZE={}", ranks));
  env.push_back(fmt::format("COURIER_LOCAL_RANK={}", rank));
  env.push_back(fmt::format("COURIER_LOCAL_SIZE={}", ranks));
  env.push_back(fmt::format("COURIER_BOOTSTRAP={}", net::format_address("127.0.0.1", port)));
  env.push_back("COURIER_JOB_TOKEN=" + token);
  return env;
}

void say(std::string_view message) {
  write_whole(STDERR_FILENO, fmt::format("courier-run: {}\n", message));
}

// One rank: its process and the relays for its two output streams.
struct Rank {
  int number = 0;
  std::unique_ptr<ChildProcess> process;
  LineRelay stdout_relay;
  LineRelay stderr_relay;
};

class Job {
 public:
  explicit Job(const LaunchOptions& options)
      : options_(options), grace_(grace_seconds(options, std::getenv("COURIER_TIMEOUT_S"))) {}

  int run() {
    start();
    if (options_.timeout_s) {
      job_deadline_ = Clock::now() + std::chrono::seconds(*options_.timeout_s);
    }
    while (!finished()) {
      wait_for_events();
      for (int signal : signals_.take()) {
        if (signal != SIGCHLD) on_stop_signal(signal);
      }
      reap_exited_ranks();
      check_deadlines();
    }
    if (first_failure_ && exit_code_) {
      say(fmt::format("exiting with status {}: {} first", *exit_code_, *first_failure_));
    }
    return exit_code_.value_or(0);
  }

 private:
  void start();
  bool finished();
  void wait_for_events();
  void relay_output(Rank& rank, bool is_stdout);
  void reap_exited_ranks();
  // Reports a rank that exited and decides what its exit means for the job.
  void on_rank_exit(const Rank& rank);
  void check_deadlines();
  void on_stop_signal(int signal);
  // Sends `signal` to every running rank and starts the grace period.
  void stop_ranks(int signal);
  std::vector<int> running_ranks() const;
  void close_pipes();

  const LaunchOptions& options_;
  // Seconds the other ranks get after a failure (docs/launching.md).
  std::chrono::seconds grace_;
  SignalWatch signals_;
  std::vector<Rank> ranks_;
  std::optional<int> exit_code_;
  bool stopping_ = false;
  bool killed_ = false;
  std::optional<Clock::time_point> job_deadline_;
  // Set when a rank failed: the others may exit on their own until then.
  std::optional<Clock::time_point> grace_deadline_;
  // "rank 2 killed by signal 9 (Killed)": the failure that decides the status.
  std::optional<std::string> first_failure_;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

void Job::start() {
  ChildSpec spec;
  spec.path = resolve_program(options_.command[0]);
  spec.argv = options_.command;
  spec.signal_mask = signals_.original_mask();
  const uint16_t port = net::pick_free_tcp_port("127.0.0.1");
  const std::string token = random_token();
  ranks_.reserve(static_cast<size_t>(options_.ranks));
  for (int rank = 0; rank < options_.ranks; ++rank) {
    spec.env = rank_environment(rank, options_.ranks, port, token);
    ranks_.push_back(Rank{rank, std::make_unique<ChildProcess>(spec),
                          LineRelay(STDOUT_FILENO, rank), LineRelay(STDERR_FILENO, rank)});
  }
}

std::vector<int> Job::running_ranks() const {
  std::vector<int> running;
  for (const Rank& rank : ranks_) {
    if (rank.process->running()) running.push_back(rank.number);
  }
  return running;
}

bool Job::finished() {
  if (!running_ranks().empty()) return false;
  for (Rank& rank : ranks_) {
    if (rank.process->stdout_pipe() || rank.process->stderr_pipe()) {
      if (!drain_deadline_) drain_deadline_ = Clock::now() + kOutputDrain;
      return false;
    }
  }
  return true;
}

void Job::wait_for_events() {
  std::vector<pollfd> fds;
  fds.push_back({signals_.fd(), POLLIN, 0});
  // Which rank and stream each further entry belongs to.
  std::vector<std::pair<Rank*, bool>> owners;
  for (Rank& rank : ranks_) {
    if (rank.process->stdout_pipe()) {
      fds.push_back({rank.process->stdout_pipe().get(), POLLIN, 0});
      owners.emplace_back(&rank, true);
    }
    if (rank.process->stderr_pipe()) {
      fds.push_back({rank.process->stderr_pipe().get(), POLLIN, 0});
      owners.emplace_back(&rank, false);
    }
  }
  std::optional<Clock::time_point> wake;
  for (const auto& deadline :
       {stopping_ ? std::nullopt : job_deadline_, stopping_ ? std::nullopt : grace_deadline_,
        killed_ ? std::nullopt : kill_deadline_, drain_deadline_}) {
    if (deadline && (!wake || *deadline < *wake)) wake = deadline;
  }
  const int timeout_ms = wake ? net::milliseconds_until(*wake) : -1;
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
    if (errno == EINTR) return;
    fail("courier-run: poll() failed: {}", std::strerror(errno));
  }
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) relay_output(*owners[i - 1].first, owners[i - 1].second);
  }
}

void Job::relay_output(Rank& rank, bool is_stdout) {
  net::Fd& pipe = is_stdout ? rank.process->stdout_pipe() : rank.process->stderr_pipe();
  LineRelay& relay = is_stdout ? rank.stdout_relay : rank.stderr_relay;
  char buffer[64 * 1024];
  ssize_t got;
  do {
    got = ::read(pipe.get(), buffer, sizeof buffer);
  } while (got < 0 && errno == EINTR);
  if (got > 0) {
    relay.feed(std::span<const char>(buffer, static_cast<size_t>(got)));
    return;
  }
  // End of stream (or a broken pipe): pass on a last unterminated line.
  relay.finish();
  pipe.reset();
}

void Job::reap_exited_ranks() {
  for (Rank& rank : ranks_) {
    RemovedFiles files;
    // A rank that exited is dead, however it ended: whatever shared-memory
    // file still bears its process id (a rank killed by a signal removes
    // nothing) can only be garbage. Removed before the rank is reaped, while
    // its id cannot belong to a new process.
    if (!rank.process->try_reap([&](pid_t pid) { files = remove_shm_files_of(pid); })) continue;
    on_rank_exit(rank);
    if (!files.removed.empty()) {
      say(fmt::format("removed the shared-memory file{} rank {} left: {}",
                      files.removed.size() == 1 ? "" : "s", rank.number,
                      fmt::join(files.removed, ", ")));
    }
    for (const std::string& failure : files.failed) {
      say(fmt::format("cannot remove a shared-memory file rank {} left: {}", rank.number, failure));
    }
  }
}

void Job::on_rank_exit(const Rank& rank) {
  const int status = rank.process->status();
  if (stopping_ || shell_exit_code(status) == 0) return;
  const std::string what = fmt::format("rank {} {}", rank.number, describe_status(status));
  if (first_failure_) {
    say(what);  // during the grace period: the others report their own errors
    return;
  }
  // The first failure decides courier-run's status and ends the job.
  exit_code_ = shell_exit_code(status);
  first_failure_ = what;
  const bool others_running = !running_ranks().empty();
  if (!others_running || grace_.count() == 0) {
    say(fmt::format("{}{}", what, others_running ? "; stopping the other ranks" : ""));
    stop_ranks(SIGTERM);
    return;
  }
  // Courier ranks notice a dead peer by themselves and fail with an error
  // naming it; give them the time to say so before stopping them.
  say(fmt::format("{}; giving the other ranks {} s to exit before stopping them", what,
                  grace_.count()));
  grace_deadline_ = Clock::now() + grace_;
}

void Job::check_deadlines() {
  const Clock::time_point now = Clock::now();
  if (!stopping_ && job_deadline_ && now >= *job_deadline_) {
    const std::vector<int> running = running_ranks();
    if (!running.empty()) {
      say(fmt::format("timed out after {} s with {} still running; stopping them",
                      *options_.timeout_s, format_rank_list(running)));
      if (!exit_code_) exit_code_ = 124;
      stop_ranks(SIGTERM);
    }
  }
  if (!stopping_ && grace_deadline_ && now >= *grace_deadline_) {
    const std::vector<int> running = running_ranks();
    if (!running.empty()) {
      say(fmt::format("{} still running {} s after {}; stopping them", format_rank_list(running),
                      grace_.count(), *first_failure_));
      stop_ranks(SIGTERM);
    }
  }
  if (stopping_ && !killed_ && kill_deadline_ && now >= *kill_deadline_) {
    const std::vector<int> running = running_ranks();
    if (!running.empty()) {
      say(fmt::format("{} still running {} s after being asked to stop; killing them",
                      format_rank_list(running), kStopGrace.count()));
      for (Rank& rank : ranks_) rank.process->signal_group(SIGKILL);
    }
    killed_ = true;
  }
  if (drain_deadline_ && now >= *drain_deadline_) close_pipes();
}

void Job::on_stop_signal(int signal) {
  if (stopping_ && !killed_) {
    // Asked twice: stop waiting for the ranks to clean up.
    say(fmt::format("received SIG{} again; killing the ranks", sigabbrev_np(signal)));
    for (Rank& rank : ranks_) rank.process->signal_group(SIGKILL);
    killed_ = true;
    return;
  }
  if (stopping_) return;
  say(fmt::format("received SIG{}; passing it on to the ranks", sigabbrev_np(signal)));
  if (!exit_code_) exit_code_ = 128 + signal;
  stop_ranks(signal);
}

void Job::stop_ranks(int signal) {
  stopping_ = true;
  for (Rank& rank : ranks_) rank.process->signal_group(signal);
  kill_deadline_ = Clock::now() + kStopGrace;
}

void Job::close_pipes() {
  for (Rank& rank : ranks_) {
    rank.stdout_relay.finish();
    rank.stderr_relay.finish();
    rank.process->stdout_pipe().reset();
    rank.process->stderr_pipe().reset();
  }
}

}  // namespace

int run_job(const LaunchOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace courier::run
