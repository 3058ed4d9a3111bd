// The nic-ofi backend object: reads the COURIER_OFI_PROVIDER knob, maps it to
// a libfabric provider, probes it once and describes what it can do.
// Endpoints are opened from the probed profile (nic/ofi/ofi_ep.hpp).
#pragma once

#include <courier/abi/nic_v1.h>

#include <memory>
#include <string>

#include "nic/ofi/ofi_info.hpp"

namespace courier::nic_ofi {

inline constexpr const char* kProviderKnob = "COURIER_OFI_PROVIDER";
inline constexpr const char* kProviderDefault = "shm";
inline constexpr const char* kProviderAllowed = "shm|tcp";
inline constexpr const char* kWriteTimeoutKnob = "COURIER_OFI_WRITE_TIMEOUT_S";
inline constexpr const char* kWriteTimeoutDefault = "30";

class Backend {
 public:
  // Reads the knob through `host`, probes the provider. On failure returns
  // -errno with last_error() naming the reason.
  static int create(const courier_host_services_v1* host, std::unique_ptr<Backend>* out);

  const ofi::ProviderProfile& profile() const { return profile_; }
  // The profile of endpoints opened with COURIER_NIC_EP_ATOMICS (FI_ATOMIC
  // requested); atomics == false when the provider has none.
  const ofi::ProviderProfile& atomic_profile() const { return atomic_profile_; }
  // The write watchdog's timeout (COURIER_OFI_WRITE_TIMEOUT_S), 0 when off.
  uint32_t write_timeout_ms() const { return write_timeout_ms_; }
  // Fills the caller's props up to props->struct_size.
  int query(courier_nic_props_v1* props) const;

  void log(int level, const char* message) const;

 private:
  Backend() = default;
  // Probes the provider again with FI_ATOMIC, validates each op and fills
  // atomic_ops, atomic_native and caps_with_atomics.
  int probe_atomics(const std::string& prov_name);

  const courier_host_services_v1* host_ = nullptr;
  ofi::ProviderProfile profile_;
  ofi::ProviderProfile atomic_profile_;
  uint32_t write_timeout_ms_ = 0;
  courier_nic_props_v1 props_{};
};

}  // namespace courier::nic_ofi
