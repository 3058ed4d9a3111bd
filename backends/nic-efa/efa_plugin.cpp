// libcourier-nic-efa.so: AWS EFA through libfabric's efa provider
// (FI_EP_RDM over SRD), see docs/nic-efa.md.
//
// The backend object and the entry points are nic/ofi's, shared with
// nic-ofi; this file says what makes nic-efa. It promises what EFA gives on
// every instance, whatever the provider underneath grants: 4 bytes of
// immediate data, no write ordering (SRD delivers out of order) and no
// transport atomics, so the core orders at the receiver and emulates
// atomics over immediate data. COURIER_EFA_PROVIDER=shm|tcp runs the same
// code over a local provider, to test it without EFA hardware.
#include <courier/abi/nic_v1.h>

#include "nic/ofi/ofi_backend.hpp"
#include "nic/ofi/ofi_plugin_entries.hpp"
#include "nic/plugin_claims.hpp"

namespace courier::nic_efa {
namespace {

constexpr ofi::BackendTraits kTraits = {
    .name = "efa",
    .description =
        "AWS EFA through libfabric's efa provider (RDM over SRD: unordered writes, 4-byte "
        "immediate data, no transport atomics); COURIER_EFA_PROVIDER=shm|tcp runs it over a "
        "test stand-in instead of EFA",
    .provider_knob = "COURIER_EFA_PROVIDER",
    .provider_default = "efa",
    .provider_allowed = "efa|shm|tcp",
    .provider_help =
        "libfabric provider: efa (the EFA device); shm or tcp run nic-efa's code without EFA, "
        "for testing only",
    .write_timeout_knob = "COURIER_EFA_WRITE_TIMEOUT_S",
    .hardware_value = "efa",
    .hardware_name = "EFA",
    .hardware_missing = "no EFA device, or this libfabric was built without the efa provider",
    .may_claim_ordered_writes = false,
    .may_claim_loopback = false,
    // EFA pins what it registers; its stand-ins behave the same way.
    .may_claim_cheap_registration = false,
    .may_offer_atomics = false,
    .max_imm_bytes = 4,
    .device_memory = true,
    .device_knob = "COURIER_EFA_DEVICE",
};

constexpr courier_knob_v1 kKnobs[] = {
    {kTraits.provider_knob, kTraits.provider_default, kTraits.provider_allowed,
     kTraits.provider_help},
    {kTraits.write_timeout_knob, ofi::kWriteTimeoutDefault, ofi::kWriteTimeoutAllowed,
     "seconds after which a write without completion is reported as failed (-ETIMEDOUT); "
     "0 turns the watchdog off"},
    {kTraits.device_knob, "", nullptr,
     "EFA device (libfabric domain, e.g. rdmap16s27) to use; empty: the first of the NICs "
     "topology paired with this rank's GPU, else the provider's first"},
};

// The devices it drives (topology tries it first for them): Amazon's PCI
// vendor ID, which is how EFA devices are known under the names rdma-core
// gives them after their PCI path (rdmap16s27), and those the efa driver
// names itself (efa_0).
constexpr courier_nic_claim_v1 kClaims[] = {
    {.driver = "efa", .pci_vendor = 0, .pci_device = 0, .flags = 0},
    {.driver = nullptr, .pci_vendor = 0x1d0f, .pci_device = 0, .flags = 0},
};

constexpr courier_nic_plugin_v1 kPlugin =
    nic::with_claims(ofi::make_nic_plugin<kTraits>(kKnobs), kClaims);

}  // namespace
}  // namespace courier::nic_efa

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::nic_efa::kPlugin;
}
