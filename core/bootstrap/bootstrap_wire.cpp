#include "core/bootstrap/bootstrap_wire.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/bootstrap/socket.hpp"

namespace courier::wire {

namespace {

template <class T>
void put_big_endian(std::byte* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out[sizeof(T) - 1 - i] = static_cast<std::byte>(value & 0xff);
    value = static_cast<T>(value >> 8);
  }
}

template <class T>
T get_big_endian(const std::byte* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value = static_cast<T>((value << 8) | std::to_integer<T>(in[i]));
  }
  return value;
}

bool known_type(uint16_t type) {
  return type >= static_cast<uint16_t>(FrameType::hello) &&
         type <= static_cast<uint16_t>(FrameType::failed);
}

}  // namespace

std::string_view to_string(FrameType type) {
  switch (type) {
    case FrameType::hello:
      return "hello";
    case FrameType::welcome:
      return "welcome";
    case FrameType::block:
      return "block";
    case FrameType::result:
      return "result";
    case FrameType::error:
      return "error";
    case FrameType::goodbye:
      return "goodbye";
    case FrameType::gone:
      return "gone";
    case FrameType::busy:
      return "busy";
    case FrameType::failed:
      return "failed";
  }
  return "unknown";
}

std::array<std::byte, kHeaderBytes> encode_header(const FrameHeader& header) {
  std::array<std::byte, kHeaderBytes> bytes{};
  put_big_endian(bytes.data() + 0, header.magic);
  put_big_endian(bytes.data() + 4, header.version);
  put_big_endian(bytes.data() + 6, header.type);
  put_big_endian(bytes.data() + 8, header.sequence);
  put_big_endian(bytes.data() + 16, header.length);
  return bytes;
}

FrameHeader decode_header(std::span<const std::byte, kHeaderBytes> bytes) {
  FrameHeader header;
  header.magic = get_big_endian<uint32_t>(bytes.data() + 0);
  header.version = get_big_endian<uint16_t>(bytes.data() + 4);
  header.type = get_big_endian<uint16_t>(bytes.data() + 6);
  header.sequence = get_big_endian<uint64_t>(bytes.data() + 8);
  header.length = get_big_endian<uint64_t>(bytes.data() + 16);
  return header;
}

std::optional<std::string> check_header(const FrameHeader& header, uint64_t max_length,
                                        std::string_view limit_name) {
  if (header.magic != kMagic) {
    return fmt::format("bad magic 0x{:08x} (expected 0x{:08x}): not a Courier bootstrap peer",
                       header.magic, kMagic);
  }
  if (header.version != kWireVersion) {
    return fmt::format("wire protocol version {} (this build speaks version {})", header.version,
                       kWireVersion);
  }
  if (!known_type(header.type)) return fmt::format("unknown message type {}", header.type);
  if (header.length > max_length) {
    return fmt::format("oversized message: length field {} exceeds the {}-byte limit ({})",
                       header.length, max_length, limit_name);
  }
  return std::nullopt;
}

std::vector<std::byte> encode_frame(FrameType type, uint64_t sequence,
                                    std::span<const std::byte> payload) {
  FrameHeader header;
  header.type = static_cast<uint16_t>(type);
  header.sequence = sequence;
  header.length = payload.size();
  std::vector<std::byte> frame(kHeaderBytes + payload.size());
  auto encoded = encode_header(header);
  std::copy(encoded.begin(), encoded.end(), frame.begin());
  std::copy(payload.begin(), payload.end(), frame.begin() + kHeaderBytes);
  return frame;
}

std::vector<std::byte> encode_error_frame(std::string_view message) {
  message = message.substr(0, kMaxErrorBytes);
  return encode_frame(FrameType::error, 0, std::as_bytes(std::span(message)));
}

namespace {

std::vector<std::byte> rank_and_text_frame(FrameType type, int32_t rank, std::string_view message) {
  message = message.substr(0, kMaxErrorBytes);
  std::vector<std::byte> payload(4 + message.size());
  put_big_endian(payload.data(), static_cast<uint32_t>(rank));
  std::copy_n(reinterpret_cast<const std::byte*>(message.data()), message.size(),
              payload.data() + 4);
  return encode_frame(type, 0, payload);
}

}  // namespace

std::vector<std::byte> encode_gone_frame(int32_t rank, std::string_view message) {
  return rank_and_text_frame(FrameType::gone, rank, message);
}

std::vector<std::byte> encode_failed_frame(int32_t suspect, std::string_view message) {
  return rank_and_text_frame(FrameType::failed, suspect, message);
}

std::optional<Gone> decode_gone_payload(std::span<const std::byte> payload) {
  if (payload.size() < 4) return std::nullopt;
  Gone gone;
  gone.rank = static_cast<int32_t>(get_big_endian<uint32_t>(payload.data()));
  gone.message.assign(reinterpret_cast<const char*>(payload.data()) + 4, payload.size() - 4);
  return gone;
}

std::vector<std::byte> encode_hello_payload(const Hello& hello) {
  std::vector<std::byte> payload(kHelloFixedBytes + hello.token.size());
  put_big_endian(payload.data() + 0, static_cast<uint32_t>(hello.rank));
  put_big_endian(payload.data() + 4, static_cast<uint32_t>(hello.world_size));
  put_big_endian(payload.data() + 8, static_cast<uint32_t>(hello.token.size()));
  put_big_endian(payload.data() + 12, hello.tree_port);
  std::copy_n(reinterpret_cast<const std::byte*>(hello.token.data()), hello.token.size(),
              payload.data() + kHelloFixedBytes);
  return payload;
}

std::optional<Hello> decode_hello_payload(std::span<const std::byte> payload, std::string* reason) {
  if (payload.size() < kHelloFixedBytes) {
    *reason = fmt::format("malformed hello: {} bytes, fewer than the {} fixed bytes",
                          payload.size(), kHelloFixedBytes);
    return std::nullopt;
  }
  uint32_t rank = get_big_endian<uint32_t>(payload.data() + 0);
  uint32_t world_size = get_big_endian<uint32_t>(payload.data() + 4);
  uint32_t token_length = get_big_endian<uint32_t>(payload.data() + 8);
  if (token_length > kMaxTokenBytes) {
    *reason = fmt::format("malformed hello: token length {} exceeds {} bytes", token_length,
                          kMaxTokenBytes);
    return std::nullopt;
  }
  if (payload.size() != kHelloFixedBytes + token_length) {
    *reason = fmt::format("malformed hello: {} payload bytes for a {}-byte token (expected {})",
                          payload.size(), token_length, kHelloFixedBytes + token_length);
    return std::nullopt;
  }
  // Ranks and sizes travel as two's-complement u32: a rank of -1 reads back
  // as -1 and is refused as out of range.
  Hello hello;
  hello.rank = static_cast<int32_t>(rank);
  hello.world_size = static_cast<int32_t>(world_size);
  hello.tree_port = get_big_endian<uint16_t>(payload.data() + 12);
  hello.token.assign(reinterpret_cast<const char*>(payload.data() + kHelloFixedBytes),
                     token_length);
  return hello;
}

std::vector<std::byte> encode_welcome_payload(const TreeParent& parent) {
  if (parent.port == 0 && parent.host.empty()) return {};
  std::vector<std::byte> payload(2 + parent.host.size());
  put_big_endian(payload.data(), parent.port);
  std::copy_n(reinterpret_cast<const std::byte*>(parent.host.data()), parent.host.size(),
              payload.data() + 2);
  return payload;
}

std::optional<TreeParent> decode_welcome_payload(std::span<const std::byte> payload) {
  if (payload.empty()) return TreeParent{};
  if (payload.size() < 3) return std::nullopt;
  TreeParent parent;
  parent.port = get_big_endian<uint16_t>(payload.data());
  parent.host.assign(reinterpret_cast<const char*>(payload.data() + 2), payload.size() - 2);
  return parent;
}

bool tokens_equal(std::string_view expected, std::string_view presented) {
  // Walk the expected token in full whatever the presented length, and fold
  // every difference into one accumulator instead of returning early.
  // `volatile` keeps the compiler from turning the loop back into a memcmp.
  volatile unsigned char difference = expected.size() == presented.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char theirs =
        presented.empty() ? 0 : static_cast<unsigned char>(presented[i % presented.size()]);
    difference = difference | (static_cast<unsigned char>(expected[i]) ^ theirs);
  }
  return difference == 0;
}

void FrameReader::reset() {
  state_ = State::reading;
  header_filled_ = 0;
  header_ = FrameHeader{};
  payload_.clear();
  payload_filled_ = 0;
  problem_.clear();
}

FrameReader::State FrameReader::read_available(int fd) {
  while (state_ == State::reading) {
    // Read the header first, then exactly the payload it announces, so that
    // the next frame stays in the socket.
    std::span<std::byte> target;
    if (header_filled_ < kHeaderBytes) {
      target = std::span(header_bytes_).subspan(header_filled_);
    } else {
      target = std::span(payload_).subspan(payload_filled_);
    }
    size_t received = 0;
    net::IoResult result = net::receive_some(fd, target, &received);
    if (result.status == net::IoStatus::closed) {
      state_ = State::closed;
      problem_ =
          bytes_received() == 0
              ? std::string("closed the connection")
              : fmt::format("closed the connection after {} bytes of a {}", bytes_received(),
                            header_filled_ < kHeaderBytes
                                ? fmt::format("{}-byte header", kHeaderBytes)
                                : fmt::format("{}-byte message", kHeaderBytes + header_.length));
      return state_;
    }
    if (result.status == net::IoStatus::failed) {
      state_ = State::failed;
      problem_ = result.describe();
      return state_;
    }
    if (received == 0) return state_;  // nothing more for now
    if (header_filled_ < kHeaderBytes) {
      header_filled_ += received;
      if (header_filled_ < kHeaderBytes) continue;
      header_ = decode_header(header_bytes_);
      if (auto problem = check_header(header_, max_length_, limit_name_)) {
        state_ = State::malformed;
        problem_ = std::move(*problem);
        return state_;
      }
      payload_.resize(header_.length);
    } else {
      payload_filled_ += received;
    }
    if (header_filled_ == kHeaderBytes && payload_filled_ == header_.length) {
      state_ = State::complete;
    }
  }
  return state_;
}

}  // namespace courier::wire
