// The backend object of every libfabric-based NIC plugin (nic-ofi, nic-efa):
// reads the provider knob, maps it to a libfabric provider, probes it once
// and describes what it can do. Endpoints are opened from the probed profile
// (ofi_ep.hpp); the C entry points are nic/plugin_entries.hpp's.
//
// What differs between the plugins is data, not code: a BackendTraits
// struct each plugin declares (backends/nic-ofi, backends/nic-efa).
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ofi_info.hpp"

namespace courier::ofi {

class Endpoint;

// The write watchdog's knob range and default, alike in every plugin.
inline constexpr const char* kWriteTimeoutDefault = "30";
inline constexpr const char* kWriteTimeoutAllowed = "0..86400";

struct BackendTraits {
  const char* name;         // plugin name and log component: "ofi", "efa"
  const char* description;  // courier_nic_plugin_v1.description

  // The provider knob: its values are ProviderAlias knob values (ofi_info.hpp),
  // and only those in `provider_allowed` ("shm|tcp") are accepted.
  const char* provider_knob;  // "COURIER_OFI_PROVIDER"
  const char* provider_default;
  const char* provider_allowed;
  const char* provider_help;
  const char* write_timeout_knob;  // "COURIER_OFI_WRITE_TIMEOUT_S"

  // The knob value that means the hardware the plugin is for ("efa") and its
  // name ("EFA"). Every other allowed value is a test stand-in: init logs a
  // WARN line and props.device says so. nullptr: every value is a real
  // transport (nic-ofi).
  const char* hardware_value;
  const char* hardware_name;
  // Why the hardware's provider may be absent, for the init failure.
  const char* hardware_missing;

  // What the plugin may promise, whatever the provider grants.
  bool may_claim_ordered_writes;
  // A rank may write to itself (its own address is in the AV): checked on
  // shm and tcp; not claimed where no hardware run has shown it.
  bool may_claim_loopback;
  // Registration pins nothing (software providers: shm, tcp), so the core
  // may register a caller's buffer per call (COURIER_NIC_CAP_CHEAP_REGISTRATION).
  bool may_claim_cheap_registration;
  bool may_offer_atomics;  // false: no probe, atomic_ops 0, post_atomic NULL
  uint32_t max_imm_bytes;  // immediate-data width reported at most
  bool device_memory;      // ask for FI_HMEM; register CUDA/ROCm memory where granted

  // The knob naming the device (libfabric domain) to use, e.g.
  // "COURIER_EFA_DEVICE"; unset, the hardware's provider takes the first of
  // the NICs topology paired with this rank's GPU (COURIER_PAIRED_NICS) it
  // lists. nullptr: the provider's first domain (nic-ofi: shm, tcp).
  const char* device_knob = nullptr;
};

class Backend {
 public:
  // Reads the knobs through `host`, probes the provider. On failure returns
  // -errno with last_error() naming the reason. `traits` must outlive the
  // backend (plugins pass a static object).
  static int create(const BackendTraits& traits, const courier_host_services_v1* host,
                    std::unique_ptr<Backend>* out);

  const BackendTraits& traits() const { return *traits_; }
  const ProviderProfile& profile() const { return profile_; }
  // The profile of endpoints opened with COURIER_NIC_EP_ATOMICS (FI_ATOMIC
  // requested); atomics == false when the provider has none.
  const ProviderProfile& atomic_profile() const { return atomic_profile_; }
  // The write watchdog's timeout, 0 when off.
  uint32_t write_timeout_ms() const { return write_timeout_ms_; }
  // Fills the caller's props up to props->struct_size.
  int query(courier_nic_props_v1* props) const;
  // An endpoint as `attr` asks: atomic endpoints open from their own profile.
  int open_endpoint(const courier_nic_ep_attr_v1& attr, std::unique_ptr<Endpoint>* out) const;
  // The device report (NIC ABI 1.2 describe), lines ending in '\n'
  // (ofi_describe.cpp).
  std::string describe() const;

  void log(int level, const char* message) const;

 private:
  explicit Backend(const BackendTraits& traits) : traits_(&traits) {}
  int parse_write_timeout(const char* value);
  // Probes the provider again with FI_ATOMIC, validates each op and fills
  // atomic_ops, atomic_native and caps_with_atomics.
  // `options`: the write path's, naming the domain it chose.
  int probe_atomics(const std::string& prov_name, const ProbeOptions& options);
  // Before the first shm endpoint: the regions of processes killed before
  // they could remove them would stay in /dev/shm for good (ofi_fabric.hpp).
  void remove_stale_regions() const;

  const BackendTraits* traits_;
  const courier_host_services_v1* host_ = nullptr;
  ProviderProfile profile_;
  ProviderProfile atomic_profile_;
  uint32_t write_timeout_ms_ = 0;
  courier_nic_props_v1 props_{};
};

}  // namespace courier::ofi
