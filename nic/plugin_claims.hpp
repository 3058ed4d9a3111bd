// The devices one of Courier's own NIC plugins claims (NIC ABI 1.3,
// courier_nic_claim_v1): a plugin file adds its claims table to the struct
// it built,
//     constexpr courier_nic_claim_v1 kClaims[] = {
//         {.driver = "mlx5", .pci_vendor = 0, .pci_device = 0, .flags = 0}, ...};
//     kPlugin = nic::with_claims(<its struct>, kClaims);
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstddef>
#include <cstdint>

namespace courier::nic {

template <size_t N>
constexpr courier_nic_plugin_v1 with_claims(courier_nic_plugin_v1 plugin,
                                            const courier_nic_claim_v1 (&claims)[N]) {
  plugin.claims = claims;
  plugin.num_claims = static_cast<uint32_t>(N);
  return plugin;
}

}  // namespace courier::nic
