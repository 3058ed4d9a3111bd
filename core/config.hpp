// Every COURIER_* variable is parsed and validated here, and only here.
//
// A bad value fails start-up with an Error naming the variable, the value and
// the accepted range. Launcher variables (torchrun, mpirun, srun, PMI) are
// read here too, to find this process's rank, the job size and the
// rendezvous address.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/faults/fault_spec.hpp"
#include "core/log.hpp"
#include "topology/pairing.hpp"

namespace courier {

// Looks up one environment variable; std::nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// The process environment.
EnvLookup process_env();
// Names of all variables in the process environment (for typo detection).
std::vector<std::string> process_env_names();

enum class AtomicsMode { automatic, hw, imm, provider };
std::string_view to_string(AtomicsMode mode);

// Where this process sits in the job and how the ranks meet.
struct JobInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string launcher;  // "single", "courier-run", "torchrun", "mpirun", "srun", "pmi"
  bool use_mpi = false;  // COURIER_BOOTSTRAP=mpi
  std::string bootstrap_host;
  uint16_t bootstrap_port = 0;
  std::string job_token;
};

// One line of the effective configuration, as courier-info shows it.
// COURIER_EP_TRANSPORT: how EP dispatch/combine move rows (docs/ep.md).
enum class EpTransport { automatic, direct, proxy };

struct ConfigEntry {
  std::string name;
  std::string value;
  std::string source;  // "default" or "environment"
  std::string help;
};

struct Config {
  uint32_t fifo_depth = 1024;
  uint32_t max_inflight = 256;
  uint32_t nic_window = 0;  // 0: max_inflight x channels per proxy thread
  uint32_t proxy_threads = 4;
  uint32_t channels = 8;
  uint32_t drain_batch = 32;
  // COURIER_PROXY_SLEEP_MS: idle time before a proxy thread sleeps on its
  // rank's doorbell; 0 = never.
  uint32_t proxy_sleep_ms = 50;
  uint32_t coalesce_bytes = 262144;  // COURIER_COALESCE_BYTES: 0 = never merge WRITEs
  AtomicsMode atomics = AtomicsMode::automatic;
  uint32_t timeout_s = 60;
  LogLevel log_level = LogLevel::warn;
  std::string gpu_backend;  // COURIER_GPU_BACKEND: "", a name, a path or "^a,b"
  // COURIER_GPU_DEVICE; kAutoGpuDevice: local rank modulo the device count.
  static constexpr uint32_t kAutoGpuDevice = ~0u;
  static constexpr uint32_t kMaxGpuDevice = 1023;
  uint32_t gpu_device = kAutoGpuDevice;
  std::string nic_backend;      // COURIER_NIC_BACKEND
  std::string backend_path;     // COURIER_BACKEND_PATH: ':'-separated directories
  FaultSpec faults;             // COURIER_FAULTS: docs/faults.md; inactive by default
  uint32_t ranks_per_host = 0;  // COURIER_RANKS_PER_HOST: 0 = by hostname; N simulates hosts
  uint32_t retry_count = 7;     // COURIER_RETRY_COUNT: re-posts of a transiently failed post
  EpTransport ep_transport = EpTransport::automatic;  // COURIER_EP_TRANSPORT
  bool ep_loopback = false;                           // COURIER_EP_LOOPBACK
  bool ep_send_in_place = true;                       // COURIER_EP_SEND_IN_PLACE (auto)
  // Topology (docs/topology.md):
  std::string topology_xml;  // COURIER_TOPOLOGY_XML: a recorded machine
  topology::NicSelection nic_selection =
      topology::NicSelection::automatic;  // COURIER_NIC_SELECTION
  std::vector<std::string> nics;          // COURIER_NICS: only these RDMA devices, in order
  std::vector<int32_t> proxy_cpus;        // COURIER_PROXY_CPUS: pin proxies here
  JobInfo job;
  std::vector<ConfigEntry> entries;

  // Parses every knob; throws courier::Error naming the first bad variable.
  // `need_job` = false skips launcher detection (tools that do not join a job).
  // `need_rendezvous` = false places the rank (launcher, local rank) but
  // neither looks for nor checks a rendezvous (COURIER_BOOTSTRAP,
  // MASTER_ADDR/PORT, COURIER_JOB_TOKEN): for a Context given a joined job.
  static Config load(const EnvLookup& env, bool need_job = true, bool need_rendezvous = true);

  // COURIER_* names in `present` that neither the core nor `extra_known`
  // (knobs declared by plugins) define: most likely typos.
  static std::vector<std::string> unknown_variables(const std::vector<std::string>& present,
                                                    const std::vector<std::string>& extra_known);
};

// Largest FIFO depth: a TransferCmd's 14-bit sequence number must tell two
// laps of the ring apart.
inline constexpr uint32_t kMaxFifoDepth = 8192;

}  // namespace courier
