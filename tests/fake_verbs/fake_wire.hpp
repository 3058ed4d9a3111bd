// The wire between fake HCAs: Unix-domain stream sockets in the abstract
// namespace (nothing on disk to clean up), named after the HCA number that
// its LID or GID encodes, carrying frames of one header plus payload. All
// sockets are non-blocking; only the engine thread touches them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "fake_fd.hpp"

namespace courier::fake_verbs {

// HCA numbers: 1..kMaxHcaNumber, so a number is also a valid unicast LID and
// fits the 10.x.y.z host part of the IPv4-mapped GIDs.
inline constexpr uint32_t kMaxHcaNumber = 0xBFFF;

enum class FrameKind : uint16_t { Request = 1, Response = 2 };

enum class ResponseStatus : uint32_t {
  Ack = 0,
  RemoteAccessError = 1,     // bad rkey, range or access rights
  RemoteInvalidRequest = 2,  // malformed atomic
  ReceiverNotReady = 3,      // no receive posted: retry after the RNR delay
  QpNotReady = 4,            // no such QP or not in RTR/RTS yet: retry until the bound
};

// One header layout for both directions; fields a frame does not use are zero.
struct FrameHeader {
  uint32_t magic = 0;
  FrameKind kind = FrameKind::Request;
  uint16_t opcode = 0;  // ibv_wr_opcode of the request
  uint64_t payload_length = 0;
  uint32_t source_hca = 0;
  uint32_t source_qpn = 0;
  uint32_t target_qpn = 0;
  uint32_t psn = 0;
  uint64_t serial = 0;      // requester's WR serial, echoed
  uint64_t generation = 0;  // requester QP's generation, echoed
  uint64_t remote_addr = 0;
  uint64_t length = 0;  // bytes the request covers (atomics: the SGE length)
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  uint32_t qkey = 0;
  uint32_t has_imm = 0;
  uint32_t link_layer = 0;
  uint32_t global = 0;  // the sender used a GRH (RoCE, or an IB AH with is_global)
  uint16_t source_lid = 0;
  uint16_t datagram = 0;  // a UD send (no response)
  ResponseStatus status = ResponseStatus::Ack;
  uint32_t rnr_delay_us = 0;
  uint64_t atomic_original = 0;
  uint8_t sgid[16] = {};
  uint8_t dgid[16] = {};
};
inline constexpr uint32_t kFrameMagic = 0x46564231;  // "FVB1"

struct Frame {
  FrameHeader header;
  std::vector<std::byte> payload;
};

// A socket bound to the abstract name of one HCA number.
struct BoundSocket {
  OwnedFd fd;
  uint32_t number = 0;
};

// Binds a fresh socket to the first free HCA number at or after `start`
// (wrapping), so concurrent processes never collide. Nothing if none is free.
std::optional<BoundSocket> bind_free_number(uint32_t start);
// Binds a fresh socket to exactly `number`; nothing if it is taken.
std::optional<BoundSocket> bind_number(uint32_t number);

class Connection {
 public:
  Connection(OwnedFd fd, uint64_t id, std::optional<uint32_t> peer)
      : fd_(std::move(fd)), id_(id), peer_(peer) {}

  int fd() const { return fd_.get(); }
  uint64_t id() const { return id_; }
  // The HCA this process dialled, or nothing for an accepted connection.
  std::optional<uint32_t> peer() const { return peer_; }
  bool closed() const { return closed_; }
  bool wants_write() const { return !outgoing_.empty(); }

  void send(const FrameHeader& header, const std::byte* payload, size_t payload_length);
  // Reads what the socket has; appends complete frames. Marks the connection
  // closed on EOF or error (a malformed frame is reported and closes it too).
  void receive(std::vector<Frame>& frames);
  // Writes as much queued output as the socket takes.
  void flush();

 private:
  OwnedFd fd_;
  uint64_t id_;
  std::optional<uint32_t> peer_;
  bool closed_ = false;
  std::vector<std::byte> incoming_;
  std::deque<std::vector<std::byte>> outgoing_;
  size_t outgoing_offset_ = 0;  // into outgoing_.front()
};

enum class DialResult { Connected, Refused, TryLater };
// Starts a non-blocking connection to HCA `number`.
DialResult dial(uint32_t number, OwnedFd& connected);

}  // namespace courier::fake_verbs
