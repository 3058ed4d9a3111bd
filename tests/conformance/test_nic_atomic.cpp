// Conformance: transport atomics (NIC ABI 1.1). Rank 0 (this process) posts
// atomics into rank 1's region; rank 1 (a forked child) sets start values and
// reads results on request (remote_store / remote_load) and checks ordering.
// Every op the backend does not list in atomic_ops is a reported skip.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nic_checks.hpp"
#include "nic_harness.hpp"
#include "nic_patterns.hpp"

namespace courier::conformance {
namespace {

struct Op {
  uint32_t bit;
  const char* name;
  uint32_t width;  // bytes
  bool fetching;
  bool cas;
};

constexpr Op kAdd64{COURIER_NIC_ATOMIC_ADD_U64, "ADD_U64", 8, false, false};
constexpr Op kFetchAdd64{COURIER_NIC_ATOMIC_FETCH_ADD_U64, "FETCH_ADD_U64", 8, true, false};
constexpr Op kCas64{COURIER_NIC_ATOMIC_CAS_U64, "CAS_U64", 8, true, true};
constexpr Op kAdd32{COURIER_NIC_ATOMIC_ADD_U32, "ADD_U32", 4, false, false};
constexpr Op kFetchAdd32{COURIER_NIC_ATOMIC_FETCH_ADD_U32, "FETCH_ADD_U32", 4, true, false};
constexpr Op kCas32{COURIER_NIC_ATOMIC_CAS_U32, "CAS_U32", 4, true, true};
constexpr Op kAllOps[] = {kAdd64, kFetchAdd64, kCas64, kAdd32, kFetchAdd32, kCas32};
constexpr uint32_t kKnownOps = COURIER_NIC_ATOMIC_ADD_U64 | COURIER_NIC_ATOMIC_FETCH_ADD_U64 |
                               COURIER_NIC_ATOMIC_CAS_U64 | COURIER_NIC_ATOMIC_ADD_U32 |
                               COURIER_NIC_ATOMIC_FETCH_ADD_U32 | COURIER_NIC_ATOMIC_CAS_U32;

// Where results land in the initiator's region (far from anything written).
constexpr uint64_t kResultBase = uint64_t{1} << 20;
// Bytes around results and in the other half of 32-bit words.
constexpr uint64_t kFill = 0xEEEEEEEEEEEEEEEEull;

SessionOptions atomic_options() {
  SessionOptions options;
  options.ep_flags = COURIER_NIC_EP_ATOMICS;
  return options;
}

uint64_t width_mask(uint32_t width) {
  return width >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1;
}

// doctest's message streams do not take std::hex.
std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string backend_name(const Session& s) {
  return std::string(s.api.header.name) + " (" + s.props.device + ")";
}

// True when `op` can be tested; otherwise reports the skip.
bool offered(const Session& s, const Op& op) {
  if (!s.atomics) {
    MESSAGE("SKIP: " << std::string(op.name) << " not offered by " << backend_name(s)
                     << ": the backend offers no atomics");
    return false;
  }
  if ((s.props.atomic_ops & op.bit) == 0) {
    MESSAGE("SKIP: " << std::string(op.name) << " not offered by " << backend_name(s));
    return false;
  }
  return true;
}

courier_nic_atomic_v1 make_atomic(const Session& s, const Op& op, uint64_t remote_offset,
                                  uint64_t operand, uint64_t compare, uint64_t result_offset,
                                  uint64_t cookie) {
  courier_nic_atomic_v1 a{};
  a.peer = static_cast<uint32_t>(s.peer);
  a.op = op.bit;
  a.remote = s.peer_key;
  a.remote_offset = remote_offset;
  a.operand = operand;
  a.compare = compare;
  a.result_mr = op.fetching ? s.mr : nullptr;
  a.result_offset = op.fetching ? result_offset : 0;
  a.cookie = cookie;
  return a;
}

// Posts one atomic and waits for its TX completion. For fetching ops returns
// the old value from the result slot (whose other bytes must stay kFill).
uint64_t run_atomic(Session& s, const courier_nic_atomic_v1& a, const Op& op) {
  std::memcpy(s.region + a.result_offset, &kFill, 8);
  REQUIRE_MESSAGE(s.post_atomic_retrying(a, deadline()) == 0,
                  std::string(op.name)
                      << " at offset " << a.remote_offset << ": " << backend_error());
  courier_nic_completion_v1 done{};
  REQUIRE_MESSAGE(s.take_tx(a.cookie, &done, deadline()),
                  std::string(op.name) << ": no TX completion for cookie " << a.cookie);
  CHECK_MESSAGE(done.status == 0, std::string(op.name) << " completed with " << done.status << ": "
                                                       << backend_error());
  if (!op.fetching) return 0;
  uint64_t slot = 0;
  std::memcpy(&slot, s.region + a.result_offset, 8);
  if (op.width < 8) {
    CHECK_MESSAGE((slot & ~width_mask(op.width)) == (kFill & ~width_mask(op.width)),
                  std::string(op.name)
                      << " wrote beyond its 4-byte result: slot holds " << hex(slot));
  }
  return slot & width_mask(op.width);
}

uint64_t load(Session& s, uint64_t offset) {
  uint64_t value = 0;
  const std::string problem = remote_load(s, offset, &value);
  REQUIRE_MESSAGE(problem.empty(), problem);
  return value;
}

void store(Session& s, uint64_t offset, uint64_t value) {
  const std::string problem = remote_store(s, offset, value, 8);
  REQUIRE_MESSAGE(problem.empty(), problem);
}

// The 8-byte word at `word` with `value` in the op's lane (`lane` 0 or 4 for
// 32-bit ops) and the neighbour bytes from `rest`.
uint64_t compose(const Op& op, uint32_t lane, uint64_t value, uint64_t rest) {
  if (op.width == 8) return value;
  const uint64_t mask = width_mask(4) << (8 * lane);
  return (rest & ~mask) | ((value & width_mask(4)) << (8 * lane));
}

void serve_only(Session& s, Report& report) { s.serve(report); }

}  // namespace

TEST_CASE("atomics: properties and ep_open with COURIER_NIC_EP_ATOMICS") {
  TestHost host;
  const courier_nic_plugin_v1& api = plugin();
  void* backend = nullptr;
  REQUIRE_MESSAGE(api.init(host.services(), &backend) == 0, backend_error());
  courier_nic_props_v1 props{};
  props.struct_size = sizeof props;
  REQUIRE(api.query(backend, &props) == 0);

  const bool has_entry =
      api.header.abi_minor >= 1 &&
      api.header.struct_size >= offsetof(courier_nic_plugin_v1, post_atomic) + sizeof(void*) &&
      api.post_atomic != nullptr;
  std::string ops, native;
  for (const Op& op : kAllOps) {
    if (props.atomic_ops & op.bit)
      ops += std::string(ops.empty() ? "" : " ") + std::string(op.name);
    if (props.atomic_native & op.bit)
      native += std::string(native.empty() ? "" : " ") + std::string(op.name);
  }
  MESSAGE("backend " << std::string(api.header.name) << " on '" << props.device << "': atomic_ops ["
                     << ops << "], native [" << native << "], caps_with_atomics "
                     << hex(props.caps_with_atomics) << " (caps " << hex(props.caps) << ")");
  CHECK((props.atomic_ops & ~kKnownOps) == 0);
  CHECK((props.atomic_native & ~props.atomic_ops) == 0);
  CHECK_MESSAGE((props.atomic_ops == 0 || has_entry),
                "atomic_ops is non-zero but post_atomic is missing");

  courier_nic_ep_attr_v1 attr{};
  attr.struct_size = sizeof attr;
  attr.tx_depth = 16;
  attr.rx_depth = 16;
  attr.flags = COURIER_NIC_EP_ATOMICS;
  void* ep = nullptr;
  const int rc = api.ep_open(backend, &attr, &ep);
  if (props.atomic_ops != 0) {
    CHECK_MESSAGE(rc == 0, "ep_open with COURIER_NIC_EP_ATOMICS: " << backend_error(backend));
    CHECK((props.caps_with_atomics & COURIER_NIC_CAP_RMA_WRITE) != 0);
  } else {
    MESSAGE("SKIP: " << std::string(api.header.name) << " offers no atomics");
    CHECK_MESSAGE(rc < 0, "ep_open with COURIER_NIC_EP_ATOMICS succeeded without atomics");
  }
  if (rc == 0 && ep) CHECK(api.ep_close(ep) == 0);
  api.fini(backend);
}

TEST_CASE("atomics: ADD and FETCH_ADD from known values, wrapping at the width") {
  run_pair(
      atomic_options(),
      [](Session& s) {
        struct Case {
          uint64_t start, operand;
        };
        const Case cases64[] = {{0x0123456789ABCDEFull, 0x1111},
                                {UINT64_MAX - 1, 5},  // wraps to 3
                                {0x8000000000000000ull, 0x8000000000000000ull}};
        const Case cases32[] = {{0x01234567, 0x1111},
                                {0xFFFFFFFE, 5},  // wraps to 3, no carry into the neighbour
                                {0x80000000, 0x80000000}};
        uint64_t cookie = 1;
        for (const Op& op : {kAdd64, kFetchAdd64, kAdd32, kFetchAdd32}) {
          if (!offered(s, op)) continue;
          const uint32_t lanes = op.width == 8 ? 1 : 2;  // 32-bit: both halves of a word
          for (uint32_t l = 0; l < lanes; ++l) {
            const uint32_t lane = 4 * l;
            const Case* begin = op.width == 8 ? std::begin(cases64) : std::begin(cases32);
            const Case* end = op.width == 8 ? std::end(cases64) : std::end(cases32);
            for (const Case* c = begin; c != end; ++c) {
              const uint64_t word = 4096 + 64 * cookie;
              const uint64_t before = compose(op, lane, c->start, kFill);
              store(s, word, before);
              const uint64_t expected_value = (c->start + c->operand) & width_mask(op.width);
              const courier_nic_atomic_v1 a =
                  make_atomic(s, op, word + lane, c->operand, 0, kResultBase + 8 * cookie, cookie);
              INFO(std::string(op.name) << " start " << hex(c->start) << " + " << hex(c->operand)
                                        << " at offset " << a.remote_offset);
              const uint64_t old = run_atomic(s, a, op);
              if (op.fetching) CHECK(old == c->start);
              const uint64_t after = load(s, word);
              CHECK_MESSAGE(after == compose(op, lane, expected_value, kFill),
                            "target word " << hex(after) << ", expected "
                                           << hex(compose(op, lane, expected_value, kFill)));
              ++cookie;
            }
          }
        }
      },
      serve_only);
}

TEST_CASE("atomics: CAS succeeds and fails, returning the old value both times") {
  run_pair(
      atomic_options(),
      [](Session& s) {
        uint64_t cookie = 1;
        for (const Op& op : {kCas64, kCas32}) {
          if (!offered(s, op)) continue;
          const uint64_t mask = width_mask(op.width);
          const uint64_t a_value = 0x1122334455667788ull & mask;
          const uint64_t b_value = 0x99AABBCCDDEEFF00ull & mask;
          const uint64_t c_value = 0x0F0F0F0F0F0F0F0Full & mask;
          for (uint32_t lane = 0; lane < 8; lane += op.width) {
            INFO(std::string(op.name) << " lane " << lane);
            const uint64_t word = 8192 + 64 * cookie;
            store(s, word, compose(op, lane, a_value, kFill));
            // Success: compare matches, the new value is stored.
            uint64_t old = run_atomic(
                s,
                make_atomic(s, op, word + lane, b_value, a_value, kResultBase + 8 * cookie, cookie),
                op);
            ++cookie;
            CHECK_MESSAGE(old == a_value, "successful CAS returned " << hex(old));
            CHECK(load(s, word) == compose(op, lane, b_value, kFill));
            // Failure: compare (still A) differs from B; nothing changes.
            old = run_atomic(
                s,
                make_atomic(s, op, word + lane, c_value, a_value, kResultBase + 8 * cookie, cookie),
                op);
            ++cookie;
            CHECK_MESSAGE(old == b_value, "failed CAS returned " << hex(old));
            CHECK_MESSAGE(load(s, word) == compose(op, lane, b_value, kFill),
                          "a failed CAS changed the target");
          }
        }
      },
      serve_only);
}

TEST_CASE("atomics: many concurrent ADDs from one peer sum exactly") {
  run_pair(
      atomic_options(),
      [](Session& s) {
        uint64_t cookie = 1;
        // Non-fetching: 2000 ADDs of different operands in flight together.
        for (const Op& op : {kAdd64, kAdd32}) {
          if (!offered(s, op)) continue;
          constexpr uint64_t kAdds = 2000;
          const uint64_t word = 16384 + 64 * cookie;
          const uint64_t start = 0xFFFFFFFFFFFF0000ull & width_mask(op.width);
          store(s, word, compose(op, 0, start, kFill));
          uint64_t sum = start;
          const uint64_t first = cookie;
          for (uint64_t i = 0; i < kAdds; ++i) {
            const uint64_t operand = (i * 0x10001 + 1) & width_mask(op.width);
            sum += operand;
            REQUIRE_MESSAGE(s.post_atomic_retrying(
                                make_atomic(s, op, word, operand, 0, 0, cookie++), deadline()) == 0,
                            std::string(op.name) << " #" << i << ": " << backend_error());
          }
          expect_completions(s, first, kAdds);
          const uint64_t expected = compose(op, 0, sum & width_mask(op.width), kFill);
          const uint64_t after = load(s, word);
          CHECK_MESSAGE(after == expected, std::string(op.name)
                                               << ": " << kAdds << " ADDs left " << hex(after)
                                               << ", expected " << hex(expected));
        }
        // Fetching: every ADD of 1 must see a distinct old value, and the
        // old values must be exactly start, start+1, ... (wrapping).
        for (const Op& op : {kFetchAdd64, kFetchAdd32}) {
          if (!offered(s, op)) continue;
          constexpr uint64_t kAdds = 512;
          const uint64_t mask = width_mask(op.width);
          const uint64_t word = 16384 + 64 * cookie;
          const uint64_t start = (mask - 100) & mask;  // wraps half-way
          store(s, word, compose(op, 0, start, kFill));
          const uint64_t first = cookie;
          for (uint64_t i = 0; i < kAdds; ++i) {
            std::memcpy(s.region + kResultBase + 8 * i, &kFill, 8);
            REQUIRE_MESSAGE(
                s.post_atomic_retrying(
                    make_atomic(s, op, word, 1, 0, kResultBase + 8 * i, cookie++), deadline()) == 0,
                std::string(op.name) << " #" << i << ": " << backend_error());
          }
          expect_completions(s, first, kAdds);
          std::vector<uint64_t> seen;
          for (uint64_t i = 0; i < kAdds; ++i) {
            uint64_t slot = 0;
            std::memcpy(&slot, s.region + kResultBase + 8 * i, 8);
            seen.push_back(((slot & mask) - start) & mask);
          }
          std::sort(seen.begin(), seen.end());
          bool exact = true;
          for (uint64_t i = 0; i < kAdds; ++i) exact = exact && seen[i] == i;
          CHECK_MESSAGE(exact, std::string(op.name)
                                   << ": the fetched old values are not start + 0.." << kAdds - 1
                                   << " (each exactly once)");
          CHECK(load(s, word) == compose(op, 0, (start + kAdds) & mask, kFill));
        }
      },
      serve_only);
}

TEST_CASE("atomics: invalid atomics are refused with a reason; the endpoint keeps working") {
  run_pair(
      atomic_options(),
      [](Session& s) {
        if (!s.atomics) {
          MESSAGE("SKIP: atomics not offered by " << backend_name(s));
          return;
        }
        const courier_nic_plugin_v1& api = s.api;
        auto refused = [&](const courier_nic_atomic_v1& a, int expected, const char* what) {
          INFO(std::string(what));
          const int rc = api.post_atomic(s.ep, &a);
          if (expected != 0) {
            CHECK_MESSAGE(rc == expected, "status " << rc << " instead of " << expected);
          } else {
            CHECK_MESSAGE(rc < 0, "accepted with status " << rc);
          }
          if (rc < 0) CHECK_MESSAGE(!backend_error().empty(), "no last_error text");
          if (rc < 0) MESSAGE(std::string(what) << ": " << backend_error());
        };

        const Op* any = nullptr;
        const Op* fetching = nullptr;
        for (const Op& op : kAllOps) {
          if (!(s.props.atomic_ops & op.bit)) continue;
          if (!any) any = &op;
          if (op.fetching && !fetching) fetching = &op;
        }
        REQUIRE(any);
        const uint64_t word = 24576;
        const courier_nic_atomic_v1 good = make_atomic(s, *any, word, 1, 0, kResultBase, 1);

        courier_nic_atomic_v1 a = good;
        a.remote_offset = word + (any->width == 8 ? 4 : 2);
        refused(a, -EINVAL, "misaligned remote offset");
        a = good;
        a.peer = 2;
        refused(a, -EINVAL, "unknown peer 2");
        a = good;
        a.op = 0;
        refused(a, -EINVAL, "op 0");
        a.op = COURIER_NIC_ATOMIC_ADD_U64 | COURIER_NIC_ATOMIC_ADD_U32;
        refused(a, -EINVAL, "two op bits");
        a.op = 1u << 20;
        refused(a, 0, "an undefined op bit");
        const uint32_t missing = kKnownOps & ~s.props.atomic_ops;
        if (missing) {
          a = good;
          a.op = missing & (~missing + 1);
          refused(a, -EOPNOTSUPP, "a known op missing from atomic_ops");
        } else {
          MESSAGE("SKIP: every op is offered: refusal of an unsupported op not checked");
        }
        if (fetching) {
          const courier_nic_atomic_v1 f = make_atomic(s, *fetching, word, 1, 0, kResultBase, 2);
          a = f;
          a.result_mr = nullptr;
          refused(a, -EINVAL, "fetching op without result_mr");
          a = f;
          a.result_offset = kResultBase + 1;
          refused(a, -EINVAL, "misaligned result offset");
          a = f;
          a.result_offset = s.options.region_bytes - fetching->width / 2;
          refused(a, -EINVAL, "result past the end of the region");
          a.result_offset = UINT64_MAX - 3;
          refused(a, -EINVAL, "result offset overflowing");
        } else {
          MESSAGE("SKIP: no fetching op offered by " << backend_name(s)
                                                     << ": result checks not run");
        }
        CHECK(api.post_atomic(s.ep, nullptr) < 0);

        // Nothing above consumed a slot or produced a completion.
        CHECK(s.pump() >= 0);
        CHECK(s.pending.empty());
        store(s, word, 41);
        run_atomic(s, good, *any);
        CHECK(load(s, word) != 41);
      },
      serve_only);
}

TEST_CASE("atomics: an endpoint opened without COURIER_NIC_EP_ATOMICS refuses them") {
  run_pair(
      SessionOptions{},
      [](Session& s) {
        if (!offers_atomics(s.api, s.props)) {
          MESSAGE("SKIP: atomics not offered by " << backend_name(s));
          return;
        }
        const Op* any = nullptr;
        for (const Op& op : kAllOps) {
          if ((s.props.atomic_ops & op.bit) && !any) any = &op;
        }
        REQUIRE(any);
        const courier_nic_atomic_v1 a = make_atomic(s, *any, 4096, 1, 0, kResultBase, 1);
        const int rc = s.api.post_atomic(s.ep, &a);
        CHECK_MESSAGE(rc == -EINVAL, "status " << rc);
        CHECK_FALSE(backend_error().empty());
        MESSAGE("refused: " << backend_error());
        CHECK(s.pump() >= 0);
        CHECK(s.pending.empty());
      },
      serve_only);
}

TEST_CASE("atomics: write-then-atomic: at the ADD, every earlier write is visible") {
  constexpr uint64_t kRounds = 8;
  constexpr uint64_t kSlots = 64;
  constexpr uint64_t kCounter = 0;
  auto slot_offset = [](uint64_t round, uint64_t k) { return 4096 * (1 + round * kSlots + k); };
  auto seed_of = [](uint64_t round, uint64_t k) { return 7000 + round * kSlots + k; };
  // The first ADD-like op offered; NULL when the case does not apply.
  auto choose = [](const Session& s, bool report) -> const Op* {
    if (!s.atomics) {
      if (report) MESSAGE("SKIP: atomics not offered by " << backend_name(s));
      return nullptr;
    }
    if (!(s.props.caps_with_atomics & COURIER_NIC_CAP_ORDERED_WRITES)) {
      if (report) {
        MESSAGE("SKIP: no ORDERED_WRITES in caps_with_atomics of "
                << backend_name(s) << ": write-then-atomic is the core's job there");
      }
      return nullptr;
    }
    for (const Op* op : {&kAdd64, &kFetchAdd64}) {
      if (s.props.atomic_ops & op->bit) return op;
    }
    if (report) MESSAGE("SKIP: neither ADD_U64 nor FETCH_ADD_U64 offered by " << backend_name(s));
    return nullptr;
  };

  run_pair(
      atomic_options(),
      [&](Session& s) {
        const Op* op = choose(s, true);
        if (!op) return;
        Message ready;
        REQUIRE_MESSAGE(s.receive(&ready, deadline()), "the target never got ready");
        REQUIRE(ready.tag == Message::kStored);
        uint64_t cookie = 1;
        for (uint64_t round = 0; round < kRounds; ++round) {
          for (uint64_t k = 0; k < kSlots; ++k) {
            const uint64_t offset = slot_offset(round, k);
            fill_pattern(s.region + offset, offset, 4096, seed_of(round, k));
            REQUIRE_MESSAGE(
                s.post_retrying(s.make_write(offset, offset, 4096, cookie++), deadline()) == 0,
                backend_error());
          }
          REQUIRE_MESSAGE(s.post_atomic_retrying(make_atomic(s, *op, kCounter, 1, 0,
                                                             kResultBase + 8 * round, cookie++),
                                                 deadline()) == 0,
                          backend_error());
        }
        expect_completions(s, 1, cookie - 1);
      },
      [&](Session& s, Report& report) {
        if (!choose(s, false)) {
          s.serve(report);
          return;
        }
        std::memset(s.region + kCounter, 0, 8);
        Message ready;
        ready.tag = Message::kStored;
        s.send(ready);
        std::atomic_ref<uint64_t> counter(*reinterpret_cast<uint64_t*>(s.region + kCounter));
        uint64_t checked = 0;
        const auto until = deadline();
        while (checked < kRounds && Clock::now() < until) {
          s.pump();
          const uint64_t visible = std::min(counter.load(std::memory_order_acquire), kRounds);
          for (; checked < visible; ++checked) {
            for (uint64_t k = 0; k < kSlots; ++k) {
              const std::string problem =
                  check_pattern(s.region, slot_offset(checked, k), 4096, seed_of(checked, k));
              report.check(problem.empty(), "round %llu, slot %llu not there at its ADD: %s",
                           static_cast<unsigned long long>(checked),
                           static_cast<unsigned long long>(k), problem.c_str());
            }
          }
        }
        report.check(checked == kRounds, "only %llu of %llu ADDs became visible",
                     static_cast<unsigned long long>(checked),
                     static_cast<unsigned long long>(kRounds));
        s.serve(report);
      });
}

TEST_CASE("atomics: an atomic past the end of the remote region fails without hanging") {
  run_pair(
      atomic_options(),
      [](Session& s) {
        if (!s.atomics) {
          MESSAGE("SKIP: atomics not offered by " << backend_name(s));
          return;
        }
        const Op* any = nullptr;
        for (const Op& op : kAllOps) {
          if ((s.props.atomic_ops & op.bit) && !any) any = &op;
        }
        REQUIRE(any);
        // Aligned, but beyond the region the key covers.
        const courier_nic_atomic_v1 a =
            make_atomic(s, *any, s.peer_region_bytes + 4096, 1, 0, kResultBase, 5);
        expect_rejected(s, "atomic", a.cookie,
                        [&](Clock::time_point until) { return s.post_atomic_retrying(a, until); });
      },
      [](Session& s, Report& report) {
        s.serve(report);
        const std::string problem = check_canary(s.region, 0, s.options.region_bytes);
        report.check(problem.empty(), "a rejected atomic changed memory: %s", problem.c_str());
      });
}

}  // namespace courier::conformance
