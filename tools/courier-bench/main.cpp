// courier-bench: Courier's benchmarks, each measured side by side with a
// baseline in the same run.
//
//   courier-bench fifo [--producers P] [--commands N] [--batch B] [--json]
//   courier-bench fifo --gpu cuda|host [--blocks B] [--threads T] [--check] ...
//   courier-run -n 2 courier-bench transport [--provider shm|tcp] [--size N]
//       [--window W] [--iters N] [--op write|write_imm] [--raw] [--json]
//   courier-run -n N courier-bench ep --mode ll|ht [--tokens A,B,...] [--hidden H]
//       [--topk K] [--experts E] [--iters N] [--provider shm|tcp] [--json]
//   courier-run -n N courier-bench idle [--provider shm|tcp] [--windows N] [--window-s S]
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench_clock.hpp"
#include "bench_output.hpp"
#include "core/bootstrap/job_bootstrap.hpp"
#include "core/config.hpp"
#include "core/cpu_placement.hpp"
#include "courier/context.hpp"
#include "fifo_bench.hpp"
#include "gpu_fifo_bench.hpp"
#if COURIER_BENCH_HAVE_RAW_OFI
#include "raw_ofi_transport.hpp"
#endif
#include "atomic_bench.hpp"
#include "barrier_bench.hpp"
#include "ep_bench.hpp"
#include "idle_bench.hpp"
#include "scale_bench.hpp"
#include "transport_bench.hpp"

namespace {

using courier::bench::BenchResult;

constexpr const char* kUsage =
    "usage: courier-bench fifo [--producers P] [--commands N] [--batch B] [--depth D]\n"
    "                          [--inflight I] [--repeats R] [--prefilled] [--json]\n"
    "       courier-bench fifo --gpu NAME [--blocks B] [--threads T] [--push warp|thread]\n"
    "                          [--proxy-threads P] [--channels C] [--commands N] [--depth D]\n"
    "                          [--inflight I] [--repeats R] [--check] [--graph]\n"
    "                          [--round-trips N] [--json]\n"
    "       courier-run -n 1|2 courier-bench transport [--provider shm|tcp] [--size N |\n"
    "                          --sizes A,B,...] [--window W] [--fifo-inflight F]\n"
    "                          [--iters N] [--repeats R] [--op write|write_imm] [--raw]\n"
    "                          [--run R] [--json]\n"
    "       courier-run -n N courier-bench atomic [--provider shm|tcp] [--ops N] [--block B]\n"
    "                          [--writes-per-atomic W] [--slots S] [--strategies hw,imm]\n"
    "                          [--proxy-threads P] [--check] [--json]\n"
    "       courier-run -n N courier-bench barrier [--provider shm|tcp] [--iters N]\n"
    "                          [--scope world|rail] [--check] [--json]\n"
    "       courier-run -n N courier-bench ep --mode ll|ht [--tokens A,B,...] [--hidden H]\n"
    "                          [--topk K] [--experts E] [--iters N] [--fp8] [--logfmt]\n"
    "                          [--unmasked]\n"
    "                          [--stream own|caller] [--provider shm|tcp] [--json]\n"
    "       courier-run -n N courier-bench idle [--provider shm|tcp] [--windows N]\n"
    "                          [--window-s S] [--grace-s S] [--json]\n"
    "       courier-run -n N courier-bench scale [--provider shm|tcp] [--barrier-iters N]\n"
    "                          [--ep-iters N] [--json]\n"
    "\n"
    "fifo       host-GPU producer threads into one proxy thread (commands/s); baseline:\n"
    "           the same ring drained by a bare loop (path 'ring'). --prefilled: fill the\n"
    "           ring (D commands) with no consumer running, then time draining it, until\n"
    "           N commands (no producer competes for a core; with valgrind --tool=callgrind\n"
    "           the consumer's instructions per command repeat exactly).\n"
    "fifo --gpu the GPU backend's producer kernel (B blocks x T threads) into C channels\n"
    "           drained by P proxy threads (default: COURIER_PROXY_THREADS if set, else 1;\n"
    "           C defaults to P); baseline: bare loops on the same rings. --check verifies\n"
    "           every command (none lost, duplicated, reordered or torn), prints\n"
    "           'violations: N' and exits 1 on any. --round-trips N adds the GPU -> proxy\n"
    "           -> GPU completion round trip next to a bare flag ping-pong.\n"
    "transport  rank 0 writes to rank 1 through Courier (path 'courier'); one rank (-n 1)\n"
    "           writes to itself through the NIC backend (one GPU times nic-ce). --raw runs\n"
    "           first the same pattern as a plain libfabric program (path 'raw'), so both appear\n"
    "           side by side. Each row is the median of R runs (default 5). Both keep W\n"
    "           writes in flight on the transport (Courier: COURIER_NIC_WINDOW = W); the\n"
    "           Courier producer may run F commands ahead in the FIFO (default\n"
    "           max(1024, W); --fifo-inflight W makes the FIFO the only window).\n"
    "           --run R: runs of R writes to contiguous pieces (source and destination,\n"
    "           which the proxy may merge, COURIER_COALESCE_BYTES) instead of every write\n"
    "           to offset 0; Courier path only.\n"
    "atomic     every rank streams W WRITEs of B bytes then one ATOMIC add to each peer,\n"
    "           N commands per rank (default 1,000,000); rate = atomics per second of the\n"
    "           job. --check proves write-then-atomic: counter value k from a sender means\n"
    "           its first k blocks are complete; prints 'violations: N', exits 1 on any.\n"
    "           --strategies runs one Context per COURIER_ATOMICS value, side by side.\n"
    "barrier    BARRIER latency (median, p99) from a host-GPU thread, next to the\n"
    "           bootstrap's out-of-band barrier in the same run. --check verifies that\n"
    "           nobody left barrier i before everybody entered it.\n"
    "ep         expert-parallel dispatch and combine (courier::ep) in high-throughput (ht)\n"
    "           or low-latency (ll) mode on random top-K routing, per token count (per\n"
    "           rank, default 32,64,128; hidden 1024 bfloat16, top-4, 16 experts, 20\n"
    "           iterations after 2 warm-up): median and p99 latency and GB/s (bytes of the\n"
    "           rows rank 0 sends to other ranks / median), path 'courier'. Baseline, in\n"
    "           the same iterations: path 'raw-write', the same bytes per destination\n"
    "           as one WRITE each through Courier's raw transport path (pushed with\n"
    "           Context::run_device_commands, waited for), without packing, signals or\n"
    "           receive waits: the EP time above it is the cost of dispatch/combine.\n"
    "           Where the GPU plugin counts (GPU ABI 1.12): per call the kernels launched\n"
    "           and the host's waits for the device, and 'gpu us', the median GPU time\n"
    "           from a stamp before the call to one after it on the Buffer's stream, over\n"
    "           the calls that did not wait on the host ('-' if none). With GPU ABI 1.14\n"
    "           it comes from --iters more iterations, each call queued while the stream\n"
    "           is held (ep::Buffer::gpu_hold): the host's launch time is not in it;\n"
    "           'gpu floor': an empty kernel (one thread) timed the same way, about\n"
    "           what every call's 'gpu us' includes besides its own kernels.\n"
    "           --stream caller: the kernels go to the runtime's default stream\n"
    "           (set_stream), low-latency calls return once queued, and each call is\n"
    "           timed until Buffer::synchronize after it returns (not counted in waits);\n"
    "           'host us': the median time until the call returned (its queueing).\n"
    "           --fp8: low-latency dispatch quantizes to FP8; high-throughput dispatch\n"
    "           takes x as FP8 with a float scale per 128 channels; combine is bfloat16.\n"
    "           --logfmt (ll): combine sends LogFMT (use_logfmt); its raw-write baseline\n"
    "           still moves bfloat16 rows. The expert outputs combined are random\n"
    "           values of magnitude below 1.\n"
    "idle       the CPU an idle rank uses (all its threads, getrusage), in % of one\n"
    "           core: the median of N windows of S seconds (default 3 x 10 s) on each\n"
    "           rank, with a Context that carries no traffic (path 'courier', measured\n"
    "           --grace-s after it was made, default 1 s), next to the same process\n"
    "           before the Context, with the job's bootstrap only (path 'bootstrap').\n"
    "scale      what one rank costs as the job grows: per rank (min / median / max over\n"
    "           the ranks) joining the job, the Context's start-up phases, the time to its\n"
    "           first WRITE completed, resident and registered memory, open files,\n"
    "           threads, connections per proxy endpoint, bytes its bootstrap collectives\n"
    "           sent and received; for the job the BARRIER latency (next to the\n"
    "           bootstrap's barrier and its allgather of 64 bytes per rank) and a\n"
    "           low-latency EP dispatch/combine of 8\n"
    "           tokens, hidden 128, top-2 (next to raw writes of the same bytes).\n"
    "           tools/courier-bench/scale_sweep.sh runs it at 2..64 ranks.\n"
    "\n"
    "--provider (transport, atomic, barrier, ep, idle, scale): the libfabric provider; without "
    "it,\n"
    "           COURIER_OFI_PROVIDER as set in the environment, else shm.\n";

[[noreturn]] void usage_error(const std::string& message) {
  fmt::print(stderr, "courier-bench: {}\n{}", message, kUsage);
  std::exit(2);
}

uint64_t parse_number(const std::string& flag, const std::string& text, uint64_t min,
                      uint64_t max) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || text.empty() || *end != '\0' || value < min || value > max) {
    usage_error(
        fmt::format("{} '{}' is invalid: expected an integer in [{}, {}]", flag, text, min, max));
  }
  return value;
}

// Walks argv, handing each flag's value to `on_flag`; returns --json.
template <class OnFlag>
bool parse_flags(int argc, char** argv, OnFlag on_flag) {
  bool json = false;
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--json") {
      json = true;
    } else if (flag == "--help" || flag == "-h") {
      fmt::print("{}", kUsage);
      std::exit(0);
    } else if (!on_flag(flag, [&]() -> std::string {
                 if (i + 1 >= argc) usage_error(flag + " needs a value");
                 return argv[++i];
               })) {
      usage_error("unknown argument '" + flag + "'");
    }
  }
  return json;
}

std::string parse_provider(std::string provider) {
  if (provider != "shm" && provider != "tcp") {
    usage_error("--provider '" + provider + "' is invalid: expected shm or tcp");
  }
  return provider;
}

// The provider without --provider: COURIER_OFI_PROVIDER as the job set it
// (the ofi backend checks it), else shm. Every subcommand passes it on, so
// the environment's choice must be the default, not lost to ours.
std::string default_provider() {
  const char* set = std::getenv("COURIER_OFI_PROVIDER");
  return set != nullptr && *set != '\0' ? std::string(set) : std::string("shm");
}

// The job the benchmark joins once (every Context it creates shares it).
struct Job {
  courier::Config config = courier::Config::load(courier::process_env());
  courier::Logger log{config.log_level};
  std::shared_ptr<courier::Bootstrap> bootstrap = join();

 private:
  std::shared_ptr<courier::Bootstrap> join() {
    log.set_rank(config.job.rank);
    return courier::join_job(config.job, static_cast<int>(config.timeout_s), log);
  }
};

void print(const std::vector<BenchResult>& results, bool json) {
  if (json) {
    courier::bench::print_json(results);
  } else {
    courier::bench::print_table(results);
  }
}

int run_gpu_fifo(int argc, char** argv) {
  courier::bench::GpuFifoOptions o;
  if (const char* threads = std::getenv("COURIER_PROXY_THREADS"); threads != nullptr) {
    o.proxy_threads = static_cast<uint32_t>(parse_number("COURIER_PROXY_THREADS", threads, 1, 64));
  }
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--gpu") {
      o.gpu = value();
    } else if (flag == "--blocks") {
      o.blocks = static_cast<uint32_t>(parse_number(flag, value(), 1, 65535));
    } else if (flag == "--threads") {
      o.threads = static_cast<uint32_t>(parse_number(flag, value(), 1, 1024));
    } else if (flag == "--push") {
      const std::string mode = value();
      if (mode != "warp" && mode != "thread") {
        usage_error("--push '" + mode + "' is invalid: expected warp or thread");
      }
      o.warp_push = mode == "warp";
    } else if (flag == "--proxy-threads") {
      o.proxy_threads = static_cast<uint32_t>(parse_number(flag, value(), 1, 64));
    } else if (flag == "--channels") {
      o.channels = static_cast<uint32_t>(parse_number(flag, value(), 1, 1024));
    } else if (flag == "--commands") {
      o.commands = parse_number(flag, value(), 1, uint64_t{1} << 40);
    } else if (flag == "--depth") {
      o.depth = static_cast<uint32_t>(parse_number(flag, value(), 64, 1 << 20));
      if ((o.depth & (o.depth - 1)) != 0) usage_error("--depth must be a power of two");
    } else if (flag == "--inflight") {
      o.max_inflight = static_cast<uint32_t>(parse_number(flag, value(), 1, 1 << 20));
    } else if (flag == "--repeats") {
      o.repeats = static_cast<uint32_t>(parse_number(flag, value(), 1, 100));
    } else if (flag == "--check") {
      o.check = true;
    } else if (flag == "--graph") {
      o.graph = true;
    } else if (flag == "--round-trips") {
      o.round_trips = static_cast<uint32_t>(parse_number(flag, value(), 1, 10'000'000));
    } else {
      return false;
    }
    return true;
  });
  if (o.max_inflight > o.depth) usage_error("--inflight may not exceed --depth");
  if (o.channels != 0 && o.channels < o.proxy_threads) {
    usage_error("--channels may not be fewer than the proxy threads");
  }
  try {
    courier::bench::GpuFifoRun run = courier::bench::run_gpu_fifo_bench(o);
    if (!json) fmt::print("device: {}\n", run.device);
    print(run.rows, json);
    for (const auto& r : run.latency) {
      if (json) {
        fmt::print(
            "{{\"bench\":\"fifo_round_trip\",\"path\":\"{}\",\"gpu\":\"{}\",\"iters\":{},"
            "\"median_us\":{:.3f},\"p99_us\":{:.3f}}}\n",
            r.path, o.gpu, r.iters, r.median_us, r.p99_us);
      }
    }
    if (!json && !run.latency.empty()) {
      fmt::print("\n{:<16} {:<9} {:>9} {:>11} {:>11}\n", "round trip", "path", "iters", "median us",
                 "p99 us");
      for (const auto& r : run.latency) {
        fmt::print("{:<16} {:<9} {:>9} {:>11.2f} {:>11.2f}\n", "gpu->cpu->gpu", r.path, r.iters,
                   r.median_us, r.p99_us);
      }
    }
    if (o.check) {
      fmt::print("checked: {} commands\nviolations: {}\n", run.checked, run.violations);
      if (run.violations != 0) fmt::print(stderr, "first violation: {}\n", run.first_violation);
    }
    return run.violations == 0 ? 0 : 1;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
}

int run_fifo(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpu") == 0) return run_gpu_fifo(argc, argv);
  }
  courier::bench::FifoBenchOptions o;
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--producers") {
      o.producers = static_cast<uint32_t>(parse_number(flag, value(), 1, 256));
    } else if (flag == "--commands") {
      o.commands = parse_number(flag, value(), 1000, uint64_t{1} << 40);
    } else if (flag == "--batch") {
      o.batch = static_cast<uint32_t>(parse_number(flag, value(), 1, courier::kMaxBatch));
    } else if (flag == "--depth") {
      o.depth = static_cast<uint32_t>(parse_number(flag, value(), 8, 8192));
      if ((o.depth & (o.depth - 1)) != 0) usage_error("--depth must be a power of two");
    } else if (flag == "--inflight") {
      o.max_inflight = static_cast<uint32_t>(parse_number(flag, value(), 1, 8192));
    } else if (flag == "--repeats") {
      o.repeats = static_cast<uint32_t>(parse_number(flag, value(), 1, 100));
    } else if (flag == "--prefilled") {
      o.prefilled = true;
    } else {
      return false;
    }
    return true;
  });
  if (o.max_inflight > o.depth) usage_error("--inflight may not exceed --depth");
  if (o.batch > o.max_inflight) usage_error("--batch may not exceed --inflight");
  try {
    print(courier::bench::run_fifo_bench(o), json);
  } catch (const courier::Error& e) {  // a bad COURIER_* value, say
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
  return 0;
}

std::vector<size_t> parse_sizes(const std::string& flag, const std::string& text) {
  std::vector<size_t> sizes;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    sizes.push_back(parse_number(flag, item, 1, courier::TransferCmd::kMaxLength));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

// The run with the median message rate: robust against the scheduling
// noise of small shared machines.
BenchResult median(std::vector<BenchResult> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const BenchResult& a, const BenchResult& b) { return a.msgs_per_s < b.msgs_per_s; });
  BenchResult m = runs[runs.size() / 2];
  m.repeats = static_cast<uint32_t>(runs.size());
  return m;
}

int run_transport(int argc, char** argv) {
  courier::bench::TransportOptions o;
  o.provider = default_provider();
  std::vector<size_t> sizes = {8, 64, 512, 4096, 7168, 8192, 65536, 262144, 1 << 20, 4 << 20};
  uint64_t iters = 20000;
  uint32_t repeats = 5;
  bool raw = false;
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--provider") {
      o.provider = parse_provider(value());
    } else if (flag == "--size" || flag == "--sizes") {
      sizes = parse_sizes(flag, value());
    } else if (flag == "--window") {
      o.window = static_cast<uint32_t>(parse_number(flag, value(), 1, 4096));
    } else if (flag == "--fifo-inflight") {
      o.fifo_inflight = static_cast<uint32_t>(parse_number(flag, value(), 1, 8192));
    } else if (flag == "--iters") {
      iters = parse_number(flag, value(), 1, uint64_t{1} << 32);
    } else if (flag == "--repeats") {
      repeats = static_cast<uint32_t>(parse_number(flag, value(), 1, 101));
    } else if (flag == "--op") {
      o.op = value();
      if (o.op != "write" && o.op != "write_imm") {
        usage_error("--op '" + o.op + "' is invalid: expected write or write_imm");
      }
    } else if (flag == "--run") {
      o.run = static_cast<uint32_t>(parse_number(flag, value(), 1, 4096));
    } else if (flag == "--raw") {
      raw = true;
    } else {
      return false;
    }
    return true;
  });
#if !COURIER_BENCH_HAVE_RAW_OFI
  if (raw) usage_error("--raw needs libfabric: rebuild with COURIER_WITH_OFI=ON");
#endif
  try {
    // The job is joined once. Per size, raw and Courier runs alternate, so
    // both see the same machine, and every Courier run gets a fresh Context
    // that is gone again before the next raw run: no Courier thread competes
    // with the baseline for the cores.
    Job job;
    const courier::Config& config = job.config;
    std::shared_ptr<courier::Bootstrap> bootstrap = job.bootstrap;
    if (bootstrap->size() != 2 && bootstrap->size() != 1) {
      usage_error("transport needs 2 ranks (courier-run -n 2), or 1 that writes to itself");
    }
    if (bootstrap->size() == 1 && raw) {
      usage_error("--raw needs 2 ranks: the raw baseline writes from rank 0 to rank 1");
    }

    // One proxy thread, one channel, `window` writes in flight on the
    // transport: the Courier counterpart of the raw program's single posting
    // thread. The producer may run `fifo_inflight` commands ahead, the way a
    // GPU kernel enqueues ahead of its proxy.
    if (o.fifo_inflight == 0) o.fifo_inflight = std::max<uint32_t>(1024, o.window);
    uint32_t depth = 64;
    while (depth < o.fifo_inflight) depth *= 2;
    courier::ContextOptions options;
    options.env = {{"COURIER_OFI_PROVIDER", o.provider},
                   {"COURIER_PROXY_THREADS", "1"},
                   {"COURIER_CHANNELS", "1"},
                   {"COURIER_FIFO_DEPTH", std::to_string(depth)},
                   {"COURIER_MAX_INFLIGHT", std::to_string(o.fifo_inflight)},
                   {"COURIER_NIC_WINDOW", std::to_string(o.window)}};
    options.bootstrap = bootstrap;

    std::vector<BenchResult> results;
    for (size_t size : sizes) {
      const uint64_t n = courier::bench::iterations_for(size, iters);
      std::vector<BenchResult> raw_runs, courier_runs;
      for (uint32_t rep = 0; rep < repeats; ++rep) {
#if COURIER_BENCH_HAVE_RAW_OFI
        if (raw) {
          courier::bench::RawTransportOptions r;
          r.provider = o.provider;
          r.sizes = {size};
          r.window = o.window;
          r.iters = n;
          r.op = o.op;
          r.cpus = courier::default_rank_cpus(courier::allowed_cpus(),
                                              static_cast<size_t>(sysconf(_SC_NPROCESSORS_ONLN)),
                                              config.job.local_rank, config.job.local_size);
          std::vector<BenchResult> one = courier::bench::run_raw_transport(r, *bootstrap);
          raw_runs.insert(raw_runs.end(), one.begin(), one.end());
        }
#endif
        courier::Context ctx(options);
        courier::bench::CourierTransport courier_path(ctx, size, o);
        courier_runs.push_back(courier_path.run(size, n));
        courier_path.check_notifications();
      }
      if (bootstrap->rank() != 0) continue;
      if (!raw_runs.empty()) results.push_back(median(raw_runs));
      results.push_back(median(courier_runs));
    }
    if (bootstrap->rank() == 0) print(results, json);
    return 0;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
}

int run_atomic(int argc, char** argv) {
  courier::bench::AtomicOptions o;
  o.provider = default_provider();
  std::vector<std::string> strategies;  // empty: COURIER_ATOMICS as set (default auto)
  uint32_t proxy_threads = 1;
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--provider") {
      o.provider = parse_provider(value());
    } else if (flag == "--ops") {
      o.ops = parse_number(flag, value(), 8, uint64_t{1} << 36);
    } else if (flag == "--block") {
      o.block = static_cast<uint32_t>(parse_number(flag, value(), 16, 1 << 20));
    } else if (flag == "--writes-per-atomic") {
      o.writes_per_atomic = static_cast<uint32_t>(parse_number(flag, value(), 1, 7));
    } else if (flag == "--slots") {
      o.slots = static_cast<uint32_t>(parse_number(flag, value(), 1, 1 << 16));
    } else if (flag == "--strategies") {
      std::string list = value();
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
        if (item != "hw" && item != "imm" && item != "auto") {
          usage_error("--strategies '" + item + "' is invalid: expected hw, imm or auto");
        }
        strategies.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (flag == "--proxy-threads") {
      proxy_threads = static_cast<uint32_t>(parse_number(flag, value(), 1, 64));
    } else if (flag == "--check") {
      o.check = true;
    } else {
      return false;
    }
    return true;
  });
  if (o.block % 8 != 0) usage_error("--block must be a multiple of 8");
  try {
    Job job;
    std::shared_ptr<courier::Bootstrap> bootstrap = job.bootstrap;
    if (strategies.empty()) strategies.push_back("");
    std::vector<BenchResult> results;
    uint64_t violations = 0;
    for (const std::string& strategy : strategies) {
      courier::ContextOptions options;
      // One proxy thread per rank unless asked otherwise: proxies of shm and
      // tcp never sleep, and more of them than cores only take turns.
      options.env = {{"COURIER_OFI_PROVIDER", o.provider},
                     {"COURIER_PROXY_THREADS", std::to_string(proxy_threads)},
                     {"COURIER_CHANNELS", std::to_string(std::max(1, bootstrap->size() - 1))},
                     {"COURIER_NIC_WINDOW", "256"}};
      if (!strategy.empty()) options.env.emplace_back("COURIER_ATOMICS", strategy);
      options.bootstrap = bootstrap;
      courier::Context ctx(options);
      courier::bench::AtomicRun run = courier::bench::run_atomic_bench(ctx, o);
      violations += run.violations;
      if (bootstrap->rank() == 0) {
        results.push_back(run.result);
        const auto& s = run.stats;
        fmt::print(stderr,
                   "atomic ({} on rank 0): applied here {}, rejected {}, duplicates dropped {}, "
                   "held back {}, fenced {}\n",
                   s.add_u64, s.atomics_applied, s.atomics_rejected, s.duplicates, s.held_back,
                   s.fenced);
      }
    }
    if (bootstrap->rank() == 0) {
      print(results, json);
      if (o.check) fmt::print("violations: {}\n", violations);
    }
    return violations == 0 ? 0 : 1;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
}

int run_barrier(int argc, char** argv) {
  courier::bench::BarrierOptions o;
  o.provider = default_provider();
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--provider") {
      o.provider = parse_provider(value());
    } else if (flag == "--iters") {
      o.iters = static_cast<uint32_t>(parse_number(flag, value(), 1, 10'000'000));
    } else if (flag == "--scope") {
      const std::string scope = value();
      if (scope != "world" && scope != "rail") {
        usage_error("--scope '" + scope + "' is invalid: expected world or rail");
      }
      o.rail = scope == "rail";
    } else if (flag == "--check") {
      o.check = true;
    } else {
      return false;
    }
    return true;
  });
  try {
    Job job;
    std::shared_ptr<courier::Bootstrap> bootstrap = job.bootstrap;
    courier::ContextOptions options;
    options.env = {{"COURIER_OFI_PROVIDER", o.provider},
                   {"COURIER_PROXY_THREADS", "1"},
                   {"COURIER_CHANNELS", "1"}};
    options.bootstrap = bootstrap;
    courier::Context ctx(options);
    courier::bench::BarrierRun run = courier::bench::run_barrier_bench(ctx, o);
    if (bootstrap->rank() == 0) {
      if (json) {
        for (const auto& r : run.rows) {
          fmt::print(
              "{{\"bench\":\"barrier\",\"path\":\"{}\",\"provider\":\"{}\",\"ranks\":{},"
              "\"iters\":{},\"median_us\":{:.3f},\"p99_us\":{:.3f}}}\n",
              r.path, o.provider, bootstrap->size(), r.iters, r.median_us, r.p99_us);
        }
      } else {
        fmt::print("{:<10} {:<13} {:<9} {:>6} {:>8} {:>12} {:>12}\n", "bench", "path", "provider",
                   "ranks", "iters", "median us", "p99 us");
        for (const auto& r : run.rows) {
          fmt::print("{:<10} {:<13} {:<9} {:>6} {:>8} {:>12.2f} {:>12.2f}\n", "barrier", r.path,
                     o.provider, bootstrap->size(), r.iters, r.median_us, r.p99_us);
        }
      }
      if (o.check) fmt::print("violations: {}\n", run.violations);
    }
    return run.violations == 0 ? 0 : 1;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
}

std::vector<uint32_t> parse_token_counts(const std::string& flag, const std::string& text) {
  std::vector<uint32_t> counts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    counts.push_back(static_cast<uint32_t>(parse_number(flag, item, 1, 1 << 16)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return counts;
}

int run_ep(int argc, char** argv) {
  courier::bench::EpOptions o;
  std::string provider = default_provider();
  bool mode_given = false;
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--mode") {
      o.mode = value();
      if (o.mode != "ll" && o.mode != "ht") {
        usage_error("--mode '" + o.mode + "' is invalid: expected ll or ht");
      }
      mode_given = true;
    } else if (flag == "--tokens") {
      o.tokens = parse_token_counts(flag, value());
    } else if (flag == "--hidden") {
      o.hidden = static_cast<uint32_t>(parse_number(flag, value(), 1, 1 << 16));
    } else if (flag == "--topk") {
      o.topk = static_cast<uint32_t>(parse_number(flag, value(), 1, 64));
    } else if (flag == "--experts") {
      o.experts = static_cast<uint32_t>(parse_number(flag, value(), 1, 4096));
    } else if (flag == "--iters") {
      o.iters = static_cast<uint32_t>(parse_number(flag, value(), 1, 1000000));
    } else if (flag == "--fp8") {
      o.fp8 = true;
    } else if (flag == "--logfmt") {
      o.logfmt = true;
    } else if (flag == "--unmasked") {
      o.unmasked = true;
    } else if (flag == "--stream") {
      const std::string stream = value();
      if (stream != "own" && stream != "caller") {
        usage_error("--stream '" + stream + "' is invalid: expected own or caller");
      }
      o.caller_stream = stream == "caller";
    } else if (flag == "--provider") {
      provider = parse_provider(value());
    } else {
      return false;
    }
    return true;
  });
  if (!mode_given) usage_error("ep needs --mode ll or --mode ht");
  if (o.fp8 && o.hidden % 128 != 0) {
    usage_error(fmt::format("--fp8 needs --hidden a multiple of 128, not {}", o.hidden));
  }
  if (o.logfmt && (o.mode != "ll" || o.hidden % 128 != 0)) {
    usage_error(
        fmt::format("--logfmt needs --mode ll and --hidden a multiple of 128 (got --mode {} "
                    "--hidden {})",
                    o.mode, o.hidden));
  }
  if (o.topk > o.experts) {
    usage_error(fmt::format("--topk {} exceeds --experts {}", o.topk, o.experts));
  }
  try {
    Job job;
    std::shared_ptr<courier::Bootstrap> bootstrap = job.bootstrap;
    const int ranks = bootstrap->size();
    if (o.experts % static_cast<uint32_t>(ranks) != 0) {
      usage_error(fmt::format("--experts {} is not a multiple of the {} ranks", o.experts, ranks));
    }
    courier::ContextOptions options;
    options.env = {{"COURIER_OFI_PROVIDER", provider}};
    // Busy proxies on small machines: one thread and a channel per peer,
    // unless the environment says otherwise.
    if (std::getenv("COURIER_PROXY_THREADS") == nullptr) {
      options.env.emplace_back("COURIER_PROXY_THREADS", "1");
    }
    if (std::getenv("COURIER_CHANNELS") == nullptr) {
      options.env.emplace_back("COURIER_CHANNELS", std::to_string(ranks));
    }
    options.bootstrap = bootstrap;
    courier::Context ctx(options);
    const std::vector<courier::bench::EpRow> rows = courier::bench::run_ep_bench(ctx, o);
    if (bootstrap->rank() != 0) return 0;
    size_t mode_width = 6;  // "ll-fp8"; "ll-fp8-logfmt" widens the column
    for (const auto& r : rows) mode_width = std::max(mode_width, r.mode.size());
    if (!json) {
      fmt::print(
          "{:<5} {:<{}} {:<9} {:<14} {:>7} {:>7} {:>5} {:>8} {:>6} {:>6} {:>11} {:>11} {:>9} "
          "{:>11} {:>10} {:>9} {:>9} {:>8} {:>8} {:>6}\n",
          "bench", "mode", mode_width, "phase", "path", "tokens", "hidden", "topk", "experts",
          "ranks", "iters", "median us", "p99 us", "GB/s", "host copies", "host bytes", "gpu us",
          "gpu floor", "host us", "launches", "waits");
    }
    for (const auto& r : rows) {
      if (json) {
        fmt::print(
            "{{\"bench\":\"ep\",\"mode\":\"{}\",\"phase\":\"{}\",\"path\":\"{}\",\"provider\":"
            "\"{}\",\"tokens\":{},\"hidden\":{},\"topk\":{},\"experts\":{},\"ranks\":{},"
            "\"iters\":{},\"bytes\":{:.0f},\"median_us\":{:.3f},\"p99_us\":{:.3f},"
            "\"gbytes_per_s\":{:.6f},\"host_copies_per_call\":{:.2f},"
            "\"host_bytes_per_call\":{:.0f}{}}}\n",
            r.mode, r.phase, r.path, provider, r.tokens, o.hidden, o.topk, o.experts, ranks,
            r.iters, r.bytes, r.median_us, r.p99_us, r.gbytes_per_s, r.host_copies, r.host_bytes,
            (r.counted ? fmt::format(",\"launches_per_call\":{:.2f},\"host_waits_per_call\":{:.2f}",
                                     r.launches, r.host_waits)
                       : std::string()) +
                (r.gpu_timed ? fmt::format(",\"gpu_median_us\":{:.3f}", r.gpu_median_us)
                             : std::string()) +
                (r.floor_timed ? fmt::format(",\"gpu_floor_us\":{:.3f}", r.gpu_floor_us)
                               : std::string()) +
                (r.host_timed ? fmt::format(",\"host_median_us\":{:.3f}", r.host_median_us)
                              : std::string()));
      } else {
        const bool raw = r.path == "raw-write";  // its copies are not counted
        fmt::print(
            "{:<5} {:<{}} {:<9} {:<14} {:>7} {:>7} {:>5} {:>8} {:>6} {:>6} {:>11.1f} {:>11.1f} "
            "{:>9.3f} {:>11} {:>10} {:>9} {:>9} {:>8} {:>8} {:>6}\n",
            "ep", r.mode, mode_width, r.phase, r.path, r.tokens, o.hidden, o.topk, o.experts, ranks,
            r.iters, r.median_us, r.p99_us, r.gbytes_per_s,
            raw ? "-" : fmt::format("{:.1f}", r.host_copies),
            raw ? "-" : fmt::format("{:.0f}", r.host_bytes),
            r.gpu_timed ? fmt::format("{:.1f}", r.gpu_median_us) : "-",
            r.floor_timed ? fmt::format("{:.1f}", r.gpu_floor_us) : "-",
            r.host_timed ? fmt::format("{:.1f}", r.host_median_us) : "-",
            r.counted ? fmt::format("{:.1f}", r.launches) : "-",
            r.counted ? fmt::format("{:.1f}", r.host_waits) : "-");
      }
    }
    return 0;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
}

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

int run_scale(int argc, char** argv) {
  const uint64_t started_ns = courier::bench::steady_now_ns();
  courier::bench::ScaleOptions o;
  o.provider = default_provider();
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--provider") {
      o.provider = parse_provider(value());
    } else if (flag == "--barrier-iters") {
      o.barrier_iters = static_cast<uint32_t>(parse_number(flag, value(), 1, 1'000'000));
    } else if (flag == "--ep-iters") {
      o.ep_iters = static_cast<uint32_t>(parse_number(flag, value(), 1, 1'000'000));
    } else {
      return false;
    }
    return true;
  });
  try {
    Job job;
    std::shared_ptr<courier::Bootstrap> bootstrap = job.bootstrap;
    const double joined_ms =
        static_cast<double>(courier::bench::steady_now_ns() - started_ns) / 1e6;
    courier::ContextOptions options;
    options.env = {{"COURIER_OFI_PROVIDER", o.provider}};
    // One proxy thread and one channel per rank unless the environment
    // says otherwise: what grows with the job is then the job's doing.
    if (std::getenv("COURIER_PROXY_THREADS") == nullptr) {
      options.env.emplace_back("COURIER_PROXY_THREADS", "1");
    }
    if (std::getenv("COURIER_CHANNELS") == nullptr)
      options.env.emplace_back("COURIER_CHANNELS", "1");
    options.bootstrap = bootstrap;
    // The constructor's CPU time on this thread: the rank's own work, which
    // waits on the others do not add to (they block), however many ranks
    // share the cores.
    const double cpu_before_ms = thread_cpu_ms();
    courier::Context ctx(options);
    const double context_cpu_ms = thread_cpu_ms() - cpu_before_ms;
    const courier::bench::ScaleRun run =
        courier::bench::run_scale_bench(ctx, o, joined_ms, started_ns, context_cpu_ms);
    if (bootstrap->rank() != 0) return 0;
    const int ranks = bootstrap->size();
    if (!json) {
      fmt::print("{:<6} {:<9} {:>6} {:<24} {:<6} {:>12} {:>12} {:>12}\n", "bench", "provider",
                 "ranks", "quantity", "unit", "min", "median", "max");
    }
    auto emit = [&](const courier::bench::ScaleRow& r, const char* over) {
      if (json) {
        fmt::print(
            "{{\"bench\":\"scale\",\"provider\":\"{}\",\"ranks\":{},\"quantity\":\"{}\","
            "\"unit\":\"{}\",\"over\":\"{}\",\"min\":{:.4f},\"median\":{:.4f},\"max\":{:.4f}}}\n",
            o.provider, ranks, r.quantity, r.unit, over, r.min, r.median, r.max);
      } else {
        fmt::print("{:<6} {:<9} {:>6} {:<24} {:<6} {:>12.3f} {:>12.3f} {:>12.3f}\n", "scale",
                   o.provider, ranks, r.quantity, r.unit, r.min, r.median, r.max);
      }
    };
    for (const auto& r : run.per_rank) emit(r, "ranks");
    for (const auto& r : run.job) emit(r, "job");
    return 0;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
}

}  // namespace

int run_idle(int argc, char** argv) {
  courier::bench::IdleOptions o;
  o.provider = default_provider();
  bool json = parse_flags(argc, argv, [&](const std::string& flag, auto value) {
    if (flag == "--provider") {
      o.provider = parse_provider(value());
    } else if (flag == "--windows") {
      o.windows = static_cast<uint32_t>(parse_number(flag, value(), 1, 1000));
    } else if (flag == "--window-s") {
      o.window_s = static_cast<double>(parse_number(flag, value(), 1, 3600));
    } else if (flag == "--grace-s") {
      o.grace_s = static_cast<double>(parse_number(flag, value(), 0, 3600));
    } else {
      return false;
    }
    return true;
  });
  try {
    Job job;
    std::vector<courier::bench::IdleRow> rows = courier::bench::run_idle_bench(job.bootstrap, o);
    if (job.bootstrap->rank() != 0) return 0;
    const int ranks = job.bootstrap->size();
    if (json) {
      for (const auto& r : rows) {
        fmt::print(
            "{{\"bench\":\"idle\",\"path\":\"{}\",\"provider\":\"{}\",\"ranks\":{},"
            "\"proxy_threads\":{},\"windows\":{},\"window_s\":{},\"core_percent_max\":{:.3f},"
            "\"core_percent\":[{:.3f}]}}\n",
            r.path, o.provider, ranks, r.proxy_threads, o.windows, o.window_s, r.max_percent,
            fmt::join(r.core_percent, ","));
      }
    } else {
      fmt::print("{:<6} {:<10} {:<9} {:>6} {:>14} {:>18}  {}\n", "bench", "path", "provider",
                 "ranks", "proxy threads", "max % of a core", "per rank");
      for (const auto& r : rows) {
        fmt::print("{:<6} {:<10} {:<9} {:>6} {:>14} {:>18.2f}  {:.2f}\n", "idle", r.path,
                   o.provider, ranks, r.proxy_threads, r.max_percent,
                   fmt::join(r.core_percent, " "));
      }
    }
    return 0;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "courier-bench: {}\n", e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  if (argc < 2) usage_error("missing benchmark name");
  std::string name = argv[1];
  if (name == "fifo") return run_fifo(argc, argv);
  if (name == "transport") return run_transport(argc, argv);
  if (name == "atomic") return run_atomic(argc, argv);
  if (name == "barrier") return run_barrier(argc, argv);
  if (name == "ep") return run_ep(argc, argv);
  if (name == "idle") return run_idle(argc, argv);
  if (name == "scale") return run_scale(argc, argv);
  if (name == "--help" || name == "-h") {
    fmt::print("{}", kUsage);
    return 0;
  }
  usage_error("unknown benchmark '" + name + "'");
}
