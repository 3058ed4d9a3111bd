#include "python/src/dlpack_bridge.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "courier/error.hpp"
#include "python/src/bindings.hpp"

namespace nb = nanobind;

namespace courier::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";
// DLPack 0.6 (the header Courier builds with) has no bool code; later
// versions, which numpy and torch speak, call 6 kDLBool.
constexpr uint8_t kDLBoolCode = 6;
constexpr const char* kUsedCapsuleName = "used_dltensor";

struct NamedType {
  const char* name;
  DLDataType dtype;
};

constexpr std::array<NamedType, 11> kTypes{{
    {"bfloat16", {kDLBfloat, 16, 1}},
    {"float16", {kDLFloat, 16, 1}},
    {"float32", {kDLFloat, 32, 1}},
    {"float64", {kDLFloat, 64, 1}},
    {"float8_e4m3fn", {kDLFloat, 8, 1}},
    {"int64", {kDLInt, 64, 1}},
    {"int32", {kDLInt, 32, 1}},
    {"uint8", {kDLUInt, 8, 1}},
    {"uint16", {kDLUInt, 16, 1}},
    {"int8", {kDLInt, 8, 1}},
    {"bool", {kDLBoolCode, 8, 1}},
}};

bool same_dtype(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// Zero-element outputs still need a valid address for some consumers.
alignas(64) constexpr std::byte kNoElements[64]{};

// What an exported capsule owns: the DLPack tensor and a reference to the
// TensorRef, dropped (under the GIL) when the consumer is done.
struct Export {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: row-major
  PyObject* ref = nullptr;
};

void delete_export(DLManagedTensor* managed) {
  auto* e = static_cast<Export*>(managed->manager_ctx);
  // A consumer may free the tensor after the interpreter shut down (torch's
  // caching allocator at exit): then there is no GIL to take and nothing
  // left to release the reference to.
  if (interpreter_alive()) {
    nb::gil_scoped_acquire gil;
    Py_XDECREF(e->ref);
  }
  delete e;
}

// A capsule nobody consumed still owns its tensor.
void delete_unconsumed_capsule(PyObject* capsule) {
  if (std::strcmp(PyCapsule_GetName(capsule), kCapsuleName) != 0) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

}  // namespace

void throw_exchange_failure(const std::string& what) {
  if (PyErr_Occurred() == nullptr) throw courier::Error(what);
  nb::python_error error;  // takes the exception the producer set
  throw courier::Error(what + " (" + error.what() + ")");
}

std::string dtype_name(const DLDataType& dtype) {
  for (const NamedType& t : kTypes) {
    if (same_dtype(t.dtype, dtype)) return t.name;
  }
  return "dtype(code " + std::to_string(dtype.code) + ", " + std::to_string(dtype.bits) + " bits)";
}

DLDataType dtype_from_name(const std::string& name) {
  for (const NamedType& t : kTypes) {
    if (name == t.name) return t.dtype;
  }
  throw courier::Error("unknown dtype name '" + name +
                       "' (bfloat16, float16, float32, float64, float8_e4m3fn, int64, int32, "
                       "uint8, uint16, int8, bool)");
}

ImportedTensor::ImportedTensor(nb::handle object, const char* name) {
  if (object.is_none()) return;
  nb::handle source = object;
  const DtypeView* reinterpreted = nullptr;
  if (nb::isinstance<DtypeView>(object)) {
    reinterpreted = nb::inst_ptr<DtypeView>(object);
    source = reinterpreted->tensor;
  }
  // Through the type's C exchange API where it has one (tens of
  // nanoseconds, no Python call); else a DLPack capsule as it is (torch's
  // to_dlpack: its __dlpack__ costs microseconds of stream bookkeeping per
  // tensor, and the caller orders the streams itself), else __dlpack__.
  if (const dlpack_exchange::Api* api = dlpack_exchange::api_of(source.ptr())) {
    dlpack_exchange::ManagedTensor* managed = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(source.ptr(), &managed) != 0 ||
        managed == nullptr) {
      throw_exchange_failure(std::string(name) + ": the tensor cannot be exported");
    }
    versioned_ = managed;
    api_ = api;
    if (managed->version.major != 1) {
      const uint32_t major = managed->version.major;
      release();
      throw courier::Error(std::string(name) + ": the tensor came as DLPack " +
                           std::to_string(major) + ".x; Courier reads 1.x");
    }
    tensor_ = managed->dl_tensor;
    map_dlpack1_dtype();
    reinterpret(reinterpreted, name);
    return;
  }
  nb::object capsule;
  if (PyCapsule_CheckExact(source.ptr())) {
    capsule = nb::borrow(source);
  } else if (nb::hasattr(source, "__dlpack__")) {
    capsule = source.attr("__dlpack__")();
  } else {
    throw courier::Error(std::string(name) + ": a " +
                         nb::cast<std::string>(nb::str(source.type().attr("__name__"))) +
                         " is not a tensor (it has no __dlpack__; pass a numpy array or a torch "
                         "tensor)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  if (managed == nullptr) {
    PyErr_Clear();
    throw courier::Error(std::string(name) +
                         ": __dlpack__ did not return a 'dltensor' capsule (already consumed?)");
  }
  // The capsule no longer owns the tensor: this object returns it.
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
  managed_ = managed;
  tensor_ = managed->dl_tensor;
  map_dlpack1_dtype();
  reinterpret(reinterpreted, name);
}

void ImportedTensor::map_dlpack1_dtype() {
  // DLPack 1.x names FP8 e4m3fn; Courier's 0.6 dtypes call it float 8.
  if (tensor_.dtype.code == dlpack_exchange::kFloat8E4m3fnCode && tensor_.dtype.bits == 8) {
    tensor_.dtype = {kDLFloat, 8, 1};
  }
}

void ImportedTensor::reinterpret(const DtypeView* view, const char* name) {
  if (view == nullptr) return;
  if (tensor_.dtype.bits != view->dtype.bits || tensor_.dtype.lanes != 1) {
    const std::string have = dtype_name(tensor_.dtype);
    release();
    throw courier::Error(std::string(name) + ": cannot view " + have + " as " +
                         dtype_name(view->dtype) + " (the widths differ)");
  }
  tensor_.dtype = view->dtype;
}

ImportedTensor::ImportedTensor(ImportedTensor&& other) noexcept { *this = std::move(other); }

ImportedTensor& ImportedTensor::operator=(ImportedTensor&& other) noexcept {
  if (this != &other) {
    release();
    managed_ = std::exchange(other.managed_, nullptr);
    versioned_ = std::exchange(other.versioned_, nullptr);
    api_ = std::exchange(other.api_, nullptr);
    tensor_ = other.tensor_;
  }
  return *this;
}

ImportedTensor::~ImportedTensor() { release(); }

void ImportedTensor::release() {
  DLManagedTensor* managed = std::exchange(managed_, nullptr);
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  dlpack_exchange::ManagedTensor* versioned = std::exchange(versioned_, nullptr);
  if (versioned != nullptr && versioned->deleter != nullptr) versioned->deleter(versioned);
}

namespace {

// The allocator's error callback: its message, kept for the exception.
void keep_allocation_error(void* error_ctx, const char* kind, const char* message) {
  *static_cast<std::string*>(error_ctx) =
      std::string(kind != nullptr ? kind : "Error") + ": " + (message != nullptr ? message : "");
}

}  // namespace

AllocatedTensor::AllocatedTensor(const dlpack_exchange::Api& api, const DLTensor& like,
                                 const std::string& name)
    : api_(api), name_(name) {
  DLTensor prototype = like;
  prototype.data = nullptr;
  prototype.strides = nullptr;  // row-major
  prototype.byte_offset = 0;
  if (prototype.dtype.code == kDLFloat && prototype.dtype.bits == 8) {
    prototype.dtype.code = dlpack_exchange::kFloat8E4m3fnCode;  // DLPack 1.x's name for it
  }
  std::string error;
  if (api.managed_tensor_allocator(&prototype, &managed_, &error, keep_allocation_error) != 0 ||
      managed_ == nullptr) {
    managed_ = nullptr;
    if (!error.empty()) {
      PyErr_Clear();
      throw courier::Error(name + ": the framework could not allocate it (" + error + ")");
    }
    throw_exchange_failure(name + ": the framework could not allocate it");
  }
  tensor_ = managed_->dl_tensor;
  if (tensor_.dtype.code == dlpack_exchange::kFloat8E4m3fnCode && tensor_.dtype.bits == 8) {
    tensor_.dtype = {kDLFloat, 8, 1};
  }
}

AllocatedTensor::~AllocatedTensor() {
  if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
}

nb::object AllocatedTensor::to_python() {
  void* object = nullptr;
  // The call takes the tensor over, even when it fails (DLPack says it
  // steals it): never freed here again.
  dlpack_exchange::ManagedTensor* managed = std::exchange(managed_, nullptr);
  if (api_.managed_tensor_to_py_object_no_sync(managed, &object) != 0 || object == nullptr) {
    throw_exchange_failure(name_ + ": the framework could not wrap it");
  }
  return nb::steal(static_cast<PyObject*>(object));
}

TensorRef::TensorRef(const ep::TensorView& view, nb::object owner, LiveViews live)
    : view_(view), owner_(std::move(owner)), live_(std::move(live)) {
  ++*live_;
}

TensorRef::~TensorRef() { --*live_; }

TensorRef* TensorRef::reinterpret(const std::string& dtype) const {
  const DLDataType wanted = dtype_from_name(dtype);
  if (wanted.bits != view_.tensor().dtype.bits) {
    throw courier::Error("TensorRef.reinterpret: " + dtype_name(view_.tensor().dtype) +
                         " cannot be viewed as " + dtype + " (the widths differ)");
  }
  ep::TensorView view = view_;
  view.tensor().dtype = wanted;
  return new TensorRef(view, owner_, live_);
}

nb::object TensorRef::export_capsule(nb::handle self) {
  const TensorRef& ref = *nb::inst_ptr<TensorRef>(self);
  auto* e = new Export;
  const DLTensor& t = ref.view_.tensor();
  e->shape.assign(t.shape, t.shape + t.ndim);
  e->managed.dl_tensor = t;
  e->managed.dl_tensor.shape = e->shape.data();
  e->managed.dl_tensor.strides = nullptr;
  if (t.strides != nullptr) {  // e.g. column-major FP8 scales
    e->strides.assign(t.strides, t.strides + t.ndim);
    e->managed.dl_tensor.strides = e->strides.data();
  }
  if (e->managed.dl_tensor.data == nullptr) {
    e->managed.dl_tensor.data = const_cast<std::byte*>(kNoElements);
    e->managed.dl_tensor.byte_offset = 0;
  }
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_export;
  e->ref = self.ptr();
  Py_INCREF(e->ref);
  PyObject* capsule = PyCapsule_New(&e->managed, kCapsuleName, delete_unconsumed_capsule);
  if (capsule == nullptr) {
    delete_export(&e->managed);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

nb::object make_tensor_ref(const ep::TensorView& view, nb::handle owner, const LiveViews& live) {
  const DLTensor& t = view.tensor();
  if (t.ndim == 0 && t.data == nullptr) return nb::none();
  return nb::cast(new TensorRef(view, nb::borrow(owner), live), nb::rv_policy::take_ownership);
}

void bind_dlpack(nb::module_& m) {
  m.def(
      "has_dlpack_exchange_api",
      [](nb::handle type) {
        return PyType_Check(type.ptr()) && dlpack_exchange::api_of_type(type.ptr()) != nullptr;
      },
      nb::arg("type"),
      "Whether tensors of this type cross through DLPack's C exchange API (a version 1.x "
      "table published on the type), as the bridge sees it.");
  nb::class_<DtypeView>(m, "DtypeView",
                        "The bits of a tensor read as another dtype of the same width.")
      .def(
          "__init__",
          [](DtypeView* self, nb::object tensor, const std::string& dtype) {
            new (self) DtypeView{std::move(tensor), dtype_from_name(dtype)};
          },
          nb::arg("tensor"), nb::arg("dtype"),
          "View `tensor` (anything with __dlpack__) as `dtype`, e.g. uint16 bits as 'bfloat16'.")
      .def_prop_ro(
          "dtype", [](const DtypeView& v) { return dtype_name(v.dtype); }, "The dtype read.");

  nb::class_<TensorRef>(m, "TensorRef",
                        "A view into memory a Buffer owns, for numpy.from_dlpack or "
                        "torch.from_dlpack. Valid until the Buffer's next call that produces "
                        "the same output.")
      .def(
          "__dlpack__",
          [](nb::handle self, nb::handle stream, nb::handle max_version, nb::handle dl_device,
             nb::handle copy) {
            (void)stream;  // Courier has finished writing when a call returns.
            (void)max_version;
            (void)dl_device;
            if (!copy.is_none() && nb::cast<bool>(copy)) {
              throw courier::Error("TensorRef.__dlpack__: copy=True is not offered; copy after");
            }
            return TensorRef::export_capsule(self);
          },
          nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("max_version") = nb::none(),
          nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none(),
          "A DLPack capsule of this view (it keeps the view alive).")
      .def(
          "__dlpack_device__",
          [](const TensorRef& ref) {
            return std::make_tuple(static_cast<int>(ref.tensor().device.device_type),
                                   static_cast<int>(ref.tensor().device.device_id));
          },
          "(device type, device id) as DLPack numbers them.")
      .def_prop_ro(
          "shape",
          [](const TensorRef& ref) {
            nb::list shape;
            for (int i = 0; i < ref.tensor().ndim; ++i) shape.append(ref.tensor().shape[i]);
            return nb::tuple(shape);
          },
          "The view's shape.")
      .def_prop_ro(
          "dtype", [](const TensorRef& ref) { return dtype_name(ref.tensor().dtype); },
          "The view's dtype name ('bfloat16', 'float32', 'float8_e4m3fn', 'int64', ...).")
      .def("reinterpret", &TensorRef::reinterpret, nb::arg("dtype"), nb::rv_policy::take_ownership,
           "The same memory as another dtype of the same width (e.g. 'uint16' for bfloat16).");
}

}  // namespace courier::python
