// Which low-latency dispatch kernel a launch runs: its halves (send,
// receive, both) and its instance (LlSpec), decided on the host from the
// jobs. Host code without device code, so that the backends (gpu-cuda,
// gpu-hip) and the CPU unit tests share it; the kernels
// (direct_kernels.hpp) take what it decides.
#pragma once

#include <cstdint>

#include "courier/abi/gpu_v1.h"

namespace courier::device::ep {

// The halves of a `dispatch` launch. kOwnRows (with both halves): the send
// half stores this rank's own rows straight into the receive's outputs,
// where the receive leaves them.
inline constexpr uint32_t kSendHalf = 1, kReceiveHalf = 2, kOwnRows = 4;

// The receive shares all rows out evenly over its blocks up to this many
// (local expert, source rank) pairs (their counts in shared memory); with
// more, a block takes its own experts.
inline constexpr uint32_t kBalancedPairs = 2048;

// What an instance of the low-latency dispatch kernel knows at compile
// time. Each call runs the kernel cold, a block per SM walking its steps
// once, so the code between the steps costs instruction-cache misses in
// every block; an instance for each common configuration leaves the
// others' code out (docs/performance.md: about 1.3 us of an 18 us kernel).
// kLlGeneral decides everything at run time and takes any job; the others
// take the jobs ll_dispatch_spec (below) gives them.
enum LlSpec : uint32_t {
  kLlGeneral = 0,
  // FP8 send; a receive with at most kBalancedPairs (expert, rank) pairs
  // and rows (staging and outputs) aligned to 16 bytes.
  kLlFp8 = 1,
  // A BF16 or float send as 16-byte vectors (x, its rows and x_off aligned
  // to 16 bytes); the receive as kLlFp8's.
  kLlVectors = 2,
  kLlSendKind = 3,  // (the bits that say kLlFp8 or kLlVectors)
  // With kLlFp8 or kLlVectors: the launch has kOwnRows (without it, not).
  kLlOwnRows = 4,
};

// What a low-latency dispatch launch runs: with FUSE_RECEIVE both halves,
// and then this rank's own rows go straight into the outputs (the rows a
// rank sends itself are 1/R of its rows; at EP1 all of them, and then the
// receive moves nothing) where 16-byte stores into them are aligned; a
// later receive launch (a hook's) could not know where they went, so only
// the fused launch does it.
inline uint32_t ll_dispatch_halves(const courier_gpu_ep_ll_dispatch_v1& send,
                                   const courier_gpu_ep_ll_receive_v1& receive) {
  if ((send.fuse & COURIER_GPU_EP_FUSE_RECEIVE) == 0) return kSendHalf;
  const bool aligned = (reinterpret_cast<uintptr_t>(receive.x) & 15u) == 0;
  return kSendHalf | kReceiveHalf | (aligned ? kOwnRows : 0u);
}

// The instance of the dispatch kernel (LlSpec) a launch of `halves` can
// take: a fixed one where the jobs have what it assumes, else kLlGeneral.
inline uint32_t ll_dispatch_spec(const courier_gpu_ep_ll_dispatch_v1& send,
                                 const courier_gpu_ep_ll_receive_v1& receive, uint32_t halves) {
  if ((halves & kReceiveHalf) != 0) {
    const bool balanced = uint64_t{receive.local_experts} * receive.num_ranks <= kBalancedPairs;
    const bool aligned = ((receive.row_bytes | reinterpret_cast<uintptr_t>(receive.x) |
                           reinterpret_cast<uintptr_t>(receive.staging_x)) &
                          15u) == 0;
    if (!balanced || !aligned) return kLlGeneral;
  }
  const uint32_t own_rows = (halves & kOwnRows) != 0 ? kLlOwnRows : 0u;
  if ((halves & kSendHalf) == 0 || send.fp8 != 0) {
    return kLlFp8 | own_rows;  // (a receive alone: either has its code)
  }
  const uint64_t row_bytes = uint64_t{send.hidden} * (send.x_dtype_bits / 8);
  const bool aligned = ((reinterpret_cast<uintptr_t>(send.x) | row_bytes | send.x_off) & 15u) == 0;
  return aligned ? kLlVectors | own_rows : kLlGeneral;
}

}  // namespace courier::device::ep
