// Which low-latency dispatch kernel a launch takes (gpu/ep/ll_dispatch_spec.hpp):
// a fixed instance only for jobs that have everything it assumes at compile
// time (it would overrun shared memory or store misaligned vectors
// otherwise), the general one for the rest.
#include <doctest/doctest.h>

#include <cstdint>

#include "gpu/ep/ll_dispatch_spec.hpp"

namespace ep = courier::device::ep;

namespace {

alignas(16) unsigned char g_arena[1 << 16];

// A fused FP8 dispatch at the standard shape (hidden 7168, 288 experts, EP2),
// every pointer aligned.
struct Jobs {
  courier_gpu_ep_ll_dispatch_v1 send{};
  courier_gpu_ep_ll_receive_v1 receive{};
  Jobs() {
    send.fuse = COURIER_GPU_EP_FUSE_RECEIVE;
    send.fp8 = 1;
    send.hidden = 7168;
    send.x_dtype_bits = 16;
    send.x = g_arena;
    send.x_off = 4096;
    receive.x = g_arena + 1024;
    receive.staging_x = g_arena + 2048;
    receive.row_bytes = 7168;
    receive.num_ranks = 2;
    receive.local_experts = 144;
  }
  uint32_t halves() const { return ep::ll_dispatch_halves(send, receive); }
  uint32_t spec() const { return ep::ll_dispatch_spec(send, receive, halves()); }
};

}  // namespace

TEST_CASE("a fused FP8 dispatch with aligned outputs: own rows, the FP8 instance") {
  Jobs j;
  CHECK(j.halves() == (ep::kSendHalf | ep::kReceiveHalf | ep::kOwnRows));
  CHECK(j.spec() == (ep::kLlFp8 | ep::kLlOwnRows));
}

TEST_CASE("a fused bfloat16 dispatch: the vectors instance while its rows are aligned") {
  Jobs j;
  j.send.fp8 = 0;
  j.receive.row_bytes = 7168 * 2;
  CHECK(j.spec() == (ep::kLlVectors | ep::kLlOwnRows));
  j.send.x_off = 4096 + 8;  // (the staging rows' offset in the windows)
  CHECK(j.spec() == ep::kLlGeneral);
  j.send.x_off = 4096;
  j.send.x = g_arena + 4;
  CHECK(j.spec() == ep::kLlGeneral);
  j.send.x = g_arena;
  j.send.hidden = 7172;  // rows of 14344 bytes
  j.receive.row_bytes = 7172 * 2;
  CHECK(j.spec() == ep::kLlGeneral);
}

TEST_CASE("unaligned outputs: no own rows, and the receive takes the general instance") {
  Jobs j;
  j.receive.x = g_arena + 8;
  CHECK(j.halves() == (ep::kSendHalf | ep::kReceiveHalf));
  CHECK(j.spec() == ep::kLlGeneral);
}

TEST_CASE("a receive with more (expert, rank) pairs than the balanced one holds: general") {
  Jobs j;
  j.receive.num_ranks = 64;
  j.receive.local_experts = ep::kBalancedPairs / 64;
  CHECK(j.spec() == (ep::kLlFp8 | ep::kLlOwnRows));
  j.receive.local_experts += 1;
  CHECK(j.spec() == ep::kLlGeneral);
  // A product past 32 bits is not mistaken for a small one.
  j.receive.num_ranks = 1u << 16;
  j.receive.local_experts = 1u << 16;
  CHECK(j.spec() == ep::kLlGeneral);
}

TEST_CASE("a send alone (a receive hook's dispatch) needs nothing of the receive") {
  Jobs j;
  j.send.fuse = 0;
  j.receive.x = g_arena + 8;  // (not used: the receive runs later)
  j.receive.local_experts = 1u << 20;
  CHECK(j.halves() == ep::kSendHalf);
  CHECK(j.spec() == ep::kLlFp8);
  j.send.fp8 = 0;
  CHECK(j.spec() == ep::kLlVectors);
}

TEST_CASE("a receive alone: a fixed instance without own rows, or the general one") {
  Jobs j;
  CHECK(ep::ll_dispatch_spec({}, j.receive, ep::kReceiveHalf) == ep::kLlFp8);
  j.receive.staging_x = g_arena + 2056;
  CHECK(ep::ll_dispatch_spec({}, j.receive, ep::kReceiveHalf) == ep::kLlGeneral);
  j.receive.staging_x = g_arena + 2048;
  j.receive.row_bytes = 7170;
  CHECK(ep::ll_dispatch_spec({}, j.receive, ep::kReceiveHalf) == ep::kLlGeneral);
}
