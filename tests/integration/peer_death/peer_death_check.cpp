// peer_death_check: every rank keeps WRITing to every other rank through its
// FIFO channels (or, with --traffic ep, keeps calling EP low-latency dispatch
// and combine over the proxy path); rank DIE kills itself with SIGKILL after
// MS milliseconds of traffic. The survivors must notice on their own (no launcher help), name
// the dead rank and exit non-zero; peer_death.sh checks that they do.
//
//   courier-run -n 4 peer_death_check --die 2 --after-ms 1500
//
// --how kill-locked: rank DIE first takes the lock of its own libfabric shm
// region and holds it for --hold-ms before it kills itself, as if SIGKILL
// had caught it inside the provider (likely under traffic: its progress
// holds that lock while it copies incoming data). libfabric 1.17/1.18 shm
// takes the target's lock on every post, so the peers' proxy threads that
// post to it meanwhile spin inside fi_write for good: the survivors must
// still fail and exit on their own (issue 19). This knows the region's
// layout (version 4 only); otherwise rank DIE says SKIP and dies plainly.
//
// Lines the scripts read (epoch milliseconds, so that ranks' times compare):
//   peer_death_check: rank 2 is process <pid>
//   peer_death_check: rank 2 kills itself at <ms>
//   peer_death_check: rank R: rank 2 failed: <reason>
//   peer_death_check: rank R exits with status S at <ms>
// Exit status: 1 when the peer's death was noticed (the expected outcome for
// a survivor), 3 when traffic ran until --give-up-s without any failure, 2
// for a bad command line.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "courier/context.hpp"
#include "courier/ep.hpp"
#include "gpu/fifo_push.hpp"

namespace {

struct Options {
  int die = 2;
  int after_ms = 1500;
  int give_up_s = 60;
  bool stop = false;    // --how stop: SIGSTOP (a hang) instead of SIGKILL
  bool locked = false;  // --how kill-locked: SIGKILL while holding its shm region's lock
  int hold_ms = 300;    // --hold-ms: how long it holds the lock before it dies
  bool ep = false;      // --traffic ep: EP dispatch and combine instead of raw WRITEs
  std::string provider = "shm";
};

[[noreturn]] void usage_error(const std::string& message) {
  fmt::print(stderr,
             "peer_death_check: {}\nusage: peer_death_check [--die RANK] [--after-ms MS] "
             "[--give-up-s S] [--how kill|stop|kill-locked] [--hold-ms MS] [--traffic writes|ep] "
             "[--provider shm|tcp]\n",
             message);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage_error(arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--die") {
      o.die = std::atoi(value.c_str());
    } else if (arg == "--after-ms") {
      o.after_ms = std::atoi(value.c_str());
    } else if (arg == "--give-up-s") {
      o.give_up_s = std::atoi(value.c_str());
    } else if (arg == "--how") {
      if (value != "kill" && value != "stop" && value != "kill-locked") {
        usage_error("--how must be kill, stop or kill-locked");
      }
      o.stop = value == "stop";
      o.locked = value == "kill-locked";
    } else if (arg == "--hold-ms") {
      o.hold_ms = std::atoi(value.c_str());
    } else if (arg == "--traffic") {
      if (value != "writes" && value != "ep") usage_error("--traffic must be writes or ep");
      o.ep = value == "ep";
    } else if (arg == "--provider") {
      o.provider = value;
    } else {
      usage_error("unknown argument '" + arg + "'");
    }
  }
  if (o.after_ms < 0 || o.give_up_s < 1 || o.hold_ms < 0) {
    usage_error("--after-ms, --give-up-s and --hold-ms must be >= 0/1/0");
  }
  return o;
}

int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void say(const std::string& line) {
  std::fputs(("peer_death_check: " + line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// Takes the lock of each shm region this process's endpoints created
// (/dev/shm/courier-<pid>-<nonce>, nic/ofi/ofi_fabric.cpp) and keeps it: the
// mappings stay until the process dies. libfabric 1.17/1.18 (SMR_VERSION 4)
// begin struct smr_region with {uint8 version; uint8 resv; uint16 flags; int
// pid; uint8 cma_cap_peer, cma_cap_self; uint32 max_sar_buf_per_peer; void
// *base_addr; pthread_spinlock_t lock; ...}: the lock at offset 24. Returns
// how many it holds, or 0 with *why set.
int hold_own_shm_region_locks(std::string* why) {
  constexpr unsigned kKnownVersion = 4;
  constexpr size_t kLockOffset = 24;
  const std::string prefix = fmt::format("courier-{}-", ::getpid());
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) {
    *why = "cannot list /dev/shm";
    return 0;
  }
  int held = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    const std::string path = std::string("/dev/shm/") + entry->d_name;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    void* map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) continue;
    auto* region = static_cast<std::byte*>(map);
    int pid = 0;
    std::memcpy(&pid, region + 4, sizeof pid);
    const auto version = static_cast<unsigned>(region[0]);
    if (version != kKnownVersion || pid != ::getpid()) {
      *why = fmt::format("{} has region version {} (pid {}); this check knows version {} only",
                         path, version, pid, kKnownVersion);
      ::munmap(map, 4096);
      continue;
    }
    ::pthread_spin_lock(reinterpret_cast<pthread_spinlock_t*>(region + kLockOffset));
    ++held;
  }
  ::closedir(dir);
  if (held == 0 && why->empty()) *why = "this process has no shm region (not the shm provider?)";
  return held;
}

constexpr uint32_t kSlice = 1024;  // bytes per WRITE; each rank owns one slice of every window

struct KernelArgs {
  std::vector<courier::DeviceChannel> channels;
  int rank = 0;
  int world = 0;
  uint32_t window = 0;
  std::chrono::steady_clock::time_point give_up_at;
  std::atomic<int> stopped_by{-1};  // a PushStatus, or -1 when time ran out
};

// One "GPU thread": WRITEs to each peer in turn, batch after batch, with a
// DRAIN every few batches, until a push or drain fails.
void traffic_kernel(const courier_host_thread_v1* t, void* raw) {
  auto& args = *static_cast<KernelArgs*>(raw);
  const courier::DeviceChannel& ch = args.channels[t->block_idx % args.channels.size()];
  uint64_t round = 0;
  while (std::chrono::steady_clock::now() < args.give_up_at) {
    courier::TransferCmd batch[courier::kMaxBatch];
    const uint32_t n = std::min(courier::kMaxBatch, ch.max_inflight);
    for (uint32_t i = 0; i < n; ++i) {
      int peer = static_cast<int>((round + i) % static_cast<uint64_t>(args.world - 1));
      if (peer >= args.rank) ++peer;  // every rank but this one
      courier::WriteCmdArgs a;
      a.dst_rank = static_cast<uint64_t>(peer);
      a.window = args.window;
      a.src_offset = 0;
      a.dst_offset = static_cast<uint64_t>(args.rank) * kSlice;
      a.length = kSlice;
      (void)courier::encode_write(a, &batch[i]);
    }
    courier::PushStatus status = courier::device::push_batch(ch, batch, n, nullptr);
    if (status == courier::PushStatus::ok && ++round % 4 == 0) {
      status = courier::device::drain(ch);
    }
    if (status != courier::PushStatus::ok) {
      args.stopped_by.store(static_cast<int>(status));
      return;
    }
  }
}

int report_failure(courier::Context& ctx, int rank);

// Low-latency dispatch and combine in a loop until a call fails (the
// expected end: a peer died) or --give-up-s passes (returns 3).
int ep_traffic(courier::Context& ctx, const Options& o) {
  const int ranks = ctx.world_size(), rank = ctx.rank();
  const int64_t tokens = 16, hidden = 256, topk = 2;
  courier::ep::BufferOptions options;
  options.low_latency_mode = true;
  options.max_tokens_per_rank = static_cast<uint32_t>(tokens);
  options.hidden = static_cast<uint32_t>(hidden);
  options.element_bytes = 2;
  options.max_topk = static_cast<uint32_t>(topk);
  options.num_experts = static_cast<uint32_t>(2 * ranks);
  courier::ep::Buffer buffer(ctx, options);
  const DLDevice device = buffer.device();
  courier::DeviceBuffer x = ctx.alloc(static_cast<size_t>(tokens * hidden * 2));
  courier::DeviceBuffer idx = ctx.alloc(static_cast<size_t>(tokens * topk * 8));
  courier::DeviceBuffer weights = ctx.alloc(static_cast<size_t>(tokens * topk * 4));
  std::vector<int64_t> experts(static_cast<size_t>(tokens * topk));
  for (size_t i = 0; i < experts.size(); ++i) experts[i] = static_cast<int64_t>(i % (2 * ranks));
  ctx.copy(idx.data(), experts.data(), experts.size() * 8);
  int64_t x_shape[2] = {tokens, hidden}, k_shape[2] = {tokens, topk};
  DLTensor x_view{x.data(), device, 2, DLDataType{kDLBfloat, 16, 1}, x_shape, nullptr, 0};
  DLTensor idx_view{idx.data(), device, 2, DLDataType{kDLInt, 64, 1}, k_shape, nullptr, 0};
  DLTensor w_view{weights.data(), device, 2, DLDataType{kDLFloat, 32, 1}, k_shape, nullptr, 0};
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(o.give_up_s);
  try {
    while (std::chrono::steady_clock::now() < give_up) {
      courier::ep::LowLatencyDispatchArgs args;
      args.x = &x_view;
      args.topk_idx = &idx_view;
      courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);
      buffer.low_latency_combine(got.packed_recv_x.tensor(), idx_view, w_view, got.handle);
    }
  } catch (const courier::Error& error) {
    say(fmt::format("rank {}: EP traffic stopped: {}", rank, error.what()));
    return 0;
  }
  say(fmt::format("rank {}: EP traffic ran {} s without any failure", rank, o.give_up_s));
  return 3;
}

int run(const Options& o) {
  courier::ContextOptions options;
  options.env.emplace_back("COURIER_OFI_PROVIDER", o.provider);
  courier::Context ctx(options);
  const int rank = ctx.rank();
  // shm_files.sh looks for what this process left in /dev/shm.
  say(fmt::format("rank {} is process {}", rank, ::getpid()));
  if (ctx.world_size() < 2 || o.die < 0 || o.die >= ctx.world_size()) {
    usage_error(fmt::format("--die {} needs a job of more ranks (this one has {})", o.die,
                            ctx.world_size()));
  }
  courier::DeviceBuffer buffer = ctx.alloc(kSlice * static_cast<size_t>(ctx.world_size()));
  const uint32_t window = ctx.register_window(buffer.data(), buffer.size());
  ctx.barrier();  // every window is registered: traffic may start

  std::optional<std::thread> killer;
  if (rank == o.die) {
    killer.emplace([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(o.after_ms));
      if (o.locked) {
        std::string why;
        const int held = hold_own_shm_region_locks(&why);
        if (held == 0) {
          say(fmt::format("rank {} cannot hold its shm region's lock: {}; SKIP", rank, why));
        } else {
          // The peers' posts to this rank now spin in the provider.
          std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
          say(fmt::format("rank {} holds the lock of its {} shm region(s)", rank, held));
        }
      }
      // SIGSTOP: the rank hangs (alive, silent) rather than dies.
      say(fmt::format("rank {} {} itself at {}", rank, o.stop ? "stops" : "kills", epoch_ms()));
      ::kill(::getpid(), o.stop ? SIGSTOP : SIGKILL);
    });
  }

  if (o.ep) {
    const int stopped = ep_traffic(ctx, o);
    if (stopped != 0) return stopped;
    return report_failure(ctx, rank);
  }
  KernelArgs args;
  for (uint32_t c = 0; c < ctx.num_channels(); ++c) args.channels.push_back(ctx.channel(c));
  args.rank = rank;
  args.world = ctx.world_size();
  args.window = window;
  args.give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(o.give_up_s);
  ctx.launch_host_kernel(2, 1, traffic_kernel, &args);
  if (killer) killer->join();  // not reached: SIGKILL ends this rank first

  const int stopped_by = args.stopped_by.load();
  if (stopped_by < 0) {
    say(fmt::format("rank {}: traffic ran {} s without any failure", rank, o.give_up_s));
    return 3;
  }
  say(fmt::format("rank {}: traffic stopped: {}", rank,
                  courier::to_string(static_cast<courier::PushStatus>(stopped_by))));
  return report_failure(ctx, rank);
}

}  // namespace

namespace {

int report_failure(courier::Context& ctx, int rank) {
  for (uint32_t c = 0; c < ctx.num_channels(); ++c) {
    const std::string first_error = ctx.channel_stats(c).first_error;
    if (!first_error.empty()) say(fmt::format("rank {}: channel {}: {}", rank, c, first_error));
  }
  // The bootstrap's collectives fail at once too, naming the dead rank (this
  // also settles the race when a transport error stopped traffic first).
  try {
    ctx.barrier();
    say(fmt::format("rank {}: a barrier after the failure succeeded", rank));
  } catch (const courier::Error& error) {
    say(fmt::format("rank {}: barrier failed: {}", rank, error.what()));
  }
  if (std::optional<courier::PeerFailure> failed = ctx.failed_peer()) {
    say(fmt::format("rank {}: rank {} failed: {}", rank, failed->rank, failed->reason));
  } else {
    say(fmt::format("rank {}: no failed peer was reported", rank));
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int status = 0;
  int rank = -1;
  try {
    rank = std::atoi(std::getenv("COURIER_RANK") != nullptr ? std::getenv("COURIER_RANK") : "-1");
    status = run(o);
  } catch (const std::exception& error) {
    say(fmt::format("rank {}: {}", rank, error.what()));
    status = 4;
  }
  say(fmt::format("rank {} exits with status {} at {}", rank, status, epoch_ms()));
  return status;
}
