// Graphviz through its `dot` program rather than by linking libgvc: Graphviz
// stays a run-time tool that only --svg needs, so courier-info builds and
// runs without it (and says what to install when it is asked to draw), and
// a layout that fails or crashes does so in its own process.
#include "graphviz.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/bootstrap/socket.hpp"
#include "courier/error.hpp"

extern char** environ;

namespace courier::info {

namespace {

using net::Fd;

// A few dozen nodes take dot milliseconds; this only bounds a stuck dot.
constexpr std::chrono::seconds kDotTimeout{60};
constexpr std::string_view kInstallHint =
    "install Graphviz (apt-get install graphviz), or write the graph with --dot FILE and "
    "render it elsewhere";

[[noreturn]] void fail_errno(std::string_view what) {
  throw Error(fmt::format("{}: {}", what, std::strerror(errno)));
}

struct Pipe {
  Fd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail_errno("cannot create a pipe for Graphviz's dot");
  return {Fd(fds[0]), Fd(fds[1])};
}

// While it lives, writing to a pipe whose reader has gone fails with EPIPE
// instead of killing courier-info (a dot that stops early, for one).
class SigpipeIgnored {
 public:
  SigpipeIgnored() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &previous_);
  }
  ~SigpipeIgnored() { ::sigaction(SIGPIPE, &previous_, nullptr); }
  SigpipeIgnored(const SigpipeIgnored&) = delete;
  SigpipeIgnored& operator=(const SigpipeIgnored&) = delete;

 private:
  struct sigaction previous_ {};
};

// posix_spawn's file actions and attributes, destroyed once.
class SpawnSetup {
 public:
  SpawnSetup() {
    ::posix_spawn_file_actions_init(&actions_);
    ::posix_spawnattr_init(&attr_);
  }
  ~SpawnSetup() {
    ::posix_spawn_file_actions_destroy(&actions_);
    ::posix_spawnattr_destroy(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  posix_spawn_file_actions_t* actions() { return &actions_; }
  posix_spawnattr_t* attr() { return &attr_; }

 private:
  posix_spawn_file_actions_t actions_;
  posix_spawnattr_t attr_;
};

// The dot process; killed and reaped if left before it was waited for.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) fail_errno("waiting for Graphviz's dot");
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

// dot's stderr for a message: trimmed, and not a whole page of it.
std::string tidy(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  constexpr size_t kMax = 2000;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

}  // namespace

std::string render_with_graphviz(std::string_view dot_text, std::string_view format) {
  Pipe in = make_pipe(), out = make_pipe(), err = make_pipe();
  SpawnSetup setup;
  ::posix_spawn_file_actions_adddup2(setup.actions(), in.read.get(), STDIN_FILENO);
  ::posix_spawn_file_actions_adddup2(setup.actions(), out.write.get(), STDOUT_FILENO);
  ::posix_spawn_file_actions_adddup2(setup.actions(), err.write.get(), STDERR_FILENO);
  // dot gets SIGPIPE's default back, and no blocked signals.
  sigset_t defaults, empty;
  ::sigemptyset(&defaults);
  ::sigaddset(&defaults, SIGPIPE);
  ::sigemptyset(&empty);
  ::posix_spawnattr_setsigdefault(setup.attr(), &defaults);
  ::posix_spawnattr_setsigmask(setup.attr(), &empty);
  ::posix_spawnattr_setflags(setup.attr(), POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  const std::string type = fmt::format("-T{}", format);
  std::array<char*, 3> argv = {const_cast<char*>("dot"), const_cast<char*>(type.c_str()), nullptr};
  SigpipeIgnored sigpipe;
  pid_t pid = -1;
  const int spawned =
      ::posix_spawnp(&pid, "dot", setup.actions(), setup.attr(), argv.data(), environ);
  if (spawned == ENOENT) {
    throw Error(
        fmt::format("Graphviz's 'dot' program was not found on PATH (is Graphviz installed?): {}",
                    kInstallHint));
  }
  if (spawned != 0) {
    throw Error(fmt::format("cannot run Graphviz's 'dot' program: {}: {}", std::strerror(spawned),
                            kInstallHint));
  }
  Child child(pid);
  in.read.reset();
  out.write.reset();
  err.write.reset();
  if (::fcntl(in.write.get(), F_SETFL, O_NONBLOCK) != 0) fail_errno("Graphviz's dot input");

  // Feed the graph and drain both outputs together: dot may write before it
  // has read everything, and a full pipe either way would stall both sides.
  std::string rendered, messages;
  size_t written = 0;
  if (dot_text.empty()) in.write.reset();
  const net::Deadline deadline = net::deadline_after(kDotTimeout);
  while (in.write.valid() || out.read.valid() || err.read.valid()) {
    std::vector<pollfd> fds;
    if (in.write.valid()) fds.push_back({in.write.get(), POLLOUT, 0});
    if (out.read.valid()) fds.push_back({out.read.get(), POLLIN, 0});
    if (err.read.valid()) fds.push_back({err.read.get(), POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), net::milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) fail_errno("waiting for Graphviz's dot");
    if (ready == 0) {
      throw Error(fmt::format("Graphviz's dot did not finish within {} s", kDotTimeout.count()));
    }
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == in.write.get()) {
        const ssize_t n = ::write(p.fd, dot_text.data() + written, dot_text.size() - written);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n < 0 && errno != EPIPE) fail_errno("writing the graph to Graphviz's dot");
        // EPIPE: dot stopped reading; its exit status and stderr say why.
        written = n < 0 ? dot_text.size() : written + static_cast<size_t>(n);
        if (written == dot_text.size()) in.write.reset();
        continue;
      }
      Fd& source = p.fd == out.read.get() ? out.read : err.read;
      std::string& sink = p.fd == out.read.get() ? rendered : messages;
      char buffer[65536];
      const ssize_t n = ::read(p.fd, buffer, sizeof buffer);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) fail_errno("reading from Graphviz's dot");
      if (n == 0) {
        source.reset();
      } else {
        sink.append(buffer, static_cast<size_t>(n));
      }
    }
  }

  const int status = child.wait();
  if (WIFSIGNALED(status)) {
    throw Error(fmt::format("Graphviz's dot was killed by signal {} ({}){}{}", WTERMSIG(status),
                            ::strsignal(WTERMSIG(status)), messages.empty() ? "" : ": ",
                            tidy(messages)));
  }
  if (WEXITSTATUS(status) != 0) {
    throw Error(fmt::format("Graphviz's dot failed (exit status {}){}{}", WEXITSTATUS(status),
                            messages.empty() ? "" : ": ", tidy(messages)));
  }
  if (rendered.empty()) throw Error("Graphviz's dot wrote nothing");
  if (!messages.empty()) std::fprintf(stderr, "courier-info: dot: %s\n", tidy(messages).c_str());
  return rendered;
}

}  // namespace courier::info
