// write_demo: rank 0's "GPU threads" issue WRITE commands of mixed sizes
// through FIFO channels and proxy threads; every other rank verifies every
// byte of its window against a per-offset pattern.
//
//   courier-run -n 2 build/bin/write_demo --provider shm
//
// Exit status is non-zero on any mismatch or failed command.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "courier/context.hpp"
#include "gpu/fifo_push.hpp"

namespace {

// COURIER_TIMEOUT_S as the job set it (Courier checks its value), else
// Courier's default of 60 s.
int timeout_s() {
  const char* text = std::getenv("COURIER_TIMEOUT_S");
  const int value = text != nullptr ? std::atoi(text) : 0;
  return value > 0 ? value : 60;
}

struct Options {
  std::string provider;
  uint64_t commands = 100000;
  uint32_t threads = 4;
};

[[noreturn]] void usage_error(const std::string& message) {
  fmt::print(stderr,
             "write_demo: {}\nusage: write_demo [--provider shm|tcp] [--commands N] "
             "[--threads T]\n",
             message);
  std::exit(2);
}

uint64_t parse_number(const char* flag, const char* text, uint64_t min, uint64_t max) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max) {
    usage_error(
        fmt::format("{} '{}' is invalid: expected an integer in [{}, {}]", flag, text, min, max));
  }
  return value;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--provider") {
      o.provider = value();
      if (o.provider != "shm" && o.provider != "tcp") {
        usage_error("--provider '" + o.provider + "' is invalid: expected shm or tcp");
      }
    } else if (arg == "--commands") {
      o.commands = parse_number("--commands", value(), 1, 100000000);
    } else if (arg == "--threads") {
      o.threads = static_cast<uint32_t>(parse_number("--threads", value(), 1, 256));
    } else {
      usage_error("unknown argument '" + arg + "'");
    }
  }
  return o;
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The byte every rank expects at window offset `off`; never zero, so that
// bytes nobody wrote (zero) are told apart from written ones.
uint8_t pattern(uint64_t off) { return static_cast<uint8_t>((mix(off) >> 56) | 1); }

// The demo's plan, computed identically on every rank: command i goes to
// rank 1 + i % (world - 1), reads `length` bytes at a pseudo-random
// `src_offset` of rank 0's window, and writes them to its own, never shared
// `dst_offset` range of the receiver's window. A lost, duplicated or
// misplaced write therefore shows as wrong bytes at the receiver.
struct Write {
  uint32_t dst_rank;
  uint32_t src_offset;
  uint32_t dst_offset;
  uint32_t length;
  bool imm;
};

struct Plan {
  std::vector<Write> writes;
  uint64_t window_bytes = 0;  // every rank's window: fits the largest receiver
};

Plan make_plan(uint64_t commands, int world_size) {
  // 1 B to 7 KiB, weighted towards MoE token sizes.
  static constexpr uint32_t kSizes[] = {1, 3, 8, 17, 64, 100, 512, 1000, 4096, 7168, 7168};
  Plan plan;
  plan.writes.resize(commands);
  std::vector<uint64_t> filled(world_size, 0);
  for (uint64_t i = 0; i < commands; ++i) {
    Write& w = plan.writes[i];
    uint64_t h = mix(i);
    w.dst_rank = 1 + static_cast<uint32_t>(i % static_cast<uint64_t>(world_size - 1));
    w.length = kSizes[h % (sizeof kSizes / sizeof kSizes[0])];
    w.dst_offset = static_cast<uint32_t>(filled[w.dst_rank]);
    filled[w.dst_rank] += w.length;
    w.imm = (i % 16) == 15;
  }
  uint64_t largest = *std::max_element(filled.begin(), filled.end());
  plan.window_bytes = (largest + 4096 + 4095) / 4096 * 4096;  // a zero tail is checked too
  if (plan.window_bytes > courier::TransferCmd::kMaxOffset) {
    usage_error("--commands is too large: the plan needs more than a 4 GiB window");
  }
  for (uint64_t i = 0; i < commands; ++i) {
    Write& w = plan.writes[i];
    w.src_offset = static_cast<uint32_t>((mix(i) >> 20) % (plan.window_bytes - w.length + 1));
  }
  return plan;
}

struct KernelArgs {
  std::vector<courier::DeviceChannel> channels;
  const Plan* plan;
  uint32_t window;
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> sent{0};
};

// One "GPU thread": takes every grid_dim-th command, pushes them in batches
// of up to 8 into its channel, then drains the channel.
void producer_kernel(const courier_host_thread_v1* t, void* raw) {
  auto& args = *static_cast<KernelArgs*>(raw);
  const courier::DeviceChannel& ch = args.channels[t->block_idx % args.channels.size()];
  courier::TransferCmd batch[courier::kMaxBatch];
  uint32_t n = 0;
  uint64_t sent = 0;
  auto flush = [&] {
    if (n == 0) return;
    if (courier::device::push_batch(ch, batch, n, nullptr) != courier::PushStatus::ok) {
      args.failures.fetch_add(n);
    }
    sent += n;
    n = 0;
  };
  const std::vector<Write>& writes = args.plan->writes;
  for (uint64_t i = t->block_idx; i < writes.size(); i += t->grid_dim) {
    const Write& w = writes[i];
    courier::WriteCmdArgs a;
    a.dst_rank = w.dst_rank;
    a.window = args.window;
    a.src_offset = w.src_offset;
    a.dst_offset = w.dst_offset;
    a.length = w.length;
    a.flags = w.imm ? courier::kCmdFlagImm : 0;
    if (courier::encode_write(a, &batch[n]) != courier::CmdStatus::ok) {
      args.failures.fetch_add(1);
      continue;
    }
    if (++n == std::min(courier::kMaxBatch, ch.max_inflight)) flush();
  }
  flush();
  courier::PushStatus status = courier::device::drain(ch);
  if (status != courier::PushStatus::ok) {
    fmt::print(stderr, "write_demo: thread {}: DRAIN of channel {} failed: {}\n", t->block_idx,
               ch.channel_id, courier::to_string(status));
    args.failures.fetch_add(1);
  }
  args.sent.fetch_add(sent);
}

int run_sender(courier::Context& ctx, const Options& o, const Plan& plan,
               courier::DeviceBuffer& buffer, uint32_t window) {
  std::vector<uint8_t> host(plan.window_bytes);
  for (uint64_t off = 0; off < plan.window_bytes; ++off) host[off] = pattern(off);
  ctx.copy(buffer.data(), host.data(), host.size());

  KernelArgs args;
  for (uint32_t c = 0; c < ctx.num_channels(); ++c) args.channels.push_back(ctx.channel(c));
  args.plan = &plan;
  args.window = window;
  auto start = std::chrono::steady_clock::now();
  ctx.launch_host_kernel(o.threads, 1, producer_kernel, &args);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  uint64_t errors = 0;
  for (uint32_t c = 0; c < ctx.num_channels(); ++c) {
    courier::ChannelStats stats = ctx.channel_stats(c);
    errors += stats.errors;
    if (!stats.first_error.empty()) {
      fmt::print(stderr, "write_demo: channel {}: {}\n", c, stats.first_error);
    }
  }
  fmt::print(
      "rank 0: {} WRITE commands from {} GPU threads over {} channels in {:.3f} s "
      "({:.0f} commands/s); {} failed\n",
      args.sent.load(), o.threads, ctx.num_channels(), seconds, args.sent.load() / seconds,
      args.failures.load() + errors);
  return (args.failures.load() + errors) == 0 ? 0 : 1;
}

int run_receiver(courier::Context& ctx, const Plan& plan, courier::DeviceBuffer& buffer) {
  const int me = ctx.rank();
  std::vector<uint8_t> got(plan.window_bytes);
  ctx.copy(got.data(), buffer.data(), got.size());
  uint64_t mismatches = 0, written = 0, writes = 0, imms = 0;
  auto report = [&](uint64_t off, uint8_t expected, const char* what) {
    if (mismatches++ < 5) {
      fmt::print(stderr, "rank {}: byte {} is {:#04x}, expected {:#04x} ({})\n", me, off, got[off],
                 expected, what);
    }
  };
  for (const Write& w : plan.writes) {
    if (static_cast<int>(w.dst_rank) != me) continue;
    ++writes;
    imms += w.imm ? 1 : 0;
    for (uint32_t k = 0; k < w.length; ++k) {
      uint8_t expected = pattern(w.src_offset + k);
      if (got[w.dst_offset + k] != expected) report(w.dst_offset + k, expected, "written");
    }
    written = std::max<uint64_t>(written, uint64_t{w.dst_offset} + w.length);
  }
  for (uint64_t off = written; off < plan.window_bytes; ++off) {
    if (got[off] != 0) report(off, 0, "never written");
  }
  // Notifications are reaped by the proxy asynchronously: give it time, as
  // long as the job's timeout, unless the job already failed (a rank died, or
  // a write failed for good: those notifications will never come).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s());
  while (ctx.imm_received() + ctx.imm_failed() < imms && !ctx.failed_peer() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (auto failure = ctx.failed_peer()) {
    fmt::print(stderr, "rank {}: the job failed: {}\n", me, failure->reason);
    return 1;
  }
  uint64_t imm_seen = ctx.imm_received();
  fmt::print(
      "rank {}: verified {} bytes ({} written by {} WRITEs from rank 0): {} mismatches; "
      "{} of {} immediate-data notifications arrived, {} failed\n",
      me, plan.window_bytes, written, writes, mismatches, imm_seen, imms, ctx.imm_failed());
  return (mismatches == 0 && imm_seen == imms && ctx.imm_failed() == 0) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    courier::ContextOptions options;
    if (!o.provider.empty()) options.env.push_back({"COURIER_OFI_PROVIDER", o.provider});
    courier::Context ctx(options);
    if (ctx.world_size() < 2) {
      fmt::print(stderr, "write_demo: needs at least 2 ranks (run it under courier-run -n 2)\n");
      return 2;
    }
    const Plan plan = make_plan(o.commands, ctx.world_size());
    courier::DeviceBuffer buffer = ctx.alloc(plan.window_bytes);
    uint32_t window = ctx.register_window(buffer.data(), buffer.size());
    ctx.barrier();  // every rank's window is registered before anyone writes
    int status = 0;
    if (ctx.rank() == 0) status = run_sender(ctx, o, plan, buffer, window);
    ctx.barrier();  // rank 0 drained: its writes are visible
    if (ctx.rank() != 0) status = run_receiver(ctx, plan, buffer);
    ctx.barrier();  // nobody tears down an endpoint a peer still uses
    return status;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "write_demo: {}\n", e.what());
    return 1;
  }
}
