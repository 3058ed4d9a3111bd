// libcourier-nic-cx7.so: NVIDIA/Mellanox ConnectX (mlx5) through verbs, with
// the NIC's own atomics. The code is nic/verbs; this file says which devices
// it drives and how it is tuned.
#include <courier/abi/nic_v1.h>

#include "nic/plugin_claims.hpp"
#include "nic/verbs/verbs_plugin_entries.hpp"

namespace courier::nic_cx7 {
namespace {

using namespace courier::verbs;

const BackendTraits kTraits = {
    .name = "cx7",
    // ibv_device_attr.vendor_id of ConnectX devices: Mellanox's IEEE OUI.
    .family = {.label = "NVIDIA/Mellanox ConnectX", .vendor_ids = {0x02c9}},
    .prefer_odp = false,  // pinning is cheap and fastest on ConnectX
    .inflight_bytes_default = "0",
    .latency_ns = 2000,
    .bandwidth_mbps = 50000,  // 400 Gb/s
};

constexpr auto kKnobs = entries::make_knobs(
    "0", "bytes of writes in flight per peer before posting waits; 0: no limit");

// The devices it drives (topology tries it first for them): those the mlx5
// driver names (mlx5_0), and any of Mellanox/NVIDIA's PCI vendor ID, also
// under a name rdma-core gave after the PCI path (ibp12s0, rocep59s0f0).
constexpr courier_nic_claim_v1 kClaims[] = {
    {.driver = "mlx5", .pci_vendor = 0, .pci_device = 0, .flags = 0},
    {.driver = nullptr, .pci_vendor = 0x15b3, .pci_device = 0, .flags = 0},
};

const courier_nic_plugin_v1 kPlugin = nic::with_claims(
    entries::make_nic_plugin<kTraits>(
        "NVIDIA ConnectX (mlx5) over verbs RC queue pairs: ordered writes, immediate data, NIC "
        "atomics",
        kKnobs),
    kClaims);

}  // namespace
}  // namespace courier::nic_cx7

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::nic_cx7::kPlugin;
}
