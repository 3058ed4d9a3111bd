// get_dispatch_layout's kernel body (docs/ep.md), compiled by every GPU
// backend: one call per token, from any number of threads at once.
#pragma once

#include <cstdint>

#include "courier/abi/gpu_v1.h"
#include "courier/platform.hpp"
#include "gpu/device_atomics.hpp"

namespace courier::device {

// Counts token `t` into the layout: once per rank its experts live on, once
// per expert; marks its is_token_in_rank row. Indices outside [-1, E) are
// skipped and the first one is recorded in *first_invalid.
COURIER_DEVICE_INLINE void layout_token(const courier_gpu_ep_layout_v1& a, uint32_t t) {
  const uint32_t experts_per_rank = a.num_experts / a.num_ranks;
  uint8_t* in_rank = a.is_token_in_rank + static_cast<uint64_t>(t) * a.num_ranks;
  for (uint32_t r = 0; r < a.num_ranks; ++r) in_rank[r] = 0;
  const int64_t* experts = a.topk_idx + static_cast<uint64_t>(t) * a.topk;
  for (uint32_t k = 0; k < a.topk; ++k) {
    const int64_t e = experts[k];
    if (e == -1) continue;
    if (e < -1 || e >= static_cast<int64_t>(a.num_experts)) {
      compare_exchange(a.first_invalid, 0, (static_cast<uint64_t>(t) + 1) << 32 | k);
      continue;
    }
    add_relaxed_gpu(&a.num_tokens_per_expert[e], 1);
    const uint32_t r = static_cast<uint32_t>(e) / experts_per_rank;
    if (in_rank[r] == 0) {  // each token counts once per rank
      in_rank[r] = 1;
      add_relaxed_gpu(&a.num_tokens_per_rank[r], 1);
    }
  }
}

}  // namespace courier::device
