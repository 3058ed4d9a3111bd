// DLPack's C exchange API (DLPack 1.2 and later: `__dlpack_c_exchange_api__`,
// earlier `__c_dlpack_exchange_api__`): a table of C functions a tensor
// type publishes so that a native library takes its tensors and its current
// stream without calling back into Python. torch publishes it on
// torch.Tensor since 2.10; through it a tensor crosses in tens of
// nanoseconds instead of the microseconds of `to_dlpack` and a capsule.
//
// Courier builds with Debian's DLPack 0.6 header, which predates the API,
// so the layouts the API passes are declared here, as the DLPack
// specification (dlpack.h of DLPack 1.3, "fast exchange protocol") defines
// them. They extend DLPack 0.6's DLTensor, which is unchanged.
#pragma once

#include <Python.h>
#include <dlpack/dlpack.h>

#include <cstdint>

namespace courier::python::dlpack_exchange {

struct Version {
  uint32_t major;
  uint32_t minor;
};

// DLManagedTensorVersioned: an owned tensor, returned through `deleter`.
struct ManagedTensor {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

struct ApiHeader {
  Version version;
  ApiHeader* prev_api;
};

// DLPackExchangeAPI. Every function returns 0 on success and -1 with a
// Python exception set; the *_no_sync ones leave stream ordering to the
// caller (which launches on current_work_stream).
struct Api {
  ApiHeader header;
  int (*managed_tensor_allocator)(DLTensor* prototype, ManagedTensor** out, void* error_ctx,
                                  void (*set_error)(void* error_ctx, const char* kind,
                                                    const char* message));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensor** out);
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensor* tensor, void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(DLDeviceType device_type, int32_t device_id, void** out_stream);
};

// DLPack 1.x codes the 0.6 header does not name.
constexpr uint8_t kBoolCode = 6;
constexpr uint8_t kFloat8E4m3fnCode = 10;
// ManagedTensor::flags: the consumer must not write (read only), or the
// tensor is a copy (writes would not reach the producer's).
constexpr uint64_t kReadOnlyFlag = 1;
constexpr uint64_t kIsCopiedFlag = 2;

// The exchange API `type` publishes (major version 1, with every function
// Courier calls), or null (no error set) when it publishes none: the capsule
// `__dlpack_c_exchange_api__`, or the integer address of the older `__c_dlpack_exchange_api__`.
// Needs the GIL; costs a type-attribute lookup.
const Api* api_of_type(PyObject* type);
// The exchange API of `object`'s type.
inline const Api* api_of(PyObject* object) {
  return api_of_type(reinterpret_cast<PyObject*>(Py_TYPE(object)));
}

}  // namespace courier::python::dlpack_exchange
