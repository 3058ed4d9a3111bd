// How nic-ce endpoints find each other: an endpoint's name is its segment's
// name, and ep_connect maps every peer's segment.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ce_endpoint.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

namespace {
constexpr uint32_t kNameMagic = 0x4E454343;  // "CCEN"
}  // namespace

int Endpoint::name(void* buf, size_t* len) const {
  if (buf == nullptr || len == nullptr) return set_error(-EINVAL, "ep_name: NULL argument");
  if (*len < sizeof(EndpointName)) {
    *len = sizeof(EndpointName);
    return set_error(-ENOSPC, "ep_name: the buffer is smaller than " +
                                  std::to_string(sizeof(EndpointName)) + " bytes");
  }
  EndpointName name{};
  name.magic = kNameMagic;
  name.pid = static_cast<uint32_t>(getpid());
  std::snprintf(name.segment, sizeof name.segment, "%s", own_.name().c_str());
  std::memcpy(buf, &name, sizeof name);
  *len = sizeof name;
  return 0;
}

int Endpoint::connect(uint32_t num_peers, const void* names, size_t stride) {
  if (names == nullptr || num_peers == 0 || stride < sizeof(EndpointName)) {
    return set_error(-EINVAL, "ep_connect: no names, or a stride below the name size");
  }
  if (!peers_.empty()) return set_error(-EALREADY, "ep_connect: already connected");
  std::vector<Peer> peers(num_peers);
  int32_t self = -1;
  for (uint32_t r = 0; r < num_peers; ++r) {
    EndpointName name;
    std::memcpy(&name, static_cast<const std::byte*>(names) + r * stride, sizeof name);
    name.segment[sizeof name.segment - 1] = '\0';
    if (name.magic != kNameMagic) {
      return set_error(-EINVAL, "ep_connect: rank " + std::to_string(r) +
                                    "'s name is not a nic-ce endpoint name");
    }
    if (own_.name() == name.segment) {
      peers[r].self = true;
      peers[r].layout = own_.get();
      self = static_cast<int32_t>(r);
      continue;
    }
    std::string error;
    if (int rc = Segment::open(name.segment, &peers[r].segment, &error); rc != 0) {
      return set_error(rc, "ep_connect: rank " + std::to_string(r) + " (pid " +
                               std::to_string(name.pid) + ") cannot be reached: " + error +
                               "; nic-ce connects only processes of one host");
    }
    peers[r].layout = peers[r].segment.get();
  }
  if (self < 0)
    return set_error(-EINVAL, "ep_connect: this endpoint's own name is not in the table");
  rank_ = self;
  peers_ = std::move(peers);
  return 0;
}

}  // namespace courier::nic_ce
