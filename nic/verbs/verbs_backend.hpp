// The backend object shared by nic-cx7 and nic-bnxt: reads the verbs knobs,
// opens the device of its family, decides what it can promise and opens
// endpoints. What differs between the two is data (BackendTraits), not code.
#pragma once

#include <courier/abi/nic_v1.h>

#include <memory>
#include <string>

#include "verbs_device.hpp"
#include "verbs_endpoint.hpp"

namespace courier::verbs {

// Knobs every verbs backend reads (declared in each plugin's knob table).
inline constexpr const char* kDeviceKnob = "COURIER_IB_DEVICE";
inline constexpr const char* kGidIndexKnob = "COURIER_IB_GID_INDEX";
inline constexpr const char* kTrafficClassKnob = "COURIER_IB_TC";
inline constexpr const char* kServiceLevelKnob = "COURIER_IB_SL";
inline constexpr const char* kTimeoutKnob = "COURIER_IB_TIMEOUT";
inline constexpr const char* kRetryKnob = "COURIER_IB_RETRY_CNT";
inline constexpr const char* kConnectTimeoutKnob = "COURIER_IB_CONNECT_TIMEOUT_S";
inline constexpr const char* kConnectKnob = "COURIER_IB_CONNECT";
inline constexpr const char* kInflightBytesKnob = "COURIER_MAX_INFLIGHT_BYTES";
// Derived by the core (not a knob): the NICs topology paired with this rank's
// GPU, nearest first, comma-separated. Used when COURIER_IB_DEVICE is unset.
inline constexpr const char* kPairedNicsVariable = "COURIER_PAIRED_NICS";

struct BackendTraits {
  const char* name;                    // plugin name, for log lines
  DeviceFamily family;                 // which devices it drives
  bool prefer_odp;                     // register host memory on demand when the device can
  const char* inflight_bytes_default;  // COURIER_MAX_INFLIGHT_BYTES when unset ("0": none)
  uint32_t latency_ns;                 // nominal, for the registry's scoring
  uint32_t bandwidth_mbps;
};

class Backend {
 public:
  static int create(const BackendTraits& traits, const courier_host_services_v1* host,
                    std::unique_ptr<Backend>* out);

  int query(courier_nic_props_v1* props) const;
  int open_endpoint(const courier_nic_ep_attr_v1& attr, std::unique_ptr<Endpoint>* out) const;
  // The device report for courier-info: one line per device fact.
  std::string describe() const;
  void log(int level, const std::string& message) const;

 private:
  explicit Backend(const BackendTraits& traits) : traits_(traits) {}
  int read_knobs();

  const BackendTraits& traits_;
  const courier_host_services_v1* host_ = nullptr;
  std::unique_ptr<Device> device_;
  mutable EndpointSet endpoints_;  // the open endpoints (they answer each other's handshakes)
  EndpointOptions endpoint_defaults_;
  uint32_t atomic_ops_ = 0;
  courier_nic_props_v1 props_{};
};

}  // namespace courier::verbs
