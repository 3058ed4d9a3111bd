// libcourier-nic-ce.so: a NIC backend for ranks that share a host, moving
// data with GPU copy engines (CUDA IPC peer copies) and host-side messages
// in shared memory. It lets the whole GPU -> FIFO -> proxy -> transport ->
// remote GPU path run on a multi-GPU host without an RDMA NIC.
//
// This file is the plugin table: the shared C entry points of Courier's NIC
// plugins (nic/plugin_entries.hpp) over nic-ce's Backend and Endpoint, and
// its knobs. No describe entry: there is no device of its own to report
// beyond the GPUs'.
#include <courier/abi/nic_v1.h>

#include "ce_backend.hpp"
#include "ce_endpoint.hpp"
#include "ce_error.hpp"
#include "nic/plugin_entries.hpp"

namespace courier::nic_ce {
namespace {

// What nic/plugin_entries.hpp needs to know of nic-ce.
struct PluginFamily {
  using Traits = BackendTraits;
  using Backend = nic_ce::Backend;
  using Endpoint = nic_ce::Endpoint;
  using MemoryRegion = LocalRegion;
  static constexpr auto set_error = &nic_ce::set_errorf;
  static constexpr auto last_error = &nic_ce::last_error;
};

const BackendTraits kTraits = {"ce"};

constexpr courier_knob_v1 kKnobs[] = {
    {"COURIER_CE_BATCH", "1", "0|1",
     "1: the copies a poll finds queued go to the copy engines as batches (one driver call and "
     "one event each, cudaMemcpyBatchAsync where the CUDA runtime has it); 0: one "
     "cudaMemcpyAsync and one event per write"},
    {"COURIER_CE_LINGER_US", "3", "0..1000",
     "with batching: copies wait while writes were posted less than this many microseconds ago, "
     "so that a kernel's pieces of one region, pushed microseconds apart, merge into one copy; "
     "0 launches them at once"},
    {"COURIER_CE_TRACE", "0", "0|1",
     "1: when an endpoint closes, print to stderr how many copies carried its writes and a "
     "timeline of its last 256 launches (for tuning)"},
};

const courier_nic_plugin_v1 kPlugin = nic::make_plugin_struct<PluginFamily, kTraits>(
    "GPU copy engines between the GPUs of one host (CUDA IPC), host messages in shared memory",
    kKnobs, sizeof kKnobs / sizeof kKnobs[0], nic::Atomics::offered);

}  // namespace
}  // namespace courier::nic_ce

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::nic_ce::kPlugin;
}
