// libcourier-nic-ofi.so: libfabric RDM endpoints over shm or tcp, the
// backend Courier uses where no RDMA NIC exists (docs/nic-ofi.md).
//
// The backend object and the entry points are nic/ofi's, shared with
// nic-efa; this file says what makes nic-ofi: its knobs and what it may
// promise.
#include <courier/abi/nic_v1.h>

#include "nic/ofi/ofi_backend.hpp"
#include "nic/ofi/ofi_plugin_entries.hpp"

namespace courier::nic_ofi {
namespace {

constexpr ofi::BackendTraits kTraits = {
    .name = "ofi",
    .description =
        "libfabric RDM endpoints over shm or tcp (one-sided writes, remote CQ data, atomics)",
    .provider_knob = "COURIER_OFI_PROVIDER",
    .provider_default = "shm",
    .provider_allowed = "shm|tcp",
    .provider_help =
        "libfabric provider: shm (processes of one host) or tcp (tcp;ofi_rxm, any IP network)",
    .write_timeout_knob = "COURIER_OFI_WRITE_TIMEOUT_S",
    // shm and tcp are the transports themselves, not stand-ins for hardware.
    .hardware_value = nullptr,
    .hardware_name = nullptr,
    .hardware_missing = nullptr,
    .may_claim_ordered_writes = true,
    .may_claim_loopback = true,
    .may_offer_atomics = true,
    .max_imm_bytes = 8,
    .device_memory = false,
};

constexpr courier_knob_v1 kKnobs[] = {
    {kTraits.provider_knob, kTraits.provider_default, kTraits.provider_allowed,
     kTraits.provider_help},
    {kTraits.write_timeout_knob, ofi::kWriteTimeoutDefault, ofi::kWriteTimeoutAllowed,
     "seconds after which a write without completion is reported as failed (-ETIMEDOUT); "
     "0 turns the watchdog off"},
};

constexpr courier_nic_plugin_v1 kPlugin = ofi::make_nic_plugin<kTraits>(kKnobs);

}  // namespace
}  // namespace courier::nic_ofi

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::nic_ofi::kPlugin;
}
