#include "core/ep/tensor_checks.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/check.hpp"
#include "courier/abi/plugin_header.h"

namespace courier::ep {

namespace {

// DLPack 0.6 has no bool code; newer versions call 6 kDLBool.
constexpr uint8_t kDLBoolCode = 6;

bool matches(const DLDataType& t, DType dtype) {
  if (t.lanes != 1) return false;
  switch (dtype) {
    case DType::int64:
      return t.code == kDLInt && t.bits == 64;
    case DType::int32:
      return t.code == kDLInt && t.bits == 32;
    case DType::boolean:
      return (t.code == kDLUInt || t.code == kDLBoolCode) && t.bits == 8;
    case DType::float32:
      return t.code == kDLFloat && t.bits == 32;
    case DType::bfloat16:
      return t.code == kDLBfloat && t.bits == 16;
    case DType::fp8_e4m3:
      return t.code == kDLFloat && t.bits == 8;
  }
  return false;
}

std::string describe(const DLDataType& t) {
  const char* code = t.code == kDLInt        ? "int"
                     : t.code == kDLUInt     ? "uint"
                     : t.code == kDLFloat    ? "float"
                     : t.code == kDLBfloat   ? "bfloat"
                     : t.code == kDLBoolCode ? "bool"
                                             : "code";
  return fmt::format("{}{}{}", code, t.bits, t.lanes == 1 ? "" : fmt::format("x{}", t.lanes));
}

std::string shape_text(const int64_t* shape, int ndim) {
  std::vector<std::string> parts;
  for (int i = 0; i < ndim; ++i) parts.push_back(shape[i] < 0 ? "*" : std::to_string(shape[i]));
  return "[" + fmt::format("{}", fmt::join(parts, ", ")) + "]";
}

const char* device_name(int type) {
  switch (type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda";
    case kDLCUDAHost:
      return "cuda_host";
    case kDLROCM:
      return "rocm";
    default:
      return "another device";
  }
}

}  // namespace

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::int64:
      return "int64";
    case DType::int32:
      return "int32";
    case DType::boolean:
      return "bool";
    case DType::float32:
      return "float32";
    case DType::bfloat16:
      return "bfloat16";
    case DType::fp8_e4m3:
      return "float8_e4m3";
  }
  return "unknown";
}

DLDeviceType device_type_of(uint32_t mem_kind) {
  if (mem_kind == COURIER_MEM_CUDA) return kDLCUDA;
  if (mem_kind == COURIER_MEM_ROCM) return kDLROCM;
  return kDLCPU;
}

void* check_tensor(const DLTensor* tensor, std::string_view name, DType dtype,
                   std::initializer_list<int64_t> shape, DLDeviceType device) {
  if (tensor == nullptr) fail("{}: no tensor given", name);
  if (!matches(tensor->dtype, dtype)) {
    fail("{}: dtype {} where {} is required", name, describe(tensor->dtype), to_string(dtype));
  }
  const int ndim = static_cast<int>(shape.size());
  if (tensor->ndim != ndim || tensor->shape == nullptr) {
    fail("{}: {} dimensions where {} are required ({})", name, tensor->ndim, ndim,
         shape_text(shape.begin(), ndim));
  }
  int d = 0;
  bool empty = false;
  for (int64_t want : shape) {
    if (tensor->shape[d] < 0 || (want >= 0 && tensor->shape[d] != want)) {
      fail("{}: shape {} where {} is required", name, shape_text(tensor->shape, ndim),
           shape_text(shape.begin(), ndim));
    }
    empty = empty || tensor->shape[d] == 0;
    ++d;
  }
  // An empty tensor (a rank with no tokens) may have no data pointer: torch
  // gives zero-element CUDA tensors none.
  if (tensor->data == nullptr && !empty) fail("{}: the tensor has no data pointer", name);
  if (tensor->device.device_type != device) {
    fail("{}: the tensor is in {} memory, but this GPU backend's memory is {}", name,
         device_name(tensor->device.device_type), device_name(device));
  }
  // Must be row-major and compact. An empty tensor addresses no byte, so its
  // strides say nothing (numpy gives zero-size arrays strides of 0).
  if (tensor->strides != nullptr && !empty) {
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (tensor->shape[i] > 1 && tensor->strides[i] != expected) {
        fail("{}: the tensor is not contiguous (row-major) in dimension {}", name, i);
      }
      expected *= tensor->shape[i];
    }
  }
  return static_cast<char*>(tensor->data) + tensor->byte_offset;
}

}  // namespace courier::ep
