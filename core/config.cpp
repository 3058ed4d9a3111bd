#include "core/config.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"
#include "courier/transfer_cmd.hpp"

extern char** environ;

namespace courier {

EnvLookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::vector<std::string> process_env_names() {
  std::vector<std::string> names;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    names.emplace_back(text.substr(0, text.find('=')));
  }
  return names;
}

std::string_view to_string(AtomicsMode mode) {
  switch (mode) {
    case AtomicsMode::automatic:
      return "auto";
    case AtomicsMode::hw:
      return "hw";
    case AtomicsMode::imm:
      return "imm";
    case AtomicsMode::provider:
      return "provider";
  }
  return "?";
}

namespace {

// "mlx5_0,mlx5_3" -> {"mlx5_0", "mlx5_3"}; empty names are an error.
std::vector<std::string> parse_name_list(const std::string& text, const char* name) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) fail("{}='{}' is invalid: an empty name in the list", name, text);
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// "0-3,8" -> {0, 1, 2, 3, 8}, sorted, without duplicates.
std::vector<int32_t> parse_cpu_list(const std::string& text, const char* name) {
  std::vector<int32_t> cpus;
  for (const std::string& item : parse_name_list(text, name)) {
    const size_t dash = item.find('-');
    auto number = [&](const std::string& digits) {
      if (digits.empty() || digits.size() > 6 ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        fail("{}='{}' is invalid: '{}' is not a CPU number or range like 0-3", name, text, item);
      }
      return static_cast<int32_t>(std::stol(digits));
    };
    const int32_t first = number(item.substr(0, dash));
    const int32_t last = dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (last < first) fail("{}='{}' is invalid: the range {} runs backwards", name, text, item);
    for (int32_t c = first; c <= last; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

// How one knob is parsed. Integers carry an inclusive range; `power_of_two`
// adds that constraint; enumerations list their accepted words.
struct Knob {
  const char* name;
  const char* default_value;
  const char* help;
};

constexpr Knob kKnobs[] = {
    {"COURIER_FIFO_DEPTH", "1024", "slots per FIFO channel (power of two, 8..8192)"},
    {"COURIER_MAX_INFLIGHT", "256", "commands in flight per channel before producers wait"},
    {"COURIER_NIC_WINDOW", "0",
     "writes each proxy thread keeps posted to its NIC endpoint; 0 = max in flight x channels"},
    {"COURIER_PROXY_THREADS", "4", "proxy threads per GPU (1..64)"},
    {"COURIER_CHANNELS", "8", "FIFO channels per GPU (1..1024)"},
    {"COURIER_DRAIN_BATCH", "32", "completions polled per batch (1..4096)"},
    {"COURIER_PROXY_SLEEP_MS", "50",
     "an idle proxy thread sleeps after this many ms without work (0..60000; 0 = always poll)"},
    {"COURIER_COALESCE_BYTES", "262144",
     "adjacent contiguous WRITEs of a channel to one peer and window go out as one NIC write "
     "of at most this many bytes (0..16777215; 0 = never merge)"},
    {"COURIER_ATOMICS", "auto", "atomic strategy: auto, hw, imm, provider"},
    {"COURIER_TIMEOUT_S", "60", "a wait longer than this fails with a diagnostic (1..86400)"},
    {"COURIER_LOG_LEVEL", "warn", "error, warn, info, debug, trace"},
    {"COURIER_GPU_BACKEND", "", "force a GPU backend: name, path, or ^name,... to exclude"},
    {"COURIER_GPU_DEVICE", "",
     "index of the GPU this rank uses; unset: local rank modulo the number of GPUs"},
    {"COURIER_NIC_BACKEND", "", "force a NIC backend: name, path, or ^name,... to exclude"},
    {"COURIER_BACKEND_PATH", "", "':'-separated directories searched for plugins first"},
    {"COURIER_FAULTS", "",
     "inject transport faults (testing): reorder=P,delay_us=N,dup=P,fail=P,seed=N"},
    {"COURIER_RANKS_PER_HOST", "0",
     "0: ranks share a host when hostname and boot id match; N: treat each block of N "
     "consecutive ranks as one host (tests multi-host paths on one machine)"},
    {"COURIER_RETRY_COUNT", "7",
     "re-posts of a transiently failed (-EBUSY) operation before it fails (0..64)"},
    {"COURIER_TOPOLOGY_XML", "",
     "a machine recorded with `lstopo --of xml --whole-io` to use instead of this one"},
    {"COURIER_NIC_SELECTION", "auto",
     "GPU-to-NIC pairing: auto (nearest, balanced), nearest, numa, round-robin"},
    {"COURIER_NICS", "", "comma-separated RDMA devices to use, in order (e.g. mlx5_0,mlx5_3)"},
    {"COURIER_PROXY_CPUS", "",
     "CPUs for the proxy threads (e.g. 0-3,8); unset: the GPU's NUMA node"},
    {"COURIER_EP_TRANSPORT", "auto",
     "EP dispatch/combine: direct (device stores to peers' GPUs on one host), proxy (the NIC "
     "backend), auto (direct where possible)"},
    {"COURIER_EP_LOOPBACK", "0",
     "1: the EP proxy path sends a rank's rows to itself through the NIC backend like any "
     "peer's (one rank then measures the whole path); 0: stored directly"},
    {"COURIER_EP_SEND_IN_PLACE", "auto",
     "auto: the EP proxy path's high-throughput WRITEs read the caller's tensors in place "
     "(registered for the call) where the NIC backend registers cheaply; 0: always copy them "
     "into the registered send area first"},
    {"COURIER_BOOTSTRAP", "", "rendezvous host:port (rank 0 listens), or 'mpi'"},
    {"COURIER_JOB_TOKEN", "", "the job's secret, presented by every rank to the rendezvous"},
    {"COURIER_RANK", "", "this process's rank (set by courier-run)"},
    {"COURIER_WORLD_SIZE", "", "number of ranks (set by courier-run)"},
    {"COURIER_LOCAL_RANK", "", "rank among the processes of this host"},
    {"COURIER_LOCAL_SIZE", "", "processes on this host"},
};

class Parser {
 public:
  explicit Parser(const EnvLookup& env) : env_(env) {}

  // The raw value, recording the entry for courier-info.
  std::optional<std::string> raw(const char* name) {
    const Knob& knob = find(name);
    std::optional<std::string> value = env_(name);
    entries_.push_back(
        {name, value ? *value : knob.default_value, value ? "environment" : "default", knob.help});
    return value;
  }

  uint32_t unsigned_in(const char* name, uint32_t fallback, uint32_t min, uint32_t max,
                       bool power_of_two = false) {
    std::optional<std::string> text = raw(name);
    if (!text) return fallback;
    uint64_t value = 0;
    const char* end = text->data() + text->size();
    auto [ptr, ec] = std::from_chars(text->data(), end, value);
    bool ok = !text->empty() && ec == std::errc() && ptr == end && value >= min && value <= max;
    if (ok && power_of_two) ok = (value & (value - 1)) == 0;
    if (!ok) {
      fail("{}='{}' is invalid: expected {}an integer in [{}, {}]", name, *text,
           power_of_two ? "a power of two, " : "", min, max);
    }
    return static_cast<uint32_t>(value);
  }

  template <class T, size_t N>
  T choice(const char* name, T fallback, const std::pair<std::string_view, T> (&options)[N]) {
    std::optional<std::string> text = raw(name);
    if (!text) return fallback;
    std::string accepted;
    for (const auto& [word, value] : options) {
      if (*text == word) return value;
      accepted += accepted.empty() ? std::string(word) : ", " + std::string(word);
    }
    fail("{}='{}' is invalid: expected one of {}", name, *text, accepted);
  }

  std::string text(const char* name) { return raw(name).value_or(""); }

  std::vector<ConfigEntry> take_entries() { return std::move(entries_); }

 private:
  static const Knob& find(const char* name) {
    for (const Knob& knob : kKnobs) {
      if (std::string_view(knob.name) == name) return knob;
    }
    fail("internal: knob {} is not declared in config.cpp", name);
  }

  const EnvLookup& env_;
  std::vector<ConfigEntry> entries_;
};

int parse_rank_number(std::string_view name, const std::string& text, int min, int max) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max) {
    fail("{}='{}' is invalid: expected an integer in [{}, {}]", name, text, min, max);
  }
  return value;
}

// A launcher's pair of variables naming rank and size.
struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr LauncherVars kLaunchers[] = {
    {"courier-run", "COURIER_RANK", "COURIER_WORLD_SIZE", "COURIER_LOCAL_RANK",
     "COURIER_LOCAL_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

constexpr int kMaxRanks = 1 << 16;

// srun sets SLURM_NTASKS_PER_NODE only with --ntasks-per-node; otherwise the
// tasks of this node come from SLURM_TASKS_PER_NODE ("2(x3),1": three nodes
// with 2 tasks, then one with 1) at index SLURM_NODEID.
std::optional<std::string> slurm_tasks_on_this_node(const EnvLookup& env) {
  std::optional<std::string> layout = env("SLURM_TASKS_PER_NODE");
  std::optional<std::string> node = env("SLURM_NODEID");
  if (!layout || !node) return std::nullopt;
  long node_id = -1;
  auto [end, ec] = std::from_chars(node->data(), node->data() + node->size(), node_id);
  if (ec != std::errc() || end != node->data() + node->size() || node_id < 0) return std::nullopt;
  std::string_view rest = *layout;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    long tasks = 0, repeat = 1;
    auto [p, e] = std::from_chars(item.data(), item.data() + item.size(), tasks);
    if (e != std::errc()) return std::nullopt;
    std::string_view suffix(p, static_cast<size_t>(item.data() + item.size() - p));
    if (suffix.starts_with("(x") && suffix.ends_with(")")) {
      std::string_view count = suffix.substr(2, suffix.size() - 3);
      auto [q, f] = std::from_chars(count.data(), count.data() + count.size(), repeat);
      if (f != std::errc() || q != count.data() + count.size()) return std::nullopt;
    } else if (!suffix.empty()) {
      return std::nullopt;
    }
    if (node_id < repeat) return std::to_string(tasks);
    node_id -= repeat;
  }
  return std::nullopt;
}  // TransferCmd carries a 16-bit rank

JobInfo detect_job(Parser& parser, const EnvLookup& env, bool need_rendezvous) {
  JobInfo job;
  job.launcher = "single";
  // COURIER_* entries are always recorded for courier-info, whichever launcher wins.
  std::optional<std::string> courier_rank = parser.raw("COURIER_RANK");
  std::optional<std::string> courier_size = parser.raw("COURIER_WORLD_SIZE");
  std::optional<std::string> courier_local_rank = parser.raw("COURIER_LOCAL_RANK");
  std::optional<std::string> courier_local_size = parser.raw("COURIER_LOCAL_SIZE");
  std::string bootstrap = parser.text("COURIER_BOOTSTRAP");
  job.job_token = parser.text("COURIER_JOB_TOKEN");

  for (const LauncherVars& vars : kLaunchers) {
    std::optional<std::string> rank = env(vars.rank);
    std::optional<std::string> size = env(vars.size);
    if (!rank && !size) continue;
    if (!rank || !size) {
      fail("{} is set but {} is not: both are needed to place this process in the job",
           rank ? vars.rank : vars.size, rank ? vars.size : vars.rank);
    }
    job.launcher = vars.launcher;
    job.world_size = parse_rank_number(vars.size, *size, 1, kMaxRanks);
    job.rank = parse_rank_number(vars.rank, *rank, 0, job.world_size - 1);
    std::optional<std::string> local_rank = env(vars.local_rank);
    std::optional<std::string> local_size = env(vars.local_size);
    if (!local_size && std::string_view(vars.launcher) == "srun") {
      local_size = slurm_tasks_on_this_node(env);
    }
    job.local_size =
        local_size ? parse_rank_number(vars.local_size, *local_size, 1, kMaxRanks) : job.world_size;
    job.local_rank = local_rank
                         ? parse_rank_number(vars.local_rank, *local_rank, 0, job.local_size - 1)
                         : job.rank % job.local_size;
    break;
  }
  (void)courier_rank, (void)courier_size, (void)courier_local_rank, (void)courier_local_size;
  // A Context given an already joined job (ContextOptions::bootstrap) takes
  // rank and size from it and never meets the rendezvous: under torchrun with
  // a process group there is neither a Courier rendezvous nor its token.
  if (!need_rendezvous) return job;

  if (bootstrap == "mpi") {
    if (!mpi_bootstrap_available()) {
      fail(
          "COURIER_BOOTSTRAP=mpi but this Courier was built without MPI: rebuild with "
          "-DCOURIER_WITH_MPI=ON");
    }
    job.use_mpi = true;
    return job;
  }
  if (!bootstrap.empty()) {
    size_t colon = bootstrap.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      fail("COURIER_BOOTSTRAP='{}' is invalid: expected host:port or mpi", bootstrap);
    }
    job.bootstrap_host = bootstrap.substr(0, colon);
    job.bootstrap_port = static_cast<uint16_t>(
        parse_rank_number("COURIER_BOOTSTRAP port", bootstrap.substr(colon + 1), 1, 65535));
  } else if (job.launcher == "torchrun") {
    // torch's own store owns MASTER_PORT; Courier's rendezvous takes the next one.
    std::optional<std::string> addr = env("MASTER_ADDR");
    std::optional<std::string> port = env("MASTER_PORT");
    if (!addr || !port) {
      fail(
          "RANK/WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not; set them or "
          "COURIER_BOOTSTRAP=host:port");
    }
    job.bootstrap_host = *addr;
    job.bootstrap_port =
        static_cast<uint16_t>(parse_rank_number("MASTER_PORT", *port, 1, 65534) + 1);
  } else if (job.world_size > 1) {
    if (mpi_bootstrap_available() && job.launcher == "mpirun") {
      job.use_mpi = true;
      return job;
    }
    fail(
        "{} ranks were launched by {} but no rendezvous is configured: set "
        "COURIER_BOOTSTRAP=host:port (reachable from every rank){}",
        job.world_size, job.launcher, mpi_bootstrap_available() ? " or COURIER_BOOTSTRAP=mpi" : "");
  }
  if (job.world_size > 1 && job.job_token.empty()) {
    fail(
        "COURIER_JOB_TOKEN is not set: the rendezvous at {}:{} admits only ranks presenting "
        "the job's secret. courier-run sets it; otherwise export the same random value on "
        "every rank",
        job.bootstrap_host, job.bootstrap_port);
  }
  return job;
}

}  // namespace

Config Config::load(const EnvLookup& env, bool need_job, bool need_rendezvous) {
  Parser parser(env);
  Config config;
  config.fifo_depth =
      parser.unsigned_in("COURIER_FIFO_DEPTH", config.fifo_depth, 8, kMaxFifoDepth, true);
  // Unset, it follows a smaller ring down (COURIER_FIFO_DEPTH=16 alone works);
  // set, it must fit.
  config.max_inflight = parser.unsigned_in(
      "COURIER_MAX_INFLIGHT", std::min(config.max_inflight, config.fifo_depth), 1, kMaxFifoDepth);
  if (config.max_inflight > config.fifo_depth) {
    fail("COURIER_MAX_INFLIGHT={} is invalid: it may not exceed COURIER_FIFO_DEPTH={}",
         config.max_inflight, config.fifo_depth);
  }
  config.nic_window = parser.unsigned_in("COURIER_NIC_WINDOW", config.nic_window, 0, 65536);
  config.proxy_threads = parser.unsigned_in("COURIER_PROXY_THREADS", config.proxy_threads, 1, 64);
  config.channels = parser.unsigned_in("COURIER_CHANNELS", config.channels, 1, 1024);
  config.drain_batch = parser.unsigned_in("COURIER_DRAIN_BATCH", config.drain_batch, 1, 4096);
  config.proxy_sleep_ms =
      parser.unsigned_in("COURIER_PROXY_SLEEP_MS", config.proxy_sleep_ms, 0, 60000);
  config.coalesce_bytes = parser.unsigned_in("COURIER_COALESCE_BYTES", config.coalesce_bytes, 0,
                                             TransferCmd::kMaxLength);
  config.atomics =
      parser.choice("COURIER_ATOMICS", config.atomics,
                    {std::pair<std::string_view, AtomicsMode>{"auto", AtomicsMode::automatic},
                     {"hw", AtomicsMode::hw},
                     {"imm", AtomicsMode::imm},
                     {"provider", AtomicsMode::provider}});
  config.timeout_s = parser.unsigned_in("COURIER_TIMEOUT_S", config.timeout_s, 1, 86400);
  config.log_level = parser.choice("COURIER_LOG_LEVEL", config.log_level,
                                   {std::pair<std::string_view, LogLevel>{"error", LogLevel::error},
                                    {"warn", LogLevel::warn},
                                    {"info", LogLevel::info},
                                    {"debug", LogLevel::debug},
                                    {"trace", LogLevel::trace}});
  config.gpu_backend = parser.text("COURIER_GPU_BACKEND");
  config.gpu_device =
      parser.unsigned_in("COURIER_GPU_DEVICE", config.gpu_device, 0, Config::kMaxGpuDevice);
  config.nic_backend = parser.text("COURIER_NIC_BACKEND");
  config.backend_path = parser.text("COURIER_BACKEND_PATH");
  config.faults = parse_fault_spec(parser.text("COURIER_FAULTS"), "COURIER_FAULTS");
  config.retry_count = parser.unsigned_in("COURIER_RETRY_COUNT", config.retry_count, 0, 64);
  config.topology_xml = parser.text("COURIER_TOPOLOGY_XML");
  config.nic_selection = parser.choice("COURIER_NIC_SELECTION", config.nic_selection,
                                       {std::pair<std::string_view, topology::NicSelection>{
                                            "auto", topology::NicSelection::automatic},
                                        {"nearest", topology::NicSelection::nearest},
                                        {"numa", topology::NicSelection::numa},
                                        {"round-robin", topology::NicSelection::round_robin}});
  config.nics = parse_name_list(parser.text("COURIER_NICS"), "COURIER_NICS");
  config.proxy_cpus = parse_cpu_list(parser.text("COURIER_PROXY_CPUS"), "COURIER_PROXY_CPUS");
  config.ep_transport =
      parser.choice("COURIER_EP_TRANSPORT", config.ep_transport,
                    {std::pair<std::string_view, EpTransport>{"auto", EpTransport::automatic},
                     {"direct", EpTransport::direct},
                     {"proxy", EpTransport::proxy}});
  config.ep_loopback = parser.choice("COURIER_EP_LOOPBACK", config.ep_loopback,
                                     {std::pair<std::string_view, bool>{"0", false}, {"1", true}});
  config.ep_send_in_place =
      parser.choice("COURIER_EP_SEND_IN_PLACE", config.ep_send_in_place,
                    {std::pair<std::string_view, bool>{"auto", true}, {"0", false}});
  config.ranks_per_host =
      parser.unsigned_in("COURIER_RANKS_PER_HOST", config.ranks_per_host, 0, 65536);
  if (need_job) config.job = detect_job(parser, env, need_rendezvous);
  config.entries = parser.take_entries();
  // The token is a secret: never show it.
  for (ConfigEntry& entry : config.entries) {
    if (entry.name == "COURIER_JOB_TOKEN" && !entry.value.empty()) entry.value = "(set)";
  }
  return config;
}

std::vector<std::string> Config::unknown_variables(const std::vector<std::string>& present,
                                                   const std::vector<std::string>& extra_known) {
  std::vector<std::string> unknown;
  for (const std::string& name : present) {
    if (!name.starts_with("COURIER_")) continue;
    bool known = std::any_of(std::begin(kKnobs), std::end(kKnobs),
                             [&](const Knob& knob) { return name == knob.name; }) ||
                 std::find(extra_known.begin(), extra_known.end(), name) != extra_known.end();
    if (!known) unknown.push_back(name);
  }
  return unknown;
}

}  // namespace courier
