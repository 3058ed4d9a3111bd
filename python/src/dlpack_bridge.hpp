// Tensors across the Python boundary as DLPack, without copies.
//
// In: any object with __dlpack__ (numpy >= 1.22, torch, cupy, ...) is read
// through its capsule; ImportedTensor keeps the producer's tensor alive for
// the duration of one call. A DtypeView reinterprets the bits of such an
// object as another dtype of the same width (numpy has no bfloat16 or FP8
// of its own: courier.deep_ep passes ml_dtypes arrays as uint16/uint8 bits).
//
// Out: a TensorRef is a view into memory a Buffer owns, exported through
// __dlpack__ / __dlpack_device__; every consumer array holds a reference to
// it, and it holds one to its owner, so the memory outlives the arrays.
#pragma once

#include <dlpack/dlpack.h>
#include <nanobind/nanobind.h>

#include <atomic>
#include <memory>
#include <string>

#include "courier/ep.hpp"
#include "python/src/dlpack_exchange.hpp"

namespace courier::python {

// A C exchange API function failed: throws courier::Error "<what>", with
// the Python exception the producer set (if any) appended, which is cleared.
[[noreturn]] void throw_exchange_failure(const std::string& what);

// "bfloat16", "float32", "float8_e4m3fn", "int64", "int32", "uint8", "bool", ...
std::string dtype_name(const DLDataType& dtype);
DLDataType dtype_from_name(const std::string& name);

// Another dtype of the same width for the bits of `tensor`.
struct DtypeView {
  nanobind::object tensor;
  DLDataType dtype{};
};

class ImportedTensor {
 public:
  ImportedTensor() = default;
  // None gives an empty ImportedTensor (get() is nullptr). Anything else
  // must publish DLPack's C exchange API on its type (torch.Tensor), offer
  // __dlpack__, or be a DLPack capsule (or a DtypeView of one of those);
  // `name` names the argument in errors. Needs the GIL.
  ImportedTensor(nanobind::handle object, const char* name);
  ImportedTensor(ImportedTensor&& other) noexcept;
  ImportedTensor& operator=(ImportedTensor&& other) noexcept;
  ImportedTensor(const ImportedTensor&) = delete;
  ImportedTensor& operator=(const ImportedTensor&) = delete;
  // Returns the tensor to its producer; needs the GIL.
  ~ImportedTensor();

  const DLTensor* get() const {
    return managed_ != nullptr || versioned_ != nullptr ? &tensor_ : nullptr;
  }
  // The producer's C exchange API it came through, or null.
  const dlpack_exchange::Api* exchange_api() const { return api_; }
  // Whether Courier may write into it: not flagged read-only or a copy.
  bool writable() const {
    return versioned_ == nullptr || (versioned_->flags & (dlpack_exchange::kReadOnlyFlag |
                                                          dlpack_exchange::kIsCopiedFlag)) == 0;
  }

 private:
  void release();
  // The bits as `view`'s dtype (none: unchanged); releases and throws if
  // the widths differ.
  void reinterpret(const DtypeView* view, const char* name);
  void map_dlpack1_dtype();
  DLManagedTensor* managed_ = nullptr;  // from a capsule
  // From the producer's C exchange API (dlpack_exchange.hpp).
  dlpack_exchange::ManagedTensor* versioned_ = nullptr;
  const dlpack_exchange::Api* api_ = nullptr;
  DLTensor tensor_{};
};

// A tensor allocated by the framework that published `api` (torch: its
// caching allocator, for its current stream) with the shape, dtype and
// device of `like`, row-major, for Courier to fill and hand to Python as
// the framework's own tensor: results the caller owns, without a Python
// call per result. Needs the GIL.
class AllocatedTensor {
 public:
  AllocatedTensor(const dlpack_exchange::Api& api, const DLTensor& like, const std::string& name);
  AllocatedTensor(const AllocatedTensor&) = delete;
  AllocatedTensor& operator=(const AllocatedTensor&) = delete;
  ~AllocatedTensor();  // frees it unless handed to Python

  // In Courier's dtypes (FP8 as DLPack 0.6's float 8).
  const DLTensor& get() const { return tensor_; }
  // The framework's tensor object; this no longer owns it.
  nanobind::object to_python();

 private:
  const dlpack_exchange::Api& api_;
  dlpack_exchange::ManagedTensor* managed_ = nullptr;
  std::string name_;
  DLTensor tensor_{};
};

// Counts a Buffer's result views that are still alive, so that closing the
// Buffer while arrays still point into its memory is refused.
using LiveViews = std::shared_ptr<std::atomic<int>>;

class TensorRef {
 public:
  TensorRef(const ep::TensorView& view, nanobind::object owner, LiveViews live);
  TensorRef(const TensorRef&) = delete;
  TensorRef& operator=(const TensorRef&) = delete;
  ~TensorRef();

  const DLTensor& tensor() const { return view_.tensor(); }
  // The same memory as `dtype` (same width in bits).
  TensorRef* reinterpret(const std::string& dtype) const;
  // A capsule "dltensor" whose deleter drops a reference to `self`.
  static nanobind::object export_capsule(nanobind::handle self);

 private:
  ep::TensorView view_;
  nanobind::object owner_;
  LiveViews live_;
};

// None when the view has no tensor (an output the call did not produce),
// else a new TensorRef owned by Python.
nanobind::object make_tensor_ref(const ep::TensorView& view, nanobind::handle owner,
                                 const LiveViews& live);

}  // namespace courier::python
