// libcourier-nic-bnxt.so: Broadcom NetXtreme-E / Thor (bnxt_re) through verbs.
// Host memory is registered for on-demand paging when the device supports it
// for RC writes and atomics (no pinning), and writes in flight per peer are
// capped by default: the field reports "transport retry counter exceeded" on
// this NIC under deep queues. The code is nic/verbs.
#include <courier/abi/nic_v1.h>

#include "nic/plugin_claims.hpp"
#include "nic/verbs/verbs_plugin_entries.hpp"

namespace courier::nic_bnxt {
namespace {

using namespace courier::verbs;

// 1 MiB per peer: ~140 activations of 7 KiB in flight to each peer, enough
// to cover a round trip at 400 Gb/s, shallow enough to keep retries rare.
#define COURIER_BNXT_INFLIGHT_DEFAULT "1048576"

const BackendTraits kTraits = {
    .name = "bnxt",
    // ibv_device_attr.vendor_id of bnxt_re devices: Broadcom's PCI vendor ID.
    .family = {.label = "Broadcom NetXtreme (bnxt_re)", .vendor_ids = {0x14e4}},
    .prefer_odp = true,
    .inflight_bytes_default = COURIER_BNXT_INFLIGHT_DEFAULT,
    .latency_ns = 2500,
    .bandwidth_mbps = 50000,  // 400 Gb/s (Thor 2)
};

constexpr auto kKnobs = entries::make_knobs(
    COURIER_BNXT_INFLIGHT_DEFAULT,
    "bytes of writes in flight per peer before posting waits (conservative by default: deep "
    "queues cause transport retries on this NIC); 0: no limit");

// The devices it drives (topology tries it first for them): those the
// bnxt_re driver names (bnxt_re0), and any of Broadcom's PCI vendor ID
// (only RDMA devices are matched against claims).
constexpr courier_nic_claim_v1 kClaims[] = {
    {.driver = "bnxt_re", .pci_vendor = 0, .pci_device = 0, .flags = 0},
    {.driver = nullptr, .pci_vendor = 0x14e4, .pci_device = 0, .flags = 0},
};

const courier_nic_plugin_v1 kPlugin = nic::with_claims(
    entries::make_nic_plugin<kTraits>(
        "Broadcom NetXtreme/Thor (bnxt_re) over verbs RC queue pairs: on-demand paging, capped "
        "in-flight bytes",
        kKnobs),
    kClaims);

}  // namespace
}  // namespace courier::nic_bnxt

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::nic_bnxt::kPlugin;
}
