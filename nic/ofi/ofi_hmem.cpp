#include "ofi_hmem.hpp"

#include <courier/abi/plugin_header.h>
#include <rdma/fi_errno.h>
#include <sys/uio.h>

#include <vector>

#include "ofi_fid.hpp"
#include "ofi_mr.hpp"

namespace courier::ofi {
namespace {

struct DeviceKind {
  uint32_t mem_kind;
  fi_hmem_iface iface;
  const char* name;
};
constexpr DeviceKind kKinds[] = {
    {COURIER_MEM_HOST, FI_HMEM_SYSTEM, "host"},
    {COURIER_MEM_CUDA, FI_HMEM_CUDA, "cuda"},
    {COURIER_MEM_ROCM, FI_HMEM_ROCR, "rocm"},
};

}  // namespace

uint32_t device_memory_kinds(const fi_info& info) {
  FabricHandle fabric;
  DomainHandle domain;
  if (fi_fabric(info.fabric_attr, fabric.out(), nullptr) != 0) return 0;
  // fi_domain takes a non-const fi_info but does not change it.
  if (fi_domain(fabric.get(), const_cast<fi_info*>(&info), domain.out(), nullptr) != 0) return 0;

  std::vector<unsigned char> page(4096);
  iovec iov{page.data(), page.size()};
  uint32_t kinds = 0;
  // Keys as every domain asks for them (ofi_mr.hpp), though these regions
  // close on return.
  RequestedKeys requested_keys(info);
  for (const DeviceKind& kind : kKinds) {
    if (kind.iface == FI_HMEM_SYSTEM) continue;
    fi_mr_attr attr{};
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = FI_WRITE | FI_REMOTE_WRITE;
    attr.requested_key = requested_keys.next();
    attr.iface = kind.iface;
    MrHandle mr;
    const int rc = fi_mr_regattr(domain.get(), &attr, 0, mr.out());
    if (rc != -FI_ENOSYS && rc != -FI_EOPNOTSUPP) kinds |= kind.mem_kind;
  }
  return kinds;
}

bool hmem_iface_of(uint32_t mem_kind, fi_hmem_iface* iface) {
  for (const DeviceKind& kind : kKinds) {
    if (kind.mem_kind == mem_kind) {
      *iface = kind.iface;
      return true;
    }
  }
  return false;
}

std::string describe_memory_kinds(uint32_t mem_kinds) {
  std::string text;
  for (const DeviceKind& kind : kKinds) {
    if (!(mem_kinds & kind.mem_kind)) continue;
    if (!text.empty()) text += ", ";
    text += kind.name;
  }
  return text.empty() ? "none" : text;
}

}  // namespace courier::ofi
