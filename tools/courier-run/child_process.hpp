// One rank of a courier-run job: a child process in its own process group,
// with its stdout and stderr captured through pipes.
//
// The child gets its own process group so that stopping a rank also stops
// whatever it started (a shell wrapper's children, for example), and so that
// a terminal's Ctrl-C reaches courier-run alone, which then decides what the
// ranks get. The child is killed when courier-run dies (PR_SET_PDEATHSIG),
// even by SIGKILL; what the child started itself is not.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/bootstrap/socket.hpp"

namespace courier::run {

struct ChildSpec {
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] is the program as the user typed it
  std::vector<std::string> env;   // "NAME=value" entries, the whole environment
  sigset_t signal_mask;           // the mask to restore before exec
};

// Resolves PROG the way a shell would (a name with '/' as is, otherwise the
// PATH entries). Throws courier::Error naming PROG when it is missing, a
// directory or not executable.
std::string resolve_program(const std::string& program);

class ChildProcess {
 public:
  // Starts the child. Throws courier::Error naming the program when it could
  // not be executed (the child has then already been reaped).
  explicit ChildProcess(const ChildSpec& spec);
  // A child still running when its owner goes away is killed (the whole
  // group) and reaped, so no rank outlives courier-run.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return !status_.has_value(); }
  // The waitpid() status once reaped.
  int status() const { return *status_; }

  // Sends `signal` to the child's process group (only while it runs: a
  // reaped child's id may belong to someone else).
  void signal_group(int signal) const;
  // Reaps the child if it has exited; returns true when it did just now.
  // `before_reap`, when given, runs first with the child's id while the
  // exited child still holds it (no new process can have been given it).
  bool try_reap(const std::function<void(pid_t)>& before_reap = {});

  net::Fd& stdout_pipe() { return stdout_; }
  net::Fd& stderr_pipe() { return stderr_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  net::Fd stdout_;
  net::Fd stderr_;
};

// "exited with status 3" or "killed by signal 11 (Segmentation fault)".
std::string describe_status(int status);
// The shell convention: the exit status, or 128 + the signal number.
int shell_exit_code(int status);

}  // namespace courier::run
