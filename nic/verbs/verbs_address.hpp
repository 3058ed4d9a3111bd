// How a verbs endpoint is addressed: the port's LID (InfiniBand) or one of
// its GIDs (RoCE), and the endpoint name peers receive in the all-gather.
//
// Endpoint name wire format (docs/wire-formats.md, "verbs endpoint name"),
// little-endian, 48 bytes:
//   0  u32 magic 0x42565243 ("CRVB")   4  u16 version (1)
//   6  u8  link layer (IBV_LINK_LAYER_*) 7  u8 port number
//   8  u16 lid                         10 u8  gid index (0xff: no GRH)
//   11 u8  path mtu (enum ibv_mtu)     12 u32 UD queue pair number
//   16 u32 UD qkey                     20 u32 reserved
//   24 u64 endpoint id (random, unique per endpoint)
//   32 u8[16] gid
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "verbs_device.hpp"

namespace courier::verbs {

inline constexpr uint32_t kNameMagic = 0x42565243;
inline constexpr uint16_t kNameVersion = 1;
inline constexpr size_t kNameBytes = 48;
inline constexpr uint8_t kNoGid = 0xff;

struct EndpointAddress {
  uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  uint8_t port = 0;
  uint16_t lid = 0;
  uint8_t gid_index = kNoGid;  // kNoGid: InfiniBand LID routing without GRH
  uint8_t mtu = IBV_MTU_1024;
  uint32_t ud_qpn = 0;
  uint32_t qkey = 0;
  uint64_t endpoint_id = 0;
  ibv_gid gid{};

  bool global() const { return gid_index != kNoGid; }
};

void encode_name(const EndpointAddress& address, std::byte* out);
// Returns 0, or -EINVAL with last_error naming `rank` and what is wrong.
int decode_name(const std::byte* in, size_t bytes, uint32_t rank, EndpointAddress* out);

// The GID index an endpoint on `port` uses. `knob` is COURIER_IB_GID_INDEX
// ("auto" / NULL / "" or a number). auto on RoCE: the first IPv4-mapped
// RoCE v2 GID, else the first other routable v2 one, else a link-local v2
// one (with a warning), else RoCE v1 (with a warning); on InfiniBand none
// (LID routing). Returns 0 or -EINVAL naming the
// knob. *warning is set when the choice deserves one.
int select_gid(const PortInfo& port, const char* knob, uint8_t* gid_index, ibv_gid* gid,
               std::string* warning);

// The address handle attributes that reach `remote` from `local`'s port,
// with traffic class and service level from the knobs.
ibv_ah_attr make_ah_attr(const EndpointAddress& local, const EndpointAddress& remote,
                         uint8_t traffic_class, uint8_t service_level);

}  // namespace courier::verbs
