// The TCP bootstrap's wire format (documented for humans in docs/bootstrap.md).
//
// Every message is one frame: a fixed 24-byte header followed by `length`
// payload bytes. Integers are unsigned and big-endian (network order).
//
//   offset size field
//        0    4 magic     0x43524253 ("CRBS": Courier Bootstrap)
//        4    2 version   kWireVersion
//        6    2 type      FrameType
//        8    8 sequence  collective number (0 for hello/welcome/error/gone;
//                         collectives completed for goodbye)
//       16    8 length    payload bytes that follow
//
// Payloads:
//   hello   (rank -> 0)  rank, world_size (32-bit two's complement),
//                        token_length u32, tree_port u16, token bytes;
//                        also child -> parent on a result-tree link
//                        (tree_port 0)
//   welcome (0 -> rank)  every rank has joined; for ranks 3 and up the
//                        parent's result-tree port u16 and host (UTF-8),
//                        empty otherwise (result_tree.hpp)
//   block   (rank -> 0)  this rank's allgather contribution
//   result  (0 -> rank)  the concatenation of all blocks in rank order
//                        (also parent -> child on a result-tree link)
//   error   (0 -> rank)  UTF-8 text; the receiver throws it as courier::Error
//   goodbye (both ways)  empty: the sender leaves the job in order; its
//                        connection closing next is not a death
//   gone    (0 -> rank)  dead rank (32-bit two's complement), then UTF-8
//                        text naming it; the receiver reports a peer failure
//   busy    (0 -> rank)  UTF-8 text: rank 0 turned this connection away
//                        for now (too many waiting); the joiner retries
//   failed  (rank -> 0)  as gone: the suspect rank, then UTF-8 text; the
//                        sender failed in a way nobody else sees (a
//                        transport failure), rank 0 relays it as gone
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace courier::wire {

inline constexpr uint32_t kMagic = 0x43524253;  // "CRBS"
// Version 2 added goodbye and gone (peer liveness), version 3 busy and
// failed, version 4 the result tree (tree_port in hello, welcome payload).
inline constexpr uint16_t kWireVersion = 4;
inline constexpr size_t kHeaderBytes = 24;
// A job token longer than this is refused (courier-run's is 64 hex digits).
inline constexpr size_t kMaxTokenBytes = 1024;
inline constexpr size_t kHelloFixedBytes = 14;
inline constexpr size_t kMaxHelloBytes = kHelloFixedBytes + kMaxTokenBytes;
// Error texts are truncated to this many bytes when sent.
inline constexpr size_t kMaxErrorBytes = 4096;
// Largest error or gone frame payload (gone adds the 4-byte rank).
inline constexpr size_t kMaxNoticeBytes = kMaxErrorBytes + 4;

enum class FrameType : uint16_t {
  hello = 1,
  welcome = 2,
  block = 3,
  result = 4,
  error = 5,
  goodbye = 6,
  gone = 7,
  busy = 8,
  failed = 9,
};
std::string_view to_string(FrameType type);

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kWireVersion;
  uint16_t type = 0;
  uint64_t sequence = 0;
  uint64_t length = 0;
};

std::array<std::byte, kHeaderBytes> encode_header(const FrameHeader& header);
FrameHeader decode_header(std::span<const std::byte, kHeaderBytes> bytes);

// Why a header cannot start an acceptable frame (bad magic, unknown version
// or type, length above `max_length`), or nullopt when it is fine.
// `limit_name` names the limit in the reason ("max_message_bytes").
std::optional<std::string> check_header(const FrameHeader& header, uint64_t max_length,
                                        std::string_view limit_name);

// Header and payload in one buffer, ready to send.
std::vector<std::byte> encode_frame(FrameType type, uint64_t sequence,
                                    std::span<const std::byte> payload);
std::vector<std::byte> encode_error_frame(std::string_view message);
// "rank `rank` is gone", with a message naming it (truncated to
// kMaxErrorBytes).
std::vector<std::byte> encode_gone_frame(int32_t rank, std::string_view message);
// The same payload as a failed frame (a rank reporting its own failure).
std::vector<std::byte> encode_failed_frame(int32_t suspect, std::string_view message);
struct Gone {
  int32_t rank = -1;
  std::string message;
};
// Parses a gone payload; nullopt when it is shorter than the rank field.
std::optional<Gone> decode_gone_payload(std::span<const std::byte> payload);

struct Hello {
  int32_t rank = -1;
  int32_t world_size = -1;
  std::string token;
  // Where this rank accepts its result-tree children; 0 when it has none.
  uint16_t tree_port = 0;
};
std::vector<std::byte> encode_hello_payload(const Hello& hello);
// Parses a hello payload; on failure returns nullopt and sets *reason.
std::optional<Hello> decode_hello_payload(std::span<const std::byte> payload, std::string* reason);

// A welcome's payload: the rank's parent in the result tree (ranks 3 and
// up), or nothing (port 0, empty host: ranks 1 and 2, which hear from rank
// 0 itself).
struct TreeParent {
  uint16_t port = 0;
  std::string host;  // numeric, without brackets
};
std::vector<std::byte> encode_welcome_payload(const TreeParent& parent);
// nullopt when the payload is neither empty nor a port and a host.
std::optional<TreeParent> decode_welcome_payload(std::span<const std::byte> payload);

// Compares the job token in time that depends only on the lengths, so that a
// peer cannot learn the token byte by byte from response times.
bool tokens_equal(std::string_view expected, std::string_view presented);

// Assembles one frame from a non-blocking socket across as many reads as it
// takes, so a server can serve many connections from one poll() loop. The
// header is checked as soon as it is complete: an oversized length is
// refused before any payload is buffered.
class FrameReader {
 public:
  enum class State {
    reading,    // need more bytes
    complete,   // header() and payload() hold a frame
    closed,     // the peer closed the connection (problem() says where)
    malformed,  // bad header (problem() says why)
    failed,     // socket error (problem() says which)
  };

  FrameReader(uint64_t max_length, std::string limit_name)
      : max_length_(max_length), limit_name_(std::move(limit_name)) {}

  // Reads what the socket holds now, without blocking.
  State read_available(int fd);
  State state() const { return state_; }
  const FrameHeader& header() const { return header_; }
  std::vector<std::byte>& payload() { return payload_; }
  const std::string& problem() const { return problem_; }
  // Bytes of the current frame received so far.
  uint64_t bytes_received() const { return header_filled_ + payload_filled_; }
  // Forgets the current frame, to read the next one.
  void reset();
  void set_max_length(uint64_t max_length, std::string limit_name) {
    max_length_ = max_length;
    limit_name_ = std::move(limit_name);
  }

 private:
  uint64_t max_length_;
  std::string limit_name_;
  State state_ = State::reading;
  std::array<std::byte, kHeaderBytes> header_bytes_{};
  size_t header_filled_ = 0;
  FrameHeader header_;
  std::vector<std::byte> payload_;
  uint64_t payload_filled_ = 0;
  std::string problem_;
};

}  // namespace courier::wire
