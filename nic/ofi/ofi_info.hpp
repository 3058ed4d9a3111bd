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

#include <cstdint>
#include <string>
#include <string_view>

#include "ofi_fid.hpp"

namespace courier::ofi {

// The libfabric API version the backends are written against (Debian 12 and
// the GPU hosts ship 1.17).
inline constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

// The providers behind the nic-ofi backend's COURIER_OFI_PROVIDER knob, with
// their nominal performance (DESIGN.md section 5) for backend scoring. Kept
// here so that the plugin and courier-bench's raw baseline map names alike.
struct ProviderAlias {
  const char* knob_value;   // "shm", "tcp"
  const char* prov_name;    // what fi_getinfo calls it
  uint32_t latency_ns;      // nominal half round trip
  uint32_t bandwidth_mbps;  // nominal bandwidth, megabits per second
};
// nullptr when `knob_value` names no alias.
const ProviderAlias* find_provider_alias(std::string_view knob_value);

// The memory-registration modes the hints offer to honour.
inline constexpr uint64_t kRequestedMrMode =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

// Which optional features one fi_getinfo attempt asks for.
struct FeatureRequest {
  bool delivery_complete = false;  // tx op_flags FI_DELIVERY_COMPLETE
  bool ordered_writes = false;     // tx/rx msg_order FI_ORDER_RMA_WAW
  bool source = false;             // caps FI_SOURCE
  bool receives = false;           // caps FI_MSG|FI_RECV (needed under FI_RX_CQ_DATA)
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
  uint64_t max_msg_size = 0;
  std::string provider_name;  // fabric_attr->prov_name, e.g. "tcp;ofi_rxm"
};

// Builds the hints for one attempt. The caller owns the result.
InfoPtr make_hints(const std::string& prov_name, const FeatureRequest& features);

// Finds the best fi_info for `prov_name` (a libfabric provider name such as
// "shm", "tcp;ofi_rxm" or "efa"), trying feature sets from the richest down.
// On failure returns -errno and sets last_error(), for example
// "provider 'tcp;ofi_rxm' not available: fi_getinfo returned -61 (No data available)".
int probe_provider(const std::string& prov_name, ProviderProfile* out);

// One line describing the profile, for logs and courier-info.
std::string describe_profile(const ProviderProfile& profile);

}  // namespace courier::ofi
