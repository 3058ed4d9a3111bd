// The low-latency dispatch's outputs as both paths hand them out: views
// over wherever the receive kernel wrote (the Buffer's memory or the
// caller's tensors, LowLatencyOutputs), the FP8 scales in the layout asked
// for (docs/ep.md), and that layout as the receive jobs take it.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "courier/ep.hpp"

namespace courier::ep {

// Where one dispatch's outputs are.
struct LlOutputPointers {
  void* x = nullptr;
  void* scales = nullptr;
  int32_t* count = nullptr;
  int32_t* src = nullptr;
  int64_t* range = nullptr;
};

// The result's packed_recv_* views: [L, ranks * max_tokens, hidden] rows
// (FP8 e4m3 with fp8, else x_dtype), the scales (fp8) as `layout` lays
// them out, counts [L], sources [L, ranks * max_tokens], ranges [L, ranks].
void describe_ll_outputs(LowLatencyDispatchResult& result, const LlOutputPointers& at,
                         DLDevice device, uint32_t local_experts, uint32_t ranks,
                         uint32_t max_tokens, uint32_t hidden, DLDataType x_dtype, bool fp8,
                         ScalesLayout layout);

// `layout` as a receive job's scales_layout (COURIER_GPU_EP_SCALES_*).
uint32_t scales_layout_bits(bool fp8, ScalesLayout layout);

}  // namespace courier::ep
