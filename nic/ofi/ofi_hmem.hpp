// Device memory (FI_HMEM): which of Courier's memory kinds a provider can
// register, and the libfabric interface behind each kind.
//
// A provider that grants FI_HMEM promises the capability in general; which
// device interfaces work depends on how libfabric was built and on what it
// found at run time (Debian's 1.17 grants FI_HMEM over shm with no device
// interface at all). So each interface is tried once, at init, by
// registering a page of host memory under it on a throw-away domain:
// -FI_ENOSYS / -FI_EOPNOTSUPP ("hmem iface not initialized") rules it out;
// anything else (success, or a refusal because host memory is not device
// memory) means the interface is there.
#pragma once

#include <rdma/fi_domain.h>

#include <cstdint>
#include <string>

namespace courier::ofi {

// COURIER_MEM_CUDA / COURIER_MEM_ROCM whose interface registers memory with
// the provider described by `info` (an fi_info that granted FI_HMEM); 0 when
// none does or the domain cannot be opened.
uint32_t device_memory_kinds(const fi_info& info);

// The fi_hmem_iface for exactly one COURIER_MEM_* bit: FI_HMEM_SYSTEM for
// host memory, FI_HMEM_CUDA, FI_HMEM_ROCR. False for any other value.
bool hmem_iface_of(uint32_t mem_kind, fi_hmem_iface* iface);

// "host, cuda, rocm" for a COURIER_MEM_* mask (the kinds this file knows).
std::string describe_memory_kinds(uint32_t mem_kinds);

}  // namespace courier::ofi
