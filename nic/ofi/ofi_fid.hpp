// RAII ownership of libfabric objects.
//
// Every libfabric object (fabric, domain, address vector, completion queue,
// endpoint, memory region) is a struct whose first member is a `struct fid`
// closed with fi_close(). FidHandle<T> owns one such object and closes it when
// it goes out of scope, so an error half-way through building an endpoint
// never leaks what was already opened. Declare handles in creation order:
// C++ destroys members in reverse, which is the order libfabric needs (an
// endpoint before its completion queue, everything before its domain).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <memory>
#include <utility>

namespace courier::ofi {

template <typename T>
class FidHandle {
 public:
  FidHandle() = default;
  explicit FidHandle(T* object) : object_(object) {}
  ~FidHandle() { close(); }

  FidHandle(const FidHandle&) = delete;
  FidHandle& operator=(const FidHandle&) = delete;
  FidHandle(FidHandle&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
  FidHandle& operator=(FidHandle&& other) noexcept {
    if (this != &other) {
      close();
      object_ = std::exchange(other.object_, nullptr);
    }
    return *this;
  }

  T* get() const { return object_; }
  fid* as_fid() const { return object_ ? &object_->fid : nullptr; }
  explicit operator bool() const { return object_ != nullptr; }

  // For libfabric's out-parameters: fi_domain(fabric, info, handle.out(), ctx).
  T** out() {
    close();
    return &object_;
  }

  // Closes now and returns fi_close's status (destructors ignore it).
  int close() {
    if (!object_) return 0;
    const int rc = fi_close(&object_->fid);
    object_ = nullptr;
    return rc;
  }

 private:
  T* object_ = nullptr;
};

using FabricHandle = FidHandle<fid_fabric>;
using DomainHandle = FidHandle<fid_domain>;
using AvHandle = FidHandle<fid_av>;
using CqHandle = FidHandle<fid_cq>;
using EpHandle = FidHandle<fid_ep>;
using MrHandle = FidHandle<fid_mr>;

// fi_info lists are freed with fi_freeinfo, not fi_close.
struct InfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

}  // namespace courier::ofi
