#include "core/ep/ll_outputs.hpp"

#include "core/ep/element_types.hpp"
#include "courier/abi/gpu_v1.h"

namespace courier::ep {

void describe_ll_outputs(LowLatencyDispatchResult& result, const LlOutputPointers& at,
                         DLDevice device, uint32_t local_experts, uint32_t ranks,
                         uint32_t max_tokens, uint32_t hidden, DLDataType x_dtype, bool fp8,
                         ScalesLayout layout) {
  const int64_t L = local_experts, slots = int64_t{ranks} * max_tokens;
  result.packed_recv_x =
      TensorView(at.x, device, fp8 ? DLDataType{kDLFloat, 8, 1} : x_dtype, {L, slots, hidden});
  if (fp8) {
    const int64_t cols = hidden / kFp8Block;
    if (layout == ScalesLayout::row_major) {
      result.packed_recv_x_scales =
          TensorView(at.scales, device, DLDataType{kDLFloat, 32, 1}, {L, slots, cols});
    } else {  // column-major in the last two dimensions
      const bool ue8m0 = layout == ScalesLayout::ue8m0;
      const int64_t s = ue8m0 ? (cols + 3) / 4 : cols;
      result.packed_recv_x_scales = TensorView(
          at.scales, device, ue8m0 ? DLDataType{kDLInt, 32, 1} : DLDataType{kDLFloat, 32, 1},
          {L, slots, s}, {s * slots, 1, slots});
    }
  }
  result.packed_recv_count = TensorView(at.count, device, DLDataType{kDLInt, 32, 1}, {L});
  result.packed_recv_src_info = TensorView(at.src, device, DLDataType{kDLInt, 32, 1}, {L, slots});
  result.packed_recv_layout_range =
      TensorView(at.range, device, DLDataType{kDLInt, 64, 1}, {L, static_cast<int64_t>(ranks)});
}

uint32_t scales_layout_bits(bool fp8, ScalesLayout layout) {
  if (!fp8) return 0;
  switch (layout) {
    case ScalesLayout::row_major:
      return 0;
    case ScalesLayout::column_major:
      return COURIER_GPU_EP_SCALES_COLUMN_MAJOR;
    case ScalesLayout::ue8m0:
      return COURIER_GPU_EP_SCALES_COLUMN_MAJOR | COURIER_GPU_EP_SCALES_UE8M0;
  }
  return 0;
}

}  // namespace courier::ep
