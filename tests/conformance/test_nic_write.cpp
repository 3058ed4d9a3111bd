// Conformance, two processes: connecting, writes of every size, writes with
// immediate data, ordering and back-pressure. Rank 0 (this process) writes,
// rank 1 (a forked child) is written to and checks what landed.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "nic_checks.hpp"
#include "nic_harness.hpp"
#include "nic_patterns.hpp"

namespace courier::conformance {
namespace {

bool has(const Session& s, uint32_t cap) { return (s.props.caps & cap) != 0; }

}  // namespace

TEST_CASE("connect: two processes exchange names and keys and connect") {
  run_pair(
      SessionOptions{}, [](Session& s) { CHECK(s.peer_region_bytes == s.options.region_bytes); },
      [](Session& s, Report& report) {
        report.check(s.peer_region_bytes == s.options.region_bytes, "peer region size mismatch");
        s.serve(report);
      });
}

TEST_CASE("write: 1 B to 1 MiB land byte for byte, neighbours untouched") {
  run_pair(
      SessionOptions{},
      [](Session& s) {
        const bool strict = has(s, COURIER_NIC_CAP_DELIVERY_COMPLETE);
        if (!strict) {
          MESSAGE(
              "SKIP: no CAP_DELIVERY_COMPLETE: data is checked once it arrives, not at TX "
              "completion");
        }
        const uint64_t sizes[] = {1, 7, 64, 4096, 7168, 65536, uint64_t{1} << 20};
        uint64_t seed = 1;
        for (uint64_t size : sizes) {
          if (size > s.props.max_msg_size) {
            MESSAGE("SKIP: size " << size << " exceeds max_msg_size " << s.props.max_msg_size);
            continue;
          }
          // Odd offsets on both sides: nothing may rely on alignment.
          const uint64_t local_offset = 3;
          const uint64_t remote_offset = 4096 + 5;
          fill_pattern(s.region + local_offset, remote_offset, size, seed);
          INFO("size " << size);
          REQUIRE_MESSAGE(s.post_retrying(s.make_write(local_offset, remote_offset, size, seed),
                                          deadline()) == 0,
                          backend_error());
          courier_nic_completion_v1 done{};
          REQUIRE_MESSAGE(s.take_tx(seed, &done, deadline()), "no TX completion");
          CHECK_MESSAGE(done.status == 0, backend_error());
          const std::string problem = verify_remote(s, remote_offset, size, seed, strict);
          CHECK_MESSAGE(problem.empty(), problem);
          ++seed;
        }
      },
      [](Session& s, Report& report) { s.serve(report); });
}

TEST_CASE("write with immediate data: value, length and sender reach the target") {
  constexpr uint64_t kWrites = 16;
  auto size_of = [](uint64_t i) { return 1 + i * 97; };
  auto offset_of = [](uint64_t i) { return 4096 * (i + 1) + i; };
  auto imm_of = [](uint64_t i) { return 0x8877665544332211ull + i * 0x0101010101010101ull; };

  run_pair(
      SessionOptions{},
      [&](Session& s) {
        if (!has(s, COURIER_NIC_CAP_WRITE_IMM)) {
          MESSAGE("SKIP: no CAP_WRITE_IMM");
          return;
        }
        if (!has(s, COURIER_NIC_CAP_IMM_SOURCE)) {
          MESSAGE("SKIP: no CAP_IMM_SOURCE: the sender rank is not checked");
        }
        for (uint64_t i = 0; i < kWrites; ++i) {
          fill_pattern(s.region + offset_of(i), offset_of(i), size_of(i), 100 + i);
          courier_nic_write_v1 write = s.make_write(offset_of(i), offset_of(i), size_of(i), i);
          write.flags = COURIER_NIC_WRITE_IMM;
          write.imm = imm_of(i);
          REQUIRE_MESSAGE(s.post_retrying(write, deadline()) == 0, backend_error());
        }
        expect_completions(s, 0, kWrites);
      },
      [&](Session& s, Report& report) {
        if (!has(s, COURIER_NIC_CAP_WRITE_IMM)) {
          s.serve(report);
          return;
        }
        const uint64_t mask = imm_mask(s.props.imm_bytes);
        std::map<uint64_t, uint64_t> expected;  // imm (masked) -> write index
        for (uint64_t i = 0; i < kWrites; ++i) expected[imm_of(i) & mask] = i;
        for (uint64_t received = 0; received < kWrites; ++received) {
          courier_nic_completion_v1 c{};
          if (!s.take_rx_imm(&c, deadline())) {
            report.fail("only %llu of %llu immediate-data completions arrived",
                        static_cast<unsigned long long>(received),
                        static_cast<unsigned long long>(kWrites));
            break;
          }
          report.check(c.status == 0, "RX_IMM completion with status %d", c.status);
          const auto found = expected.find(c.imm & mask);
          if (found == expected.end()) {
            report.fail("unexpected immediate value 0x%llx",
                        static_cast<unsigned long long>(c.imm));
            continue;
          }
          const uint64_t i = found->second;
          expected.erase(found);
          report.check(c.length == size_of(i), "write %llu: length %llu instead of %llu",
                       static_cast<unsigned long long>(i),
                       static_cast<unsigned long long>(c.length),
                       static_cast<unsigned long long>(size_of(i)));
          if (has(s, COURIER_NIC_CAP_IMM_SOURCE)) {
            report.check(c.peer == 0, "write %llu: sender %u instead of rank 0",
                         static_cast<unsigned long long>(i), c.peer);
          }
          // The immediate data announces the write: its bytes must be there.
          const std::string problem = check_pattern(s.region, offset_of(i), size_of(i), 100 + i);
          report.check(problem.empty(), "write %llu at its RX_IMM: %s",
                       static_cast<unsigned long long>(i), problem.c_str());
        }
        s.serve(report);
      });
}

TEST_CASE("ordering: writes to one peer land in post order") {
  constexpr uint64_t kSameAddressWrites = 128;
  constexpr uint64_t kSlots = 64;
  constexpr uint64_t kSignalA = 0xA1, kSignalB = 0xB2;
  constexpr uint64_t kCounterOffset = 0;  // 8-byte counter overwritten again and again
  constexpr uint64_t kFlagOffset = 512;   // target of the signalling writes
  auto slot_offset = [](uint64_t k) { return 4096 * (k + 1); };

  run_pair(
      SessionOptions{},
      [&](Session& s) {
        if (!has(s, COURIER_NIC_CAP_ORDERED_WRITES)) {
          MESSAGE("SKIP: no CAP_ORDERED_WRITES");
          return;
        }
        if (!has(s, COURIER_NIC_CAP_WRITE_IMM)) {
          MESSAGE("SKIP: no CAP_WRITE_IMM: ordering is observed through immediate data");
          return;
        }
        // A: the same 8 bytes written 128 times (each source slot distinct,
        // so no buffer is reused while in flight), then a signal.
        const uint64_t source_base = slot_offset(kSlots + 1);
        for (uint64_t i = 0; i < kSameAddressWrites; ++i) {
          const uint64_t value = i + 1;
          std::memcpy(s.region + source_base + 8 * i, &value, 8);
          REQUIRE(s.post_retrying(s.make_write(source_base + 8 * i, kCounterOffset, 8, i),
                                  deadline()) == 0);
        }
        courier_nic_write_v1 signal = s.make_write(source_base, kFlagOffset, 1, 1000);
        signal.flags = COURIER_NIC_WRITE_IMM;
        signal.imm = kSignalA;
        REQUIRE(s.post_retrying(signal, deadline()) == 0);

        // B: 64 slots of 4 KiB, then a signal; nothing waits in between.
        for (uint64_t k = 0; k < kSlots; ++k) {
          fill_pattern(s.region + slot_offset(k), slot_offset(k), 4096, 500 + k);
          REQUIRE(s.post_retrying(s.make_write(slot_offset(k), slot_offset(k), 4096, 2000 + k),
                                  deadline()) == 0);
        }
        signal.cookie = 3000;
        signal.imm = kSignalB;
        REQUIRE(s.post_retrying(signal, deadline()) == 0);

        expect_completions(s, 0, kSameAddressWrites);
        expect_completions(s, 1000, 1);
        expect_completions(s, 2000, kSlots);
        expect_completions(s, 3000, 1);
      },
      [&](Session& s, Report& report) {
        if (!has(s, COURIER_NIC_CAP_ORDERED_WRITES) || !has(s, COURIER_NIC_CAP_WRITE_IMM)) {
          s.serve(report);
          return;
        }
        const uint64_t mask = imm_mask(s.props.imm_bytes);
        courier_nic_completion_v1 c{};
        if (!s.take_rx_imm(&c, deadline())) {
          report.fail("signal A never arrived");
        } else {
          report.check((c.imm & mask) == (kSignalA & mask), "first signal 0x%llx is not A",
                       static_cast<unsigned long long>(c.imm));
          uint64_t counter = 0;
          std::memcpy(&counter, s.region + kCounterOffset, 8);
          report.check(counter == kSameAddressWrites,
                       "at signal A the counter holds %llu, not the last value %llu",
                       static_cast<unsigned long long>(counter),
                       static_cast<unsigned long long>(kSameAddressWrites));
        }
        if (!s.take_rx_imm(&c, deadline())) {
          report.fail("signal B never arrived");
        } else {
          report.check((c.imm & mask) == (kSignalB & mask), "second signal 0x%llx is not B",
                       static_cast<unsigned long long>(c.imm));
          for (uint64_t k = 0; k < kSlots; ++k) {
            const std::string problem = check_pattern(s.region, slot_offset(k), 4096, 500 + k);
            report.check(problem.empty(), "slot %llu at signal B: %s",
                         static_cast<unsigned long long>(k), problem.c_str());
          }
        }
        s.serve(report);
      });
}

TEST_CASE("back-pressure: -EAGAIN when full, then every write completes exactly once") {
  SessionOptions options;
  options.tx_depth = 8;
  run_pair(
      options,
      [&](Session& s) {
        const uint32_t depth = s.options.tx_depth;
        // Phase 0: one write, so that whatever the provider sets up on the
        // first write to a peer (shm maps the peer, tcp connects; both answer
        // -EAGAIN meanwhile) is done.
        fill_pattern(s.region, 0, 64, 75);
        REQUIRE(s.post_retrying(s.make_write(0, 0, 64, 99999), deadline()) == 0);
        expect_completions(s, 99999, 1);

        // Phase 1: post without polling until the endpoint pushes back.
        // libfabric providers may push back before tx_depth (shm allows one
        // delivery-complete transfer per peer at a time without CMA), so
        // only the push-back itself is required.
        const uint64_t limit = std::min<uint64_t>(s.options.region_bytes / 4096, depth * 64);
        uint64_t accepted = 0;
        int rc = 0;
        for (; accepted < limit; ++accepted) {
          const uint64_t offset = 4096 * accepted;
          fill_pattern(s.region + offset, offset, 4096, 76);
          const courier_nic_write_v1 write = s.make_write(offset, offset, 4096, accepted);
          rc = s.api.post_write(s.ep, &write);
          if (rc != 0) break;
        }
        CHECK_MESSAGE(rc == -EAGAIN, "no -EAGAIN after " << accepted << " posts with tx_depth "
                                                         << depth << " (last status " << rc << ")");
        MESSAGE(accepted << " writes accepted before -EAGAIN (tx_depth " << depth << ")");
        REQUIRE_MESSAGE(accepted >= 1, "the endpoint accepted nothing: " << backend_error());
        expect_completions(s, 0, accepted);
        std::string problem =
            verify_remote(s, 0, 4096 * accepted, 76, has(s, COURIER_NIC_CAP_DELIVERY_COMPLETE));
        CHECK_MESSAGE(problem.empty(), problem);

        // Phase 2: many more writes than the depth, retrying on -EAGAIN.
        constexpr uint64_t kWrites = 512;
        constexpr uint64_t kSize = 1024;
        for (uint64_t i = 0; i < kWrites; ++i) {
          const uint64_t offset = kSize * i;
          fill_pattern(s.region + offset, offset, kSize, 77);
          const courier_nic_write_v1 write = s.make_write(offset, offset, kSize, 10000 + i);
          while ((rc = s.api.post_write(s.ep, &write)) == -EAGAIN) {
            s.pump();
          }
          REQUIRE_MESSAGE(rc == 0, backend_error());
        }
        expect_completions(s, 10000, kWrites);
        problem =
            verify_remote(s, 0, kSize * kWrites, 77, has(s, COURIER_NIC_CAP_DELIVERY_COMPLETE));
        CHECK_MESSAGE(problem.empty(), problem);
      },
      [](Session& s, Report& report) { s.serve(report); });
}

}  // namespace courier::conformance

namespace courier::conformance {

// With two processes every incoming write comes from rank 0, so a backend
// that reports the same sender for every write passes the pair case. Here
// ranks 1 and 2 both write to rank 0, interleaved, and each RX_IMM must name
// the rank that actually wrote.
TEST_CASE("sender identity: ranks 1 and 2 write with immediate data to rank 0") {
  constexpr int kRanks = 3;
  constexpr uint64_t kWrites = 16;  // per sender
  // The immediate value names sender and write in its low byte, so that a
  // backend carrying a single immediate byte can run the case too.
  auto imm_of = [](int sender, uint64_t i) { return (uint64_t(sender) << 4) | i; };
  auto size_of = [](uint64_t i) { return 1 + 61 * i; };
  auto offset_of = [](int sender, uint64_t i) { return 4096 * ((sender - 1) * kWrites + i + 1); };
  auto seed_of = [](int sender, uint64_t i) { return 1000 * uint64_t(sender) + i; };

  run_group(
      kRanks, SessionOptions{},
      [&](Session& s) {
        if (!has(s, COURIER_NIC_CAP_WRITE_IMM)) {
          MESSAGE("SKIP: no CAP_WRITE_IMM");
          return;
        }
        const bool check_sender = has(s, COURIER_NIC_CAP_IMM_SOURCE);
        if (!check_sender) MESSAGE("SKIP: no CAP_IMM_SOURCE: the sender rank is not checked");
        const uint64_t mask = imm_mask(s.props.imm_bytes);
        std::map<uint64_t, int> seen;  // imm -> times received
        for (uint64_t received = 0; received < 2 * kWrites; ++received) {
          courier_nic_completion_v1 c{};
          REQUIRE_MESSAGE(s.take_rx_imm(&c, deadline()),
                          "only " << received << " of " << 2 * kWrites
                                  << " immediate-data completions arrived");
          CHECK_MESSAGE(c.status == 0, "RX_IMM completion with status " << c.status);
          const uint64_t imm = c.imm & mask;
          const int sender = static_cast<int>(imm >> 4);
          const uint64_t i = imm & 15;
          if (sender < 1 || sender >= kRanks || imm != imm_of(sender, i)) {
            FAIL_CHECK("unexpected immediate value 0x" << std::hex << c.imm);
            continue;
          }
          INFO("write " << i << " of rank " << sender);
          CHECK_MESSAGE(++seen[imm] == 1, "its RX_IMM arrived twice");
          if (check_sender) {
            CHECK_MESSAGE(c.peer == static_cast<uint32_t>(sender),
                          "RX_IMM names sender " << c.peer << " instead of rank " << sender);
          }
          CHECK(c.length == size_of(i));
          // The immediate data announces the write: its bytes must be there.
          const std::string problem =
              check_pattern(s.region, offset_of(sender, i), size_of(i), seed_of(sender, i));
          CHECK_MESSAGE(problem.empty(), "at its RX_IMM: " << problem);
        }
      },
      [&](Session& s, Report& report) {
        if (has(s, COURIER_NIC_CAP_WRITE_IMM)) {
          // Both senders post everything before waiting, so their writes
          // interleave at rank 0.
          for (uint64_t i = 0; i < kWrites; ++i) {
            const uint64_t offset = offset_of(s.rank, i);
            fill_pattern(s.region + offset, offset, size_of(i), seed_of(s.rank, i));
            courier_nic_write_v1 write = s.make_write(offset, offset, size_of(i), i);
            write.flags = COURIER_NIC_WRITE_IMM;
            write.imm = imm_of(s.rank, i);
            const int rc = s.post_retrying(write, deadline());
            report.check(rc == 0, "rank %d write %llu: post_write %d: %s", s.rank,
                         static_cast<unsigned long long>(i), rc, backend_error().c_str());
            if (rc != 0) break;
          }
          for (uint64_t i = 0; i < kWrites; ++i) {
            courier_nic_completion_v1 c{};
            if (!s.take_tx(i, &c, deadline())) {
              report.fail("rank %d write %llu: no TX completion", s.rank,
                          static_cast<unsigned long long>(i));
              break;
            }
            report.check(c.status == 0, "rank %d write %llu: TX status %d: %s", s.rank,
                         static_cast<unsigned long long>(i), c.status, backend_error().c_str());
          }
        }
        s.serve(report);
      });
}

}  // namespace courier::conformance
