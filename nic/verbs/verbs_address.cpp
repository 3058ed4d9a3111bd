#include "verbs_address.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs_error.hpp"

namespace courier::verbs {
namespace {

template <typename T>
void put(std::byte* out, size_t offset, T value) {
  std::memcpy(out + offset, &value, sizeof value);  // x86/arm64 hosts: little-endian
}
template <typename T>
T get(const std::byte* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof value);
  return value;
}

bool gid_is_ipv4_mapped(const ibv_gid& gid) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, prefix, sizeof prefix) == 0;
}

bool gid_is_link_local(const ibv_gid& gid) {
  return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80;  // fe80::/10
}

}  // namespace

void encode_name(const EndpointAddress& a, std::byte* out) {
  std::memset(out, 0, kNameBytes);
  put<uint32_t>(out, 0, kNameMagic);
  put<uint16_t>(out, 4, kNameVersion);
  put<uint8_t>(out, 6, a.link_layer);
  put<uint8_t>(out, 7, a.port);
  put<uint16_t>(out, 8, a.lid);
  put<uint8_t>(out, 10, a.gid_index);
  put<uint8_t>(out, 11, a.mtu);
  put<uint32_t>(out, 12, a.ud_qpn);
  put<uint32_t>(out, 16, a.qkey);
  put<uint64_t>(out, 24, a.endpoint_id);
  std::memcpy(out + 32, a.gid.raw, 16);
}

int decode_name(const std::byte* in, size_t bytes, uint32_t rank, EndpointAddress* out) {
  if (bytes < kNameBytes) {
    return set_error(-EINVAL, "ep_connect: rank %u's name is %zu bytes, a verbs name needs %zu",
                     rank, bytes, kNameBytes);
  }
  if (get<uint32_t>(in, 0) != kNameMagic || get<uint16_t>(in, 4) != kNameVersion) {
    return set_error(-EINVAL,
                     "ep_connect: rank %u's endpoint name is not a verbs endpoint name of "
                     "version %u (magic 0x%08x, version %u): do all ranks use the same backend?",
                     rank, kNameVersion, get<uint32_t>(in, 0), get<uint16_t>(in, 4));
  }
  EndpointAddress a;
  a.link_layer = get<uint8_t>(in, 6);
  a.port = get<uint8_t>(in, 7);
  a.lid = get<uint16_t>(in, 8);
  a.gid_index = get<uint8_t>(in, 10);
  a.mtu = get<uint8_t>(in, 11);
  a.ud_qpn = get<uint32_t>(in, 12);
  a.qkey = get<uint32_t>(in, 16);
  a.endpoint_id = get<uint64_t>(in, 24);
  std::memcpy(a.gid.raw, in + 32, 16);
  if (a.mtu < IBV_MTU_256 || a.mtu > IBV_MTU_4096 || a.ud_qpn == 0) {
    return set_error(-EINVAL, "ep_connect: rank %u's endpoint name is malformed (mtu %u, qpn %u)",
                     rank, a.mtu, a.ud_qpn);
  }
  *out = a;
  return 0;
}

int select_gid(const PortInfo& port, const char* knob, uint8_t* gid_index, ibv_gid* gid,
               std::string* warning) {
  const bool automatic = !knob || !*knob || std::strcmp(knob, "auto") == 0;
  if (!automatic) {
    char* end = nullptr;
    errno = 0;
    const long wanted = std::strtol(knob, &end, 10);
    if (errno != 0 || *end != '\0' || wanted < 0 || wanted >= kNoGid) {
      return set_error(-EINVAL, "COURIER_IB_GID_INDEX='%s' is not valid: expected auto or 0..254",
                       knob);
    }
    for (const GidEntry& entry : port.gids) {
      if (static_cast<long>(entry.index) == wanted) {
        *gid_index = static_cast<uint8_t>(wanted);
        *gid = entry.gid;
        if (port.ethernet() && entry.type != GidType::roce_v2) {
          *warning = "COURIER_IB_GID_INDEX=" + std::string(knob) + " is a " +
                     to_string(entry.type) + " GID: RoCE v1 is not routable across subnets";
        }
        return 0;
      }
    }
    return set_error(-EINVAL,
                     "COURIER_IB_GID_INDEX=%s: port %u has no valid GID at that index (%zu valid "
                     "entries)",
                     knob, port.number, port.gids.size());
  }
  if (!port.ethernet()) {
    *gid_index = kNoGid;  // InfiniBand: LID routing within the subnet
    return 0;
  }
  // RoCE v2 carries IP, so it routes across subnets; among its GIDs an
  // IPv4-mapped one (::ffff:a.b.c.d, what RoCE fabrics are usually configured
  // with) before another routable one, before the link-local fe80:: one, which
  // reaches only the same L2 segment. RoCE v1 last.
  const GidEntry* best = nullptr;
  int best_rank = 0;
  for (const GidEntry& entry : port.gids) {
    int rank = 1;  // RoCE v1
    if (entry.type == GidType::roce_v2) {
      rank = gid_is_ipv4_mapped(entry.gid) ? 4 : gid_is_link_local(entry.gid) ? 2 : 3;
    } else if (entry.type != GidType::roce_v1) {
      continue;
    }
    if (rank > best_rank) {
      best = &entry;
      best_rank = rank;
    }
  }
  if (best) {
    *gid_index = static_cast<uint8_t>(best->index);
    *gid = best->gid;
    if (best_rank == 1) {
      *warning = "port " + std::to_string(port.number) + " has no RoCE v2 GID: using RoCE v1 GID " +
                 std::to_string(best->index);
    } else if (best_rank == 2) {
      *warning = "port " + std::to_string(port.number) +
                 " has only a link-local RoCE v2 GID (index " + std::to_string(best->index) +
                 "): peers outside this L2 segment are unreachable; set COURIER_IB_GID_INDEX";
    }
    return 0;
  }
  return set_error(-ENETUNREACH,
                   "port %u is RoCE but has no GID (no IP address on the interface?); "
                   "set COURIER_IB_GID_INDEX",
                   port.number);
}

ibv_ah_attr make_ah_attr(const EndpointAddress& local, const EndpointAddress& remote,
                         uint8_t traffic_class, uint8_t service_level) {
  ibv_ah_attr ah{};
  ah.dlid = remote.lid;
  ah.sl = service_level;
  ah.port_num = local.port;
  if (local.global()) {
    ah.is_global = 1;
    ah.grh.dgid = remote.gid;
    ah.grh.sgid_index = local.gid_index;
    ah.grh.hop_limit = 64;
    ah.grh.traffic_class = traffic_class;
  }
  return ah;
}

}  // namespace courier::verbs
