// The skeleton's wire format: what travels between two endpoints.
//
// A real NIC's wire format is fixed by the hardware and its protocol (RoCE,
// InfiniBand, EFA's SRD); the backend never builds packets. The skeleton has
// to carry its own, over one AF_UNIX stream per (initiator, target) pair:
//
//   initiator -> target   HELLO (once, the initiator's rank), then WRITEs,
//                         each a FrameHeader followed by `length` bytes
//   target -> initiator   one ACK per WRITE, in order, with the outcome
//
// Both ends are processes of one host, so fields are in host byte order.
#pragma once

#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace courier::skeleton {

// An endpoint's address, as ep_name() hands it out and ep_connect() receives
// it: an abstract-namespace AF_UNIX socket name (no file on disk). Fixed
// size, because the core passes names in a table of fixed stride without
// their lengths; zero-filled beyond `length` so that two names compare with
// memcmp. A NIC puts its port's GID/LID and queue-pair number here.
struct EndpointAddress {
  uint32_t length = 0;                            // bytes of `path` in use
  char path[sizeof(sockaddr_un::sun_path)] = {};  // path[0] == '\0': abstract namespace
};
static_assert(sizeof(EndpointAddress) == 112);

enum class FrameKind : uint16_t {
  kHello = 1,  // initiator -> target: `rank` is the initiator's rank
  kWrite = 2,  // initiator -> target: `length` payload bytes follow
  kAck = 3,    // target -> initiator: `sequence` was applied (status 0) or refused
};

// Marks every frame, so a stream that lost its framing is noticed at once.
inline constexpr uint32_t kFrameMagic = 0x4c4b5343;  // "CSKL"

// Flags of a kWrite frame.
inline constexpr uint16_t kFrameImm = 1u << 0;  // deliver `imm` to the target's poll()

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  FrameKind kind = FrameKind::kWrite;
  uint16_t flags = 0;
  uint32_t rank = 0;      // kHello: the initiator's rank
  int32_t status = 0;     // kAck: 0, or -errno why the target refused the write
  uint64_t sequence = 0;  // kWrite/kAck: per stream, from 0; an ACK names its WRITE
  uint64_t key = 0;       // kWrite: the target region's key (courier_nic_rkey_v1.key)
  uint64_t offset = 0;    // kWrite: where in that region
  uint64_t length = 0;    // kWrite: payload bytes that follow the header
  uint32_t imm = 0;       // kWrite with kFrameImm: 4 bytes of immediate data
  uint32_t reserved = 0;
};
static_assert(sizeof(FrameHeader) == 56, "the header is read and written as raw bytes");

// Writes fail at the target with these, carried back in the ACK's status.
inline constexpr int kBadKeyStatus = -EACCES;      // no region with that key
inline constexpr int kOutOfRangeStatus = -ERANGE;  // past the end of the region

}  // namespace courier::skeleton
