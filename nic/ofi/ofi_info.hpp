// Choosing a provider: the fi_getinfo hints every libfabric-based backend
// uses, and what the chosen fi_info lets the backend promise.
//
// The hints ask for the most demanding memory-registration model (the one
// AWS EFA imposes: FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED,
// FI_MR_PROV_KEY, FI_MR_ENDPOINT) so that the code which follows the returned
// mr_mode is the same everywhere. Optional features (delivery-complete
// semantics, write-after-write ordering, FI_SOURCE) are asked for first and
// dropped one by one when the provider cannot give them; what was granted is
// recorded in ProviderProfile and becomes capability bits of the backend.
#pragma once

#include <courier/abi/plugin_header.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ofi_fid.hpp"

namespace courier::ofi {

// The libfabric API version the backends are written against (Debian 12 and
// the GPU hosts ship 1.17).
inline constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

// The providers behind the backends' provider knobs (COURIER_OFI_PROVIDER,
// COURIER_EFA_PROVIDER), with their nominal performance (DESIGN.md section 5)
// for backend scoring. Kept here so that the plugins and courier-bench's raw
// baseline map names alike; each backend allows only some of them.
struct ProviderAlias {
  const char* knob_value;   // "shm", "tcp", "efa"
  const char* prov_name;    // what fi_getinfo calls it
  uint32_t latency_ns;      // nominal half round trip
  uint32_t bandwidth_mbps;  // nominal bandwidth, megabits per second
};
// nullptr when `knob_value` names no alias.
const ProviderAlias* find_provider_alias(std::string_view knob_value);

// The memory-registration modes the hints offer to honour. FI_MR_HMEM (device
// buffers must be registered, which Courier always does) is added where
// FI_HMEM is requested: it means nothing without it.
inline constexpr uint64_t kRequestedMrMode =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

// Which optional features one fi_getinfo attempt asks for.
struct FeatureRequest {
  bool delivery_complete = false;  // tx op_flags FI_DELIVERY_COMPLETE
  bool ordered_writes = false;     // tx/rx msg_order FI_ORDER_RMA_WAW
  bool source = false;             // caps FI_SOURCE
  bool receives = false;           // caps FI_MSG|FI_RECV (needed under FI_RX_CQ_DATA)
  // caps FI_ATOMIC|FI_READ|FI_REMOTE_READ (fetching atomics read remote memory
  // and write a local result); ordered_writes then also asks for FI_ORDER_WAW,
  // the bit that orders RMA writes and atomics with each other.
  bool atomics = false;
  // caps FI_HMEM and mr_mode FI_MR_HMEM: device memory can be registered.
  bool hmem = false;
};

// What a backend lets the probe ask for. The defaults are nic-ofi's.
struct ProbeOptions {
  // Try FI_ORDER_RMA_WAW. A backend that never claims ordered writes (nic-efa:
  // EFA's SRD reorders) does not ask, so the provider keeps its unordered,
  // usually faster, path.
  bool ordered_writes = true;
  // Ask once more with FI_HMEM and keep that answer when a device interface
  // (CUDA, ROCr) registers memory (see ofi_hmem.hpp).
  bool device_memory = false;
  // The most immediate-data bytes to report, whatever the provider carries
  // (nic-efa: 4, as on EFA, also over shm's 8).
  uint32_t max_imm_bytes = 8;
  // Devices (libfabric domains) to use, in order of preference: the first
  // one fi_getinfo lists wins; "rdmap16s27" also matches the domain
  // "rdmap16s27-rdm". None listed, or none found: the provider's first.
  std::vector<std::string> devices;
  // A device of `devices` must be found (the user named it): otherwise the
  // probe fails with -ENODEV naming the domains there are.
  bool device_required = false;
};

// The outcome of probing one provider. All endpoints of a backend are opened
// from `info` (a copy each), so they all share the same choices.
struct ProviderProfile {
  InfoPtr info;  // a single fi_info (next == nullptr)

  // Derived facts, each explained where probe_provider computes it.
  bool delivery_complete = false;  // a TX completion means remote memory is written
  bool ordered_writes = false;     // RMA writes to one peer land in post order
  bool source = false;             // completions can name the sender (FI_SOURCE)
  bool rx_cq_data = false;         // remote CQ data consumes posted receives
  bool virt_addr = false;          // remote addresses are virtual, not offsets
  bool auto_progress = false;      // data moves without the target reading its CQ
  // The provider does not report the length of an incoming write with remote
  // CQ data (tcp;ofi_rxm reports 0), so the sender carries it in the upper 32
  // bits of the CQ data and the immediate value shrinks to 32 bits.
  bool length_in_data = false;
  uint64_t mr_mode = 0;    // what the provider requires (fi_info's mr_mode)
  uint32_t imm_bytes = 0;  // immediate bytes Courier gets (see length_in_data)
  // COURIER_MEM_* the endpoints register: host, plus the device kinds whose
  // FI_HMEM interface works (ProbeOptions::device_memory only).
  uint32_t mem_kinds = COURIER_MEM_HOST;
  uint64_t max_msg_size = 0;
  std::string provider_name;  // fabric_attr->prov_name, e.g. "tcp;ofi_rxm"

  // Atomics (profiles from probe_atomic_provider only). With them,
  // ordered_writes means writes and atomics to one peer land in post order.
  bool atomics = false;     // fi_info caps include FI_ATOMIC
  uint32_t atomic_ops = 0;  // COURIER_NIC_ATOMIC_* that validated (probe_atomic_ops)
  // An atomic is posted only while fewer operations (writes and atomics) are
  // in flight on the endpoint; 0 means no limit. See ofi_info.cpp.
  uint32_t max_in_flight_for_atomics = 0;
};

// Builds the hints for one attempt. The caller owns the result.
InfoPtr make_hints(const std::string& prov_name, const FeatureRequest& features);

// Finds the best fi_info for `prov_name` (a libfabric provider name such as
// "shm", "tcp;ofi_rxm" or "efa"), trying feature sets from the richest down.
// On failure returns -errno and sets last_error(), for example
// "provider 'tcp;ofi_rxm' not available: fi_getinfo returned -61 (No data available)".
int probe_provider(const std::string& prov_name, ProviderProfile* out,
                   const ProbeOptions& options = {});

// As probe_provider, with FeatureRequest::atomics set on every attempt: the
// profile of endpoints that post atomics. Requesting FI_ATOMIC may change
// what the provider grants (tcp;ofi_rxm then drops write-after-write
// ordering), so this is a separate probe and never replaces the write path's
// profile. atomic_ops stays 0 until probe_atomic_ops fills it.
//
// `options` should name the domain the write path's probe chose (see
// Backend::create): atomic endpoints must open where the write path's do,
// on the network interface the user named for instance (COURIER_OFI_IFACE).
int probe_atomic_provider(const std::string& prov_name, ProviderProfile* out,
                          const ProbeOptions& options = {});

// Opens a throw-away endpoint from an atomic profile and asks the provider
// which of Courier's atomic ops it carries out (fi_atomicvalid FI_SUM for
// ADD, fi_fetch_atomicvalid FI_SUM for FETCH_ADD, fi_compare_atomicvalid
// FI_CSWAP for CAS; FI_UINT64 and FI_UINT32). Sets profile->atomic_ops.
// Defined in ofi_atomic.cpp.
int probe_atomic_ops(ProviderProfile* profile);

// True when the provider name is a chain with a libfabric utility layer
// ("tcp;ofi_rxm", "udp;ofi_rxd"): utility providers are named "ofi_*", and
// what they add on top of the core provider (RDM, atomics) is emulated in
// software over the core provider's messages.
bool has_utility_layer(std::string_view prov_name);

// Whether the provider's atomics can be trusted at all. shm 1.17 cannot:
// even one at a time per endpoint, when two processes add to the same
// target concurrently the target applies one sender's ADD with the other
// sender's operand (courier-semantics-check over 3 ranks: "0 + 5 - 3 gave 8",
// shared counters short by up to 3%), and from 4 processes on now and then
// with bytes of a shm address ("fi_shm:/") as the operand. So nic-ofi offers
// no atomics over shm; Courier emulates them over immediate data instead.
bool atomics_trusted(const std::string& prov_name);

// One line describing the profile, for logs and courier-info.
std::string describe_profile(const ProviderProfile& profile);

}  // namespace courier::ofi
