// The TCP bootstrap's framing, token comparison and shared error texts.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bootstrap/bootstrap_wire.hpp"
#include "core/bootstrap/collective_messages.hpp"

namespace courier {
namespace {

TEST_CASE("wire: headers round-trip in big-endian order") {
  wire::FrameHeader header;
  header.type = static_cast<uint16_t>(wire::FrameType::result);
  header.sequence = 0x0102030405060708;
  header.length = 0x1122334455667788;
  auto bytes = wire::encode_header(header);
  CHECK(bytes[0] == std::byte{'C'});
  CHECK(bytes[1] == std::byte{'R'});
  CHECK(bytes[2] == std::byte{'B'});
  CHECK(bytes[3] == std::byte{'S'});
  CHECK(bytes[8] == std::byte{0x01});
  CHECK(bytes[23] == std::byte{0x88});
  wire::FrameHeader back = wire::decode_header(bytes);
  CHECK(back.magic == wire::kMagic);
  CHECK(back.version == wire::kWireVersion);
  CHECK(back.type == header.type);
  CHECK(back.sequence == header.sequence);
  CHECK(back.length == header.length);
  CHECK_FALSE(wire::check_header(back, UINT64_MAX, "limit").has_value());
}

TEST_CASE("wire: bad headers are explained") {
  wire::FrameHeader header;
  header.type = static_cast<uint16_t>(wire::FrameType::hello);
  header.length = 100;
  CHECK(wire::check_header(header, 99, "max_message_bytes").value() ==
        "oversized message: length field 100 exceeds the 99-byte limit (max_message_bytes)");
  header.magic = 1;
  CHECK(wire::check_header(header, 1000, "x").value().find("bad magic 0x00000001") == 0);
  header.magic = wire::kMagic;
  header.version = 7;
  CHECK(wire::check_header(header, 1000, "x").value().find("version 7") != std::string::npos);
  header.version = wire::kWireVersion;
  header.type = 0;
  CHECK(wire::check_header(header, 1000, "x").value() == "unknown message type 0");
}

TEST_CASE("wire: hello payloads round-trip and bad ones are explained") {
  wire::Hello hello{3, 8, "secret", 4242};
  std::vector<std::byte> payload = wire::encode_hello_payload(hello);
  CHECK(payload.size() == wire::kHelloFixedBytes + 6);
  std::string reason;
  std::optional<wire::Hello> back = wire::decode_hello_payload(payload, &reason);
  REQUIRE(back.has_value());
  CHECK(back->rank == 3);
  CHECK(back->world_size == 8);
  CHECK(back->token == "secret");
  CHECK(back->tree_port == 4242);

  CHECK_FALSE(wire::decode_hello_payload(std::span(payload).first(13), &reason));
  CHECK(reason.find("fewer than the 14 fixed bytes") != std::string::npos);
  payload.push_back(std::byte{0});
  CHECK_FALSE(wire::decode_hello_payload(payload, &reason));
  CHECK(reason.find("for a 6-byte token") != std::string::npos);
  payload[8] = std::byte{0xff};
  CHECK_FALSE(wire::decode_hello_payload(payload, &reason));
  CHECK(reason.find("token length") != std::string::npos);
}

TEST_CASE("wire: a welcome names the result-tree parent or nothing") {
  CHECK(wire::encode_welcome_payload({}).empty());
  std::optional<wire::TreeParent> none = wire::decode_welcome_payload({});
  REQUIRE(none.has_value());
  CHECK(none->port == 0);
  CHECK(none->host.empty());

  std::vector<std::byte> payload = wire::encode_welcome_payload({40001, "fe80::1"});
  CHECK(payload.size() == 2 + 7);
  std::optional<wire::TreeParent> parent = wire::decode_welcome_payload(payload);
  REQUIRE(parent.has_value());
  CHECK(parent->port == 40001);
  CHECK(parent->host == "fe80::1");
  // A port without a host is no parent.
  CHECK_FALSE(wire::decode_welcome_payload(std::span(payload).first(2)).has_value());
}

TEST_CASE("wire: token comparison") {
  CHECK(wire::tokens_equal("abc", "abc"));
  CHECK(wire::tokens_equal("", ""));
  CHECK_FALSE(wire::tokens_equal("abc", "abd"));
  CHECK_FALSE(wire::tokens_equal("abc", "ab"));
  CHECK_FALSE(wire::tokens_equal("abc", "abcabc"));
  CHECK_FALSE(wire::tokens_equal("abc", ""));
  CHECK_FALSE(wire::tokens_equal("", "abc"));
}

TEST_CASE("collective messages: rank lists and size mismatches") {
  std::vector<int> one{4};
  std::vector<int> two{2, 5};
  CHECK(format_rank_list(one) == "rank 4");
  CHECK(format_rank_list(two) == "ranks 2, 5");

  std::vector<uint64_t> equal{8, 8, 8};
  CHECK_FALSE(describe_size_mismatch(equal, 1).has_value());
  // The majority decides who is odd, even when rank 0 is the odd one.
  std::vector<uint64_t> rank0_odd{9, 8, 8};
  CHECK(describe_size_mismatch(rank0_odd, 3)
            .value()
            .find("allgather #3: rank 0 contributed 9 bytes while the other ranks contributed 8 "
                  "bytes") != std::string::npos);
  std::vector<uint64_t> several{8, 1, 8, 2};
  CHECK(describe_size_mismatch(several, 1)
            .value()
            .find("ranks 1, 3 contributed a different size (1 bytes from rank 1, 2 bytes from rank "
                  "3)") != std::string::npos);
}

TEST_CASE("frame reader: a frame split across reads and a short stream") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) == 0);
  std::vector<std::byte> frame =
      wire::encode_frame(wire::FrameType::block, 2, std::vector<std::byte>(10, std::byte{7}));
  wire::FrameReader reader(100, "test");
  REQUIRE(::write(fds[1], frame.data(), 5) == 5);
  CHECK(reader.read_available(fds[0]) == wire::FrameReader::State::reading);
  REQUIRE(::write(fds[1], frame.data() + 5, 25) == 25);
  CHECK(reader.read_available(fds[0]) == wire::FrameReader::State::reading);
  CHECK(reader.bytes_received() == 30);
  // The rest plus the first bytes of a next frame: only this frame is taken.
  REQUIRE(::write(fds[1], frame.data() + 30, frame.size() - 30) ==
          static_cast<ssize_t>(frame.size() - 30));
  REQUIRE(::write(fds[1], frame.data(), 3) == 3);
  CHECK(reader.read_available(fds[0]) == wire::FrameReader::State::complete);
  CHECK(reader.header().sequence == 2);
  CHECK(reader.payload() == std::vector<std::byte>(10, std::byte{7}));
  reader.reset();
  ::close(fds[1]);
  CHECK(reader.read_available(fds[0]) == wire::FrameReader::State::closed);
  CHECK(reader.problem() == "closed the connection after 3 bytes of a 24-byte header");
  ::close(fds[0]);
}

}  // namespace
}  // namespace courier
