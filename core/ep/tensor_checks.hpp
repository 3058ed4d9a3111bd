// Checks of the DLPack tensors the EP API receives: dtype, shape, device,
// layout. Each failure throws courier::Error naming the argument and what
// was expected.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace courier::ep {

enum class DType { int64, int32, boolean, float32, bfloat16, fp8_e4m3 };

std::string_view to_string(DType dtype);

// The DLPack device type of memory of a GPU backend's kind (COURIER_MEM_*).
DLDeviceType device_type_of(uint32_t mem_kind);

// `shape`: one entry per dimension, -1 where any size is fine. Returns the
// tensor's first byte (data + byte_offset).
void* check_tensor(const DLTensor* tensor, std::string_view name, DType dtype,
                   std::initializer_list<int64_t> shape, DLDeviceType device);

}  // namespace courier::ep
