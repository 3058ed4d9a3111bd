// Conformance: error paths. Every invalid call must answer a negative status
// and explain itself through last_error(); none may crash; a write the
// target must reject has to fail visibly instead of hanging.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "nic_checks.hpp"
#include "nic_harness.hpp"
#include "nic_patterns.hpp"

namespace courier::conformance {
namespace {

// Expects `status` to be an error with an explanation.
void expect_refused(int status, const char* what) {
  INFO(what);
  CHECK_MESSAGE(status < 0, "accepted with status " << status);
  if (status < 0) CHECK_MESSAGE(!backend_error().empty(), "no last_error text");
}

}  // namespace

TEST_CASE("errors: invalid writes are refused with a reason; the endpoint keeps working") {
  run_pair(
      SessionOptions{},
      [](Session& s) {
        const courier_nic_plugin_v1& api = s.api;
        const courier_nic_write_v1 good = s.make_write(0, 4096, 64, 1);

        courier_nic_write_v1 w = good;
        w.peer = 2;  // the table has ranks 0 and 1
        expect_refused(api.post_write(s.ep, &w), "unknown peer 2");
        w.peer = UINT32_MAX;
        expect_refused(api.post_write(s.ep, &w), "unknown peer UINT32_MAX");

        w = good;
        w.length = 0;
        expect_refused(api.post_write(s.ep, &w), "zero length");

        w = good;
        w.local_offset = s.options.region_bytes - 10;
        w.length = 20;
        expect_refused(api.post_write(s.ep, &w), "local range past the end of the region");
        w.local_offset = UINT64_MAX - 5;
        w.length = 10;
        expect_refused(api.post_write(s.ep, &w), "local offset + length overflows");
        w.local_offset = 0;
        w.length = s.options.region_bytes + 1;
        expect_refused(api.post_write(s.ep, &w), "length larger than the region");

        w = good;
        w.local_mr = nullptr;
        expect_refused(api.post_write(s.ep, &w), "NULL local_mr");

        if (s.props.max_msg_size < UINT64_MAX) {
          w = good;
          w.length = s.props.max_msg_size + 1;
          expect_refused(api.post_write(s.ep, &w), "length above max_msg_size");
        }
        expect_refused(api.post_write(s.ep, nullptr), "NULL write");

        // Nothing above may have consumed a slot or produced a completion.
        CHECK(s.pump() >= 0);
        CHECK(s.pending.empty());

        // The endpoint is still fine.
        fill_pattern(s.region, 4096, 64, 9);
        REQUIRE_MESSAGE(s.post_retrying(good, deadline()) == 0, backend_error());
        courier_nic_completion_v1 c{};
        REQUIRE(s.take_tx(1, &c, deadline()));
        CHECK(c.status == 0);
        const std::string problem =
            verify_remote(s, 4096, 64, 9, (s.props.caps & COURIER_NIC_CAP_DELIVERY_COMPLETE) != 0);
        CHECK_MESSAGE(problem.empty(), problem);
      },
      [](Session& s, Report& report) { s.serve(report); });
}

TEST_CASE("errors: invalid control-path arguments are refused with a reason") {
  TestHost host;
  const courier_nic_plugin_v1& api = plugin();
  void* backend = nullptr;
  REQUIRE_MESSAGE(api.init(host.services(), &backend) == 0, backend_error());

  expect_refused(api.query(backend, nullptr), "query(NULL props)");
  expect_refused(api.ep_open(backend, nullptr, nullptr), "ep_open(NULL attr)");

  courier_nic_props_v1 props{};
  props.struct_size = sizeof props;
  REQUIRE(api.query(backend, &props) == 0);
  courier_nic_ep_attr_v1 attr{};
  attr.struct_size = sizeof attr;
  attr.tx_depth = 16;
  attr.rx_depth = 16;
  void* ep = nullptr;
  REQUIRE_MESSAGE(api.ep_open(backend, &attr, &ep) == 0, backend_error());

  std::vector<std::byte> buffer(4096);
  void* mr = nullptr;
  courier_nic_rkey_v1 rkey{};
  expect_refused(api.mr_register(ep, nullptr, 4096, COURIER_MEM_HOST, &mr, &rkey),
                 "mr_register(NULL address)");
  expect_refused(api.mr_register(ep, buffer.data(), 0, COURIER_MEM_HOST, &mr, &rkey),
                 "mr_register(zero length)");
  const uint32_t unsupported = ~props.mem_kinds & (COURIER_MEM_CUDA | COURIER_MEM_ROCM |
                                                   COURIER_MEM_DMABUF | COURIER_MEM_ODP);
  if (unsupported) {
    const uint32_t kind = unsupported & (~unsupported + 1);  // lowest unsupported kind
    expect_refused(api.mr_register(ep, buffer.data(), buffer.size(), kind, &mr, &rkey),
                   "mr_register of a memory kind not in mem_kinds");
  }
  expect_refused(api.ep_connect(ep, 0, nullptr, 0), "ep_connect with no names");
  courier_nic_completion_v1 out[4];
  CHECK(api.poll(ep, out, 0) == 0);  // nothing asked, nothing returned
  CHECK(api.poll(ep, out, 4) == 0);  // nothing posted, nothing completes

  CHECK(api.ep_close(ep) == 0);
  api.fini(backend);
}

TEST_CASE("errors: a write with a bad remote key fails without hanging") {
  run_pair(
      SessionOptions{},
      [](Session& s) {
        courier_nic_write_v1 w = s.make_write(0, 4096, 64, 7);
        w.remote.key ^= 0x5A5A5A5A00ull;
        expect_rejected(s, "write", w.cookie,
                        [&](Clock::time_point until) { return s.post_retrying(w, until); });
      },
      [](Session& s, Report& report) {
        s.serve(report);
        // Whatever this side saw of the rejected write (an error completion
        // or nothing) is acceptable; its memory must be untouched.
        const std::string problem = check_canary(s.region, 0, s.options.region_bytes);
        report.check(problem.empty(), "a rejected write changed memory: %s", problem.c_str());
      });
}

TEST_CASE("errors: a write past the end of the remote region fails without hanging") {
  run_pair(
      SessionOptions{},
      [](Session& s) {
        const courier_nic_write_v1 w = s.make_write(0, s.peer_region_bytes - 32, 64, 8);
        expect_rejected(s, "write", w.cookie,
                        [&](Clock::time_point until) { return s.post_retrying(w, until); });
      },
      [](Session& s, Report& report) {
        s.serve(report);
        const std::string problem = check_canary(s.region, 0, s.options.region_bytes);
        report.check(problem.empty(), "a rejected write changed memory: %s", problem.c_str());
      });
}

}  // namespace courier::conformance
