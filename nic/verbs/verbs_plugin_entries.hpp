// The plugin struct of the verbs backends, shared by nic-cx7 and nic-bnxt:
// the shared C entry points (nic/plugin_entries.hpp) over this family's
// objects. Each plugin file supplies only its BackendTraits, description and
// knob table.
#pragma once

#include <courier/abi/nic_v1.h>

#include <array>
#include <string>

#include "nic/plugin_entries.hpp"
#include "verbs_backend.hpp"
#include "verbs_endpoint.hpp"
#include "verbs_error.hpp"
#include "verbs_memory.hpp"

namespace courier::verbs::entries {

// What nic/plugin_entries.hpp needs to know of this family.
struct PluginFamily {
  using Traits = BackendTraits;
  using Backend = verbs::Backend;
  using Endpoint = verbs::Endpoint;
  using MemoryRegion = verbs::MemoryRegion;
  static constexpr auto set_error = &verbs::set_error;
  static constexpr auto last_error = &verbs::last_error;
};

// The plugin struct of the verbs backend with `kTraits`:
//     const courier_nic_plugin_v1 kPlugin =
//         entries::make_nic_plugin<kTraits>("description", kKnobs);
template <const BackendTraits& kTraits, size_t kNumKnobs>
courier_nic_plugin_v1 make_nic_plugin(const char* description,
                                      const std::array<courier_knob_v1, kNumKnobs>& knobs) {
  return nic::make_plugin_struct<PluginFamily, kTraits>(description, knobs.data(), kNumKnobs,
                                                        nic::Atomics::offered);
}

// The knobs every verbs backend declares; `inflight_default` is the
// backend's COURIER_MAX_INFLIGHT_BYTES default ("0": no limit).
constexpr std::array<courier_knob_v1, 9> make_knobs(const char* inflight_default,
                                                    const char* inflight_help) {
  return {{
      {kDeviceKnob, "", nullptr,
       "RDMA device to use (e.g. mlx5_0); empty: the first device of this backend's family "
       "with an active port"},
      {kGidIndexKnob, "auto", nullptr,
       "GID table index for RoCE (or InfiniBand with GRH); auto: the first RoCE v2 GID, LID "
       "routing on InfiniBand"},
      {kTrafficClassKnob, "0", "0..255", "IP traffic class (DSCP << 2) of RoCE packets"},
      {kServiceLevelKnob, "0", "0..15", "InfiniBand service level / RoCE priority"},
      {kTimeoutKnob, "20", "1..31",
       "RC local ACK timeout exponent: 4.096 us * 2^value before a retry"},
      {kRetryKnob, "7", "0..7", "RC transport retries before IBV_WC_RETRY_EXC_ERR"},
      {kConnectTimeoutKnob, "60", "1..3600",
       "seconds ep_connect waits for every peer's queue pair number (lazy: a connection "
       "made on first use, for its peer)"},
      {kConnectKnob, "eager", "eager|lazy",
       "eager: ep_connect opens a queue pair to every peer; lazy: to a peer on the first "
       "post to it (queue pairs per peer actually talked to, docs/nic-verbs.md)"},
      {kInflightBytesKnob, inflight_default, "0..1099511627776", inflight_help},
  }};
}

}  // namespace courier::verbs::entries
