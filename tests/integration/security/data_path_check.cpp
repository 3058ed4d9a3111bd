// Who can reach a rank's data path (docs/security.md), checked under
// courier-run over nic-ofi's tcp provider. One scenario per run:
//
//   listeners ADDRESS   every rank lists the TCP sockets it listens on once
//                       its endpoints are open: there must be at least one,
//                       and every one must be bound to ADDRESS (run with
//                       COURIER_OFI_IFACE=lo and ADDRESS 127.0.0.1: not the
//                       wildcard address, not another interface's).
//   stranger PROGRAM    rank 0 registers a window filled with a known
//                       pattern and starts PROGRAM (data_path_stranger), a
//                       process outside the job, with its process id; the
//                       stranger finds rank 0's listeners and writes to them
//                       with guessed memory keys. Afterwards the window must
//                       be unchanged, the stranger must have been refused
//                       (exit status 0), and the job must still work: rank 1
//                       writes into rank 0's window and rank 0 finds it.
//
// Each rank prints "data_path_check: rank R: ..." lines and exits 0 only
// when its checks passed.
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "courier/context.hpp"
#include "gpu/fifo_push.hpp"
#include "listeners.hpp"

extern char** environ;

namespace {

int failures = 0;
int rank_for_output = -1;

void say(const std::string& line) {
  std::fputs(fmt::format("data_path_check: rank {}: {}\n", rank_for_output, line).c_str(), stdout);
  std::fflush(stdout);
}

void expect(bool ok, const std::string& what) {
  if (!ok) {
    say("FAILED: " + what);
    ++failures;
  }
}

int listeners(const std::string& address) {
  courier::Context ctx;
  rank_for_output = ctx.rank();
  // Every rank's endpoints are open and connected once the Context exists;
  // the barrier only keeps the ranks alive until each has looked.
  const std::vector<courier::test::Listener> found = courier::test::tcp_listeners(::getpid());
  expect(!found.empty(), "no listening TCP socket: is the tcp provider in use?");
  for (const courier::test::Listener& l : found) {
    say("listens on " + l.text);
    expect(l.host == address, fmt::format("a listener on {}, not on {}", l.text, address));
  }
  ctx.barrier();
  if (failures == 0) say(fmt::format("listens on {} only ({} sockets)", address, found.size()));
  return failures == 0 ? 0 : 1;
}

constexpr size_t kWindowBytes = 4096;
constexpr size_t kSignalOffset = 1024;  // where rank 1 writes afterwards
constexpr size_t kSignalBytes = 64;

uint8_t pattern(size_t i) { return static_cast<uint8_t>(i * 7 + 1); }

// Starts `program` with this process's id and waits for it.
int run_stranger(const std::string& program) {
  const std::string pid = std::to_string(::getpid());
  std::vector<char*> argv = {const_cast<char*>(program.c_str()), const_cast<char*>(pid.c_str()),
                             nullptr};
  pid_t child = 0;
  if (posix_spawn(&child, program.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    expect(false, "cannot start " + program);
    return -1;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      expect(false, "waiting for the stranger failed");
      return -1;
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int stranger(const std::string& program) {
  courier::Context ctx;
  rank_for_output = ctx.rank();
  if (ctx.world_size() != 2) {
    say("needs exactly 2 ranks");
    return 2;
  }
  std::vector<uint8_t> expected(kWindowBytes);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = pattern(i);
  courier::DeviceBuffer buffer = ctx.alloc(kWindowBytes);
  ctx.copy(buffer.data(), expected.data(), expected.size());
  const uint32_t window = ctx.register_window(buffer.data(), buffer.size());
  ctx.barrier();  // both windows are registered

  std::vector<uint8_t> seen(kWindowBytes);
  if (ctx.rank() == 0) {
    const int status = run_stranger(program);
    say(fmt::format("the stranger exited with status {}", status));
    expect(status == 0,
           "the stranger was not refused everywhere (status 1: a write landed; 2: a write "
           "got no answer, or the stranger failed)");
    ctx.copy(seen.data(), buffer.data(), seen.size());
    size_t changed = 0;
    for (size_t i = 0; i < seen.size(); ++i) changed += seen[i] != expected[i];
    expect(changed == 0,
           fmt::format("{} bytes of the window changed while the stranger wrote", changed));
  }
  ctx.barrier();  // the stranger is done

  // The job still works: rank 1 writes 64 bytes of its own window (the same
  // pattern, shifted) into rank 0's.
  if (ctx.rank() == 1) {
    std::vector<uint8_t> mine(kWindowBytes);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<uint8_t>(~pattern(i));
    ctx.copy(buffer.data(), mine.data(), mine.size());
    courier::WriteCmdArgs a;
    a.dst_rank = 0;
    a.window = window;
    a.src_offset = 0;
    a.dst_offset = kSignalOffset;
    a.length = kSignalBytes;
    courier::TransferCmd cmd;
    expect(courier::encode_write(a, &cmd) == courier::CmdStatus::ok, "encoding the WRITE");
    const courier::DeviceChannel channel = ctx.channel(0);
    courier::PushStatus status = courier::device::push(channel, cmd, nullptr);
    if (status == courier::PushStatus::ok) status = courier::device::drain(channel);
    expect(status == courier::PushStatus::ok,
           fmt::format("the WRITE to rank 0 ended with '{}'", courier::to_string(status)));
  }
  ctx.barrier();  // rank 1's write completed before it got here
  if (ctx.rank() == 0) {
    ctx.copy(seen.data(), buffer.data(), seen.size());
    size_t wrong = 0;
    for (size_t i = 0; i < seen.size(); ++i) {
      const bool written = i >= kSignalOffset && i < kSignalOffset + kSignalBytes;
      wrong +=
          seen[i] != (written ? static_cast<uint8_t>(~pattern(i - kSignalOffset)) : expected[i]);
    }
    expect(wrong == 0, fmt::format("{} bytes of the window are wrong after rank 1's WRITE", wrong));
    if (failures == 0) say("window unchanged by the stranger, and rank 1's WRITE arrived");
  }
  ctx.deregister_window(window);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (argc != 3 || (scenario != "listeners" && scenario != "stranger")) {
    std::fputs("usage: data_path_check listeners ADDRESS | stranger PROGRAM\n", stderr);
    return 2;
  }
  try {
    return scenario == "listeners" ? listeners(argv[2]) : stranger(argv[2]);
  } catch (const std::exception& error) {
    say(std::string("error: ") + error.what());
    return 1;
  }
}
