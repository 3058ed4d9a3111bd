#include "tools/courier-run/child_process.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/check.hpp"

namespace courier::run {

namespace {

// A pipe whose both ends close on exec (the child dup2()s the one it keeps).
void make_pipe(net::Fd* read_end, net::Fd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    fail("courier-run: cannot create a pipe: {}", std::strerror(errno));
  }
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
}

// C views of a vector of strings, null-terminated, built before fork() so
// that the child does nothing but async-signal-safe calls.
std::vector<char*> c_array(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

std::string resolve_program(const std::string& program) {
  auto check = [&](const std::string& path) -> int {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return errno;
    if (S_ISDIR(info.st_mode)) return EISDIR;
    if (::access(path.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (program.find('/') != std::string::npos) {
    int error = check(program);
    if (error != 0) fail("courier-run: cannot execute '{}': {}", program, std::strerror(error));
    return program;
  }
  const char* path_env = std::getenv("PATH");
  std::string search = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  int first_error = ENOENT;
  size_t start = 0;
  for (;;) {
    size_t colon = search.find(':', start);
    std::string dir = search.substr(start, colon == std::string::npos ? colon : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    int error = check(candidate);
    if (error == 0) return candidate;
    // Report "permission denied" over "not found" when a non-executable file
    // of that name exists somewhere on the PATH.
    if (error != ENOENT && error != ENOTDIR && first_error == ENOENT) first_error = error;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (first_error == ENOENT) {
    fail("courier-run: cannot execute '{}': not found in PATH", program);
  }
  fail("courier-run: cannot execute '{}': {}", program, std::strerror(first_error));
}

ChildProcess::ChildProcess(const ChildSpec& spec) {
  net::Fd stdout_write, stderr_write, exec_error_read, exec_error_write;
  make_pipe(&stdout_, &stdout_write);
  make_pipe(&stderr_, &stderr_write);
  // Written by the child only when execve() fails; closed by a successful
  // exec, which the parent sees as end-of-file.
  make_pipe(&exec_error_read, &exec_error_write);
  net::Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) fail("courier-run: cannot open /dev/null: {}", std::strerror(errno));

  std::vector<char*> argv = c_array(spec.argv);
  std::vector<char*> envp = c_array(spec.env);

  const pid_t launcher = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) fail("courier-run: fork() failed: {}", std::strerror(errno));
  if (pid_ == 0) {
    // The child: async-signal-safe calls only, then exec.
    //
    // A rank dies with courier-run: killed by SIGKILL, courier-run cannot
    // stop its ranks, and they would run the whole job with nobody reading
    // their output. SIGKILL, not SIGTERM: nobody is left to escalate should
    // a rank catch SIGTERM. The signal comes when the forking thread exits
    // (courier-run has one thread) and survives execve(). Only courier-run's
    // children get this; ranks under torchrun or mpirun follow their rules.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // courier-run may have died between fork() and prctl(): the child then
    // has another parent already, and no signal will come.
    if (::getppid() != launcher) ::kill(::getpid(), SIGKILL);
    ::setpgid(0, 0);
    ::dup2(dev_null.get(), STDIN_FILENO);
    ::dup2(stdout_write.get(), STDOUT_FILENO);
    ::dup2(stderr_write.get(), STDERR_FILENO);
    // courier-run ignores SIGPIPE and blocks the signals it handles; the
    // program must start with the usual defaults.
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &default_action, nullptr);
    ::sigprocmask(SIG_SETMASK, &spec.signal_mask, nullptr);
    ::execve(spec.path.c_str(), argv.data(), envp.data());
    int error = errno;
    (void)!::write(exec_error_write.get(), &error, sizeof error);
    ::_exit(127);
  }
  // Also set the group from this side: whichever runs first wins the race,
  // and the group exists before anyone signals it.
  ::setpgid(pid_, pid_);
  exec_error_write.reset();
  stdout_write.reset();
  stderr_write.reset();

  int exec_error = 0;
  ssize_t got;
  do {
    got = ::read(exec_error_read.get(), &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    status_ = status;
    fail("courier-run: cannot execute '{}': {}", spec.path, std::strerror(exec_error));
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0 || status_) return;
  signal_group(SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void ChildProcess::signal_group(int signal) const {
  if (pid_ > 0 && !status_) ::kill(-pid_, signal);
}

bool ChildProcess::try_reap(const std::function<void(pid_t)>& before_reap) {
  if (status_) return false;
  if (before_reap) {
    // Look without reaping (WNOWAIT): the zombie keeps its id reserved.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != pid_) {
      return false;
    }
    before_reap(pid_);
  }
  int status = 0;
  pid_t reaped = ::waitpid(pid_, &status, WNOHANG);
  if (reaped != pid_) return false;
  status_ = status;
  return true;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int signal = WTERMSIG(status);
    const char* name = ::strsignal(signal);
    return "killed by signal " + std::to_string(signal) + " (" + (name ? name : "unknown") + ")";
  }
  return "stopped with wait status " + std::to_string(status);
}

int shell_exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace courier::run
