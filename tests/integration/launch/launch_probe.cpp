// A stand-in rank for courier-run's integration tests (launch_tests.sh).
//
//   launch_probe env                    print the job environment, one line on each stream
//   launch_probe chatter LINES          print LINES lines, each in several write() calls
//   launch_probe verify-chatter FILE RANKS LINES
//                                       check courier-run's captured stdout of `chatter`
//   launch_probe sleep DIR              announce readiness in DIR, then sleep 60 s
//   launch_probe fail-rank R CODE DIR   rank R exits with CODE once the others sleep
//   launch_probe crash-rank R DIR       rank R dies of SIGSEGV once the others sleep
//
// Sleeping ranks print "woke up" if they are not stopped: the tests check
// that this line never appears. Readiness goes through files, not timing.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

std::string env_text(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

// Writes with write(2), bypassing stdio buffering, so the test controls
// exactly how output is split.
void raw_write(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) std::exit(10);
    done += static_cast<size_t>(n);
  }
}

std::string ready_file(const std::string& dir, int rank) {
  return dir + "/ready-" + std::to_string(rank);
}

// Prints that this rank sleeps, records its pid in DIR/ready-RANK, sleeps.
int sleep_announced(const std::string& dir, int rank) {
  std::printf("probe: rank %d sleeping\n", rank);
  std::fflush(stdout);
  std::string tmp = ready_file(dir, rank) + ".tmp";
  { std::ofstream(tmp) << ::getpid() << "\n"; }
  std::rename(tmp.c_str(), ready_file(dir, rank).c_str());
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::printf("probe: rank %d woke up\n", rank);
  return 0;
}

// Waits (30 s at most) for every other rank's ready file.
void wait_for_others(const std::string& dir, int rank, int size) {
  for (int other = 0; other < size; ++other) {
    if (other == rank) continue;
    for (int i = 0; i < 3000 && ::access(ready_file(dir, other).c_str(), F_OK) != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::string chatter_line(int rank, int line) {
  return "rank " + std::to_string(rank) + " line " + std::to_string(line) + " " +
         std::string(static_cast<size_t>(10 + (rank * 7 + line) % 50),
                     static_cast<char>('a' + rank % 26));
}

int chatter(int rank, int lines) {
  for (int line = 0; line < lines; ++line) {
    std::string text = chatter_line(rank, line) + "\n";
    // Three pieces with a pause between them, inviting interleaving.
    size_t a = text.size() / 3, b = 2 * text.size() / 3;
    raw_write(text.substr(0, a));
    std::this_thread::yield();
    raw_write(text.substr(a, b - a));
    std::this_thread::yield();
    raw_write(text.substr(b));
  }
  raw_write("rank " + std::to_string(rank) + " tail");  // no newline
  return 0;
}

int verify_chatter(const std::string& path, int ranks, int lines) {
  std::ifstream in(path);
  std::vector<int> next(static_cast<size_t>(ranks), 0);
  std::vector<bool> tail(static_cast<size_t>(ranks), false);
  std::string text;
  int count = 0;
  while (std::getline(in, text)) {
    ++count;
    int rank = -1;
    if (std::sscanf(text.c_str(), "[%d] ", &rank) != 1 || rank < 0 || rank >= ranks) {
      std::printf("line %d has no valid rank prefix: '%s'\n", count, text.c_str());
      return 1;
    }
    std::string prefix = "[" + std::to_string(rank) + "] ";
    std::string body = text.substr(prefix.size());
    int& expected = next[static_cast<size_t>(rank)];
    if (expected < lines && body == chatter_line(rank, expected)) {
      ++expected;
    } else if (expected == lines && body == "rank " + std::to_string(rank) + " tail") {
      tail[static_cast<size_t>(rank)] = true;
    } else {
      std::printf("line %d is not rank %d's line %d: '%s'\n", count, rank, expected, text.c_str());
      return 1;
    }
  }
  for (int rank = 0; rank < ranks; ++rank) {
    if (next[static_cast<size_t>(rank)] != lines || !tail[static_cast<size_t>(rank)]) {
      std::printf("rank %d: %d of %d lines, tail %s\n", rank, next[static_cast<size_t>(rank)],
                  lines, tail[static_cast<size_t>(rank)] ? "present" : "missing");
      return 1;
    }
  }
  std::printf("verified %d lines from %d ranks\n", count, ranks);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: launch_probe MODE ...\n");
    return 2;
  }
  const std::string& mode = args[0];
  if (mode == "verify-chatter" && args.size() == 4) {
    return verify_chatter(args[1], std::atoi(args[2].c_str()), std::atoi(args[3].c_str()));
  }
  const int rank = env_int("COURIER_RANK");
  const int size = env_int("COURIER_WORLD_SIZE");
  if (mode == "env") {
    std::printf("rank=%d size=%d local_rank=%d local_size=%d bootstrap=%s token=%s\n", rank, size,
                env_int("COURIER_LOCAL_RANK"), env_int("COURIER_LOCAL_SIZE"),
                env_text("COURIER_BOOTSTRAP").c_str(), env_text("COURIER_JOB_TOKEN").c_str());
    std::fprintf(stderr, "probe stderr from rank %d\n", rank);
    return 0;
  }
  if (mode == "chatter" && args.size() == 2) return chatter(rank, std::atoi(args[1].c_str()));
  if (mode == "sleep" && args.size() == 2) return sleep_announced(args[1], rank);
  if (mode == "fail-rank" && args.size() == 4) {
    const int failing = std::atoi(args[1].c_str());
    if (rank != failing) return sleep_announced(args[3], rank);
    wait_for_others(args[3], rank, size);
    std::printf("probe: rank %d exiting with %s\n", rank, args[2].c_str());
    std::fflush(stdout);
    return std::atoi(args[2].c_str());
  }
  if (mode == "crash-rank" && args.size() == 3) {
    const int failing = std::atoi(args[1].c_str());
    if (rank != failing) return sleep_announced(args[2], rank);
    wait_for_others(args[2], rank, size);
    // No core file, and no sanitizer handler: die of the signal itself.
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
    return 99;
  }
  std::fprintf(stderr, "launch_probe: bad arguments for mode '%s'\n", mode.c_str());
  return 2;
}
