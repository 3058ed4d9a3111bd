#include "python/src/dlpack_exchange.hpp"

namespace courier::python::dlpack_exchange {

namespace {

constexpr const char* kCapsuleName = "dlpack_exchange_api";

// A table of major version 1 with every function the bridge calls (a
// type that leaves one out crosses through its capsule instead).
const Api* checked(const Api* api) {
  if (api == nullptr || api->header.version.major != 1) return nullptr;
  const bool complete = api->managed_tensor_allocator != nullptr &&
                        api->managed_tensor_from_py_object_no_sync != nullptr &&
                        api->managed_tensor_to_py_object_no_sync != nullptr &&
                        api->current_work_stream != nullptr;
  return complete ? api : nullptr;
}

// type.<name>, or null (no error set) when the type has none.
PyObject* type_attribute(PyObject* type, const char* name) {
  PyObject* value = PyObject_GetAttrString(type, name);
  if (value == nullptr) PyErr_Clear();
  return value;
}

}  // namespace

const Api* api_of_type(PyObject* type) {
  if (PyObject* capsule = type_attribute(type, "__dlpack_c_exchange_api__")) {
    const Api* api = nullptr;
    if (PyCapsule_IsValid(capsule, kCapsuleName)) {
      api = static_cast<const Api*>(PyCapsule_GetPointer(capsule, kCapsuleName));
    }
    Py_DECREF(capsule);
    return checked(api);
  }
  if (PyObject* address = type_attribute(type, "__c_dlpack_exchange_api__")) {
    const Api* api = nullptr;
    if (PyLong_Check(address)) api = static_cast<const Api*>(PyLong_AsVoidPtr(address));
    if (PyErr_Occurred()) PyErr_Clear();
    Py_DECREF(address);
    return checked(api);
  }
  return nullptr;
}

}  // namespace courier::python::dlpack_exchange
