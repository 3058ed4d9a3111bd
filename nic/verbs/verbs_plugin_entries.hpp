// The C entry points of the verbs backends (courier_nic_plugin_v1), shared by
// nic-cx7 and nic-bnxt: each plugin file supplies only its init (which picks
// its BackendTraits), its name, description and knob table. Nothing C++,
// exceptions included, crosses back into the core.
#pragma once

#include <courier/abi/nic_v1.h>

#include <array>

#include "verbs_backend.hpp"

namespace courier::verbs::entries {

int init(const BackendTraits& traits, const courier_host_services_v1* host, void** backend);
void fini(void* backend);
const char* last_error(void* backend);
int query(void* backend, courier_nic_props_v1* props);
int ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** ep);
int ep_close(void* ep);
int ep_name(void* ep, void* buf, size_t* len);
int ep_connect(void* ep, uint32_t num_peers, const void* names, size_t stride);
int mr_register(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                courier_nic_rkey_v1* rkey);
int mr_deregister(void* mr);
int post_write(void* ep, const courier_nic_write_v1* write);
int poll(void* ep, courier_nic_completion_v1* out, uint32_t max);
int post_atomic(void* ep, const courier_nic_atomic_v1* atomic);
int describe(void* backend, char* buf, size_t* len);

// init bound to one plugin's traits (a plugin entry takes no traits).
template <const BackendTraits& kTraits>
int init_for(const courier_host_services_v1* host, void** backend) {
  return init(kTraits, host, backend);
}

// The plugin struct of the verbs backend with `kTraits`:
//     const courier_nic_plugin_v1 kPlugin =
//         entries::make_nic_plugin<kTraits>("description", kKnobs);
template <const BackendTraits& kTraits, size_t kNumKnobs>
courier_nic_plugin_v1 make_nic_plugin(const char* description,
                                      const std::array<courier_knob_v1, kNumKnobs>& knobs) {
  courier_nic_plugin_v1 plugin{};
  plugin.header = {sizeof(courier_nic_plugin_v1), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR,
                   kTraits.name};
  plugin.description = description;
  plugin.knobs = knobs.data();
  plugin.num_knobs = static_cast<uint32_t>(kNumKnobs);
  plugin.init = &init_for<kTraits>;
  plugin.fini = &fini;
  plugin.last_error = &last_error;
  plugin.query = &query;
  plugin.ep_open = &ep_open;
  plugin.ep_close = &ep_close;
  plugin.ep_name = &ep_name;
  plugin.ep_connect = &ep_connect;
  plugin.mr_register = &mr_register;
  plugin.mr_deregister = &mr_deregister;
  plugin.post_write = &post_write;
  plugin.poll = &poll;
  plugin.post_atomic = &post_atomic;
  plugin.describe = &describe;
  return plugin;
}

// The knobs every verbs backend declares; `inflight_default` is the
// backend's COURIER_MAX_INFLIGHT_BYTES default ("0": no limit).
constexpr std::array<courier_knob_v1, 8> make_knobs(const char* inflight_default,
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
       "seconds ep_connect waits for every peer's queue pair number"},
      {kInflightBytesKnob, inflight_default, "0..1099511627776", inflight_help},
  }};
}

}  // namespace courier::verbs::entries
