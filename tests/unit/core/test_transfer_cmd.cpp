// TransferCmd encoding: every field round-trips at its limits, and every
// value that does not fit is refused with a status naming the field.
#include <doctest/doctest.h>

#include <string>

#include "courier/transfer_cmd.hpp"

using namespace courier;

namespace {
WriteCmdArgs max_write() {
  WriteCmdArgs a;
  a.dst_rank = TransferCmd::kMaxRank;
  a.window = TransferCmd::kMaxWindow;
  a.src_offset = TransferCmd::kMaxOffset;
  a.dst_offset = TransferCmd::kMaxOffset;
  a.length = TransferCmd::kMaxLength;
  a.flags = kCmdFlagImm;
  return a;
}
}  // namespace

TEST_CASE("TransferCmd is exactly 16 bytes with a documented geometry") {
  CHECK(sizeof(TransferCmd) == 16);
  CHECK(alignof(TransferCmd) == 16);
  CHECK(TransferCmd::kMaxRank == 65535);
  CHECK(TransferCmd::kMaxWindow == 15);
  CHECK(TransferCmd::kMaxLength == 16777215);
  CHECK(TransferCmd::kSeqMask == 16383);
}

TEST_CASE("WRITE round-trips at the upper limit of every field") {
  TransferCmd cmd;
  REQUIRE(encode_write(max_write(), &cmd) == CmdStatus::ok);
  cmd.set_seq(TransferCmd::kSeqMask);
  CHECK(cmd.op() == CmdOp::write);
  CHECK(cmd.flags() == kCmdFlagImm);
  CHECK(cmd.dst_rank() == 65535);
  CHECK(cmd.window() == 15);
  CHECK(cmd.length() == 16777215);
  CHECK(cmd.src_offset() == 0xffffffffu);
  CHECK(cmd.dst_offset() == 0xffffffffu);
  CHECK(cmd.seq() == 16383);
}

TEST_CASE("WRITE round-trips at the lower limit of every field") {
  WriteCmdArgs a;
  a.length = 1;
  TransferCmd cmd;
  REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
  CHECK(cmd.op() == CmdOp::write);
  CHECK(cmd.flags() == 0);
  CHECK(cmd.dst_rank() == 0);
  CHECK(cmd.window() == 0);
  CHECK(cmd.length() == 1);
  CHECK(cmd.src_offset() == 0);
  CHECK(cmd.dst_offset() == 0);
  CHECK(cmd.seq() == 0);
  CHECK(cmd.word0 != 0);  // a published slot is never all-zero
}

TEST_CASE("fields do not bleed into each other") {
  // One field at a time at its maximum, all others zero.
  WriteCmdArgs base;
  base.length = 1;
  TransferCmd cmd;
  WriteCmdArgs a = base;
  a.dst_rank = TransferCmd::kMaxRank;
  REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
  CHECK(cmd.window() == 0);
  CHECK(cmd.seq() == 0);
  CHECK(cmd.flags() == 0);
  a = base;
  a.window = TransferCmd::kMaxWindow;
  REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
  CHECK(cmd.dst_rank() == 0);
  CHECK(cmd.flags() == 0);
  cmd.set_seq(TransferCmd::kSeqMask);
  CHECK(cmd.dst_rank() == 0);
  CHECK(cmd.length() == 1);
  CHECK(cmd.window() == TransferCmd::kMaxWindow);
  a = base;
  a.src_offset = TransferCmd::kMaxOffset;
  REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
  CHECK(cmd.dst_offset() == 0);
}

TEST_CASE("values one past each limit are refused, never truncated") {
  TransferCmd cmd;
  cmd.word0 = 0x1234;  // untouched on failure
  WriteCmdArgs a = max_write();
  a.dst_rank += 1;
  CHECK(encode_write(a, &cmd) == CmdStatus::rank_too_large);
  a = max_write();
  a.window += 1;
  CHECK(encode_write(a, &cmd) == CmdStatus::window_too_large);
  a = max_write();
  a.length += 1;
  CHECK(encode_write(a, &cmd) == CmdStatus::length_too_large);
  a = max_write();
  a.length = 0;
  CHECK(encode_write(a, &cmd) == CmdStatus::length_zero);
  a = max_write();
  a.src_offset += 1;
  CHECK(encode_write(a, &cmd) == CmdStatus::src_offset_too_large);
  a = max_write();
  a.dst_offset += 1;
  CHECK(encode_write(a, &cmd) == CmdStatus::dst_offset_too_large);
  a = max_write();
  a.flags = 0x4;
  CHECK(encode_write(a, &cmd) == CmdStatus::flags_invalid);
  CHECK(cmd.word0 == 0x1234);
  CHECK(std::string(to_string(CmdStatus::rank_too_large)).find("rank") != std::string::npos);
}

TEST_CASE("a WRITE's source rides in flag bits 2:1 beside the immediate-data flag") {
  WriteCmdArgs a;
  a.dst_rank = 2;
  a.window = 5;
  a.length = 64;
  a.flags = kCmdFlagImm;
  TransferCmd cmd;
  for (uint8_t source = 0; source <= kCmdSources; ++source) {
    a.source = source;
    REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
    CHECK(cmd.source() == source);
    CHECK((cmd.flags() & kCmdFlagImm) != 0);
    CHECK(cmd.window() == 5);
    CHECK(cmd.length() == 64);
  }
  a.source = kCmdSources + 1;
  CHECK(encode_write(a, &cmd) == CmdStatus::source_too_large);
  CHECK(std::string(to_string(CmdStatus::source_too_large)).find("source") != std::string::npos);
  a.source = 0;
  a.flags = 0;
  REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
  CHECK(cmd.source() == 0);
}

TEST_CASE("sequence numbers wrap modulo 2^14 and leave other fields alone") {
  WriteCmdArgs a;
  a.length = 77;
  a.dst_rank = 3;
  TransferCmd cmd;
  REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
  cmd.set_seq(16384 + 5);
  CHECK(cmd.seq() == 5);
  cmd.set_seq(16383);
  CHECK(cmd.seq() == 16383);
  CHECK(cmd.length() == 77);
  CHECK(cmd.dst_rank() == 3);
}

TEST_CASE("ATOMIC, DRAIN and BARRIER encodings") {
  TransferCmd cmd;
  REQUIRE(encode_atomic(65535, 15, 0xffffffffu, AtomicOp::add_u32, 0xffffffffu, &cmd) ==
          CmdStatus::ok);
  CHECK(cmd.op() == CmdOp::atomic);
  CHECK(cmd.flags() == static_cast<uint8_t>(AtomicOp::add_u32));
  CHECK(cmd.dst_rank() == 65535);
  CHECK(cmd.window() == 15);
  CHECK(cmd.dst_offset() == 0xffffffffu);
  CHECK(cmd.operand() == 0xffffffffu);
  CHECK(encode_atomic(65536, 0, 0, AtomicOp::add_u64, 1, &cmd) == CmdStatus::rank_too_large);
  CHECK(encode_atomic(0, 0, 0x100000000ull, AtomicOp::add_u64, 1, &cmd) ==
        CmdStatus::dst_offset_too_large);
  CHECK(encode_atomic(0, 0, 0, AtomicOp::add_u64, 0x100000000ull, &cmd) ==
        CmdStatus::operand_too_large);
  CHECK(encode_atomic(0, 0, 0, static_cast<AtomicOp>(7), 1, &cmd) == CmdStatus::flags_invalid);
  REQUIRE(encode_drain(&cmd) == CmdStatus::ok);
  CHECK(cmd.op() == CmdOp::drain);
  REQUIRE(encode_barrier(~uint64_t{0}, &cmd) == CmdStatus::ok);
  CHECK(cmd.op() == CmdOp::barrier);
  CHECK(cmd.epoch() == ~uint64_t{0});
}
