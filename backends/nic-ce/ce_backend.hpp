// The nic-ce backend: the GPU this process moves data with, its knobs, what
// it reports to the core (query) and the endpoints it opens. Every endpoint
// of the backend shares its mappings of peers' GPU allocations.
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ce_endpoint.hpp"
#include "ce_ipc_mappings.hpp"

namespace courier::nic_ce {

// What the plugin file declares (nic/plugin_entries.hpp's F::Traits).
struct BackendTraits {
  const char* name;
};

class Backend {
 public:
  // Probes CUDA, chooses the device and reads the knobs. Returns 0 or
  // -errno with last_error() set (-ENODEV without a CUDA device).
  static int create(const BackendTraits& traits, const courier_host_services_v1* host,
                    std::unique_ptr<Backend>* out);
  int query(courier_nic_props_v1* props) const;
  int open_endpoint(const courier_nic_ep_attr_v1& attr, std::unique_ptr<Endpoint>* out) const;

 private:
  Backend() = default;

  int device_ = 0;
  bool batch_copies_ = true;   // COURIER_CE_BATCH
  bool trace_ = false;         // COURIER_CE_TRACE
  uint64_t linger_ns_ = 3000;  // COURIER_CE_LINGER_US
  // Shared by the endpoints (it locks itself); closed after every endpoint,
  // since fini comes last.
  mutable IpcMappings mappings_;
  std::string device_name_;
  char pci_address_[32] = {};
};

}  // namespace courier::nic_ce
