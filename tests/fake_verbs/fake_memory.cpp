// Protection domains and memory regions: access flags validated as the
// kernel does, keys unique and unpredictable per HCA (lkey != rkey, so a
// caller that mixes them up fails), and dmabuf regions mapped from the fd.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fake_hca.hpp"
#include "fake_log.hpp"
#include "fake_verbs_api.hpp"

namespace courier::fake_verbs {
namespace {

constexpr unsigned kModelledAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                     IBV_ACCESS_ON_DEMAND;

Hca* live_hca_of(Context* context, const char* verb) {
  if (context->hca->owner_pid() != ::getpid()) {
    refuse_errno(EINVAL, verb, "the context was opened before fork(); open the device again");
    return nullptr;
  }
  return context->hca.get();
}

// The kernel's checks of the access flags (ib_check_mr_access) plus the
// fake's refusal of what it does not model.
bool access_is_valid(const Profile& profile, unsigned access, const char* verb) {
  // Optional flags (relaxed ordering, ...) are dropped by the kernel when
  // unsupported; the fake ignores them the same way.
  const unsigned mandatory = access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if (mandatory & ~kModelledAccess) {
    refuse_errno(EINVAL, verb,
                 "access flags 0x%x are not modelled (memory windows, zero-based, "
                 "hugetlb)",
                 mandatory & ~kModelledAccess);
    return false;
  }
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    refuse_errno(EINVAL, verb, "remote write or remote atomic access needs IBV_ACCESS_LOCAL_WRITE");
    return false;
  }
  if ((access & IBV_ACCESS_ON_DEMAND) && !profile.on_demand_paging) {
    refuse_errno(EINVAL, verb, "IBV_ACCESS_ON_DEMAND on device profile %s, which has no ODP",
                 profile.name.c_str());
    return false;
  }
  return true;
}

// Whether [address, address + length) is covered by readable and writable
// mappings of this process (/proc/self/maps). Pinning takes the pages with
// write access, so a PROT_NONE reservation, such as the address range of a
// GPU allocation without a peer-memory driver, fails with EFAULT there.
bool range_is_accessible(const void* address, size_t length) {
  uintptr_t at = reinterpret_cast<uintptr_t>(address);
  const uintptr_t end = at + length;
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return true;  // cannot tell: let mincore decide
  char line[512];
  while (at < end && std::fgets(line, sizeof line, maps)) {
    unsigned long low = 0, high = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &low, &high, perms) != 3) continue;
    if (at >= low && at < high) {
      if (perms[0] != 'r' || perms[1] != 'w') break;
      at = high;  // maps lists mappings in address order
    }
  }
  std::fclose(maps);
  return at >= end;
}

// Whether [address, address + length) is mapped: pinning fails otherwise.
bool range_is_mapped(const void* address, size_t length) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(address) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(address) + length;
  constexpr size_t kPagesPerCheck = 1 << 16;
  std::vector<unsigned char> residency(kPagesPerCheck);
  for (uintptr_t at = start; at < end; at += kPagesPerCheck * page) {
    const size_t bytes = std::min<uintptr_t>(end - at, kPagesPerCheck * page);
    if (::mincore(reinterpret_cast<void*>(at), bytes, residency.data()) != 0) return false;
  }
  return true;
}

ibv_mr* register_region(ibv_pd* pd, std::byte* host, size_t length, uint64_t iova, unsigned access,
                        void* mapping, size_t mapping_length, const char* verb) {
  Pd* fake_pd = pd_of(pd);
  Hca* hca = live_hca_of(fake_pd->context, verb);
  if (!hca) return nullptr;
  if (length == 0) {
    refuse_errno(EINVAL, verb, "length 0");
    return nullptr;
  }
  if (length > hca->profile().max_mr_size) {
    refuse_errno(EINVAL, verb, "length %zu exceeds max_mr_size", length);
    return nullptr;
  }
  if (!access_is_valid(hca->profile(), access, verb)) return nullptr;
  if (!(access & IBV_ACCESS_ON_DEMAND) &&
      (!range_is_mapped(host, length) || !range_is_accessible(host, length))) {
    refuse_errno(EFAULT, verb, "[%p, +%zu) is not mapped memory", static_cast<void*>(host), length);
    return nullptr;
  }
  auto mr = std::make_unique<Mr>();
  mr->handle.impl = mr.get();
  mr->pd = fake_pd;
  mr->access = access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  mr->iova = iova;
  mr->length = length;
  mr->host = host;
  mr->mapping = mapping;
  mr->mapping_length = mapping_length;
  std::lock_guard lock(hca->mutex);
  ibv_mr& ibv = mr->handle.ibv;
  ibv.context = pd->context;
  ibv.pd = pd;
  ibv.addr = mapping ? reinterpret_cast<void*>(iova) : host;
  ibv.length = length;
  ibv.lkey = hca->fresh_key();
  ibv.rkey = hca->fresh_key();
  hca->mr_by_lkey[ibv.lkey] = mr.get();
  hca->mr_by_rkey[ibv.rkey] = mr.get();
  ++fake_pd->users;
  Mr* raw = mr.get();
  hca->mrs[raw] = std::move(mr);
  return &raw->handle.ibv;
}

}  // namespace

void release_mr_locked(Hca& hca, Mr& mr) {
  hca.mr_by_lkey.erase(mr.handle.ibv.lkey);
  hca.mr_by_rkey.erase(mr.handle.ibv.rkey);
  --mr.pd->users;
  if (mr.mapping) ::munmap(mr.mapping, mr.mapping_length);
  hca.mrs.erase(&mr);
}

}  // namespace courier::fake_verbs

using namespace courier::fake_verbs;

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  Context* context = context_of(ctx);
  if (!context) {
    refuse_errno(EINVAL, "ibv_alloc_pd", "not a context of the fake device");
    return nullptr;
  }
  Hca* hca = live_hca_of(context, "ibv_alloc_pd");
  if (!hca) return nullptr;
  auto pd = std::make_unique<Pd>();
  pd->handle.impl = pd.get();
  pd->context = context;
  pd->handle.ibv.context = ctx;
  std::lock_guard lock(hca->mutex);
  pd->handle.ibv.handle = hca->fresh_key();
  Pd* raw = pd.get();
  hca->pds[raw] = std::move(pd);
  return &raw->handle.ibv;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  Pd* fake = pd_of(pd);
  Hca& hca = *fake->context->hca;
  std::lock_guard lock(hca.mutex);
  if (fake->users > 0) {
    return refuse(EBUSY, "ibv_dealloc_pd", "%d MRs, QPs or AHs still use the PD", fake->users);
  }
  hca.pds.erase(fake);
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return register_region(pd, static_cast<std::byte*>(addr), length,
                         reinterpret_cast<uintptr_t>(addr), static_cast<unsigned>(access), nullptr,
                         0, "ibv_reg_mr");
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  return register_region(pd, static_cast<std::byte*>(addr), length, iova, access, nullptr, 0,
                         "ibv_reg_mr_iova2");
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                          int access) {
  if (length == 0) {
    refuse_errno(EINVAL, "ibv_reg_dmabuf_mr", "length 0");
    return nullptr;
  }
  // Real dmabufs can be mmap'd; mapping the fd is how the fake reaches the memory.
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t aligned = offset & ~(page - 1);
  const size_t mapping_length = length + (offset - aligned);
  void* mapping = ::mmap(nullptr, mapping_length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                         static_cast<off_t>(aligned));
  if (mapping == MAP_FAILED) {
    const int error = errno;
    refuse_errno(error, "ibv_reg_dmabuf_mr", "cannot map dmabuf fd %d at offset %llu: %s", fd,
                 static_cast<unsigned long long>(offset), std::strerror(error));
    return nullptr;
  }
  ibv_mr* mr =
      register_region(pd, static_cast<std::byte*>(mapping) + (offset - aligned), length, iova,
                      static_cast<unsigned>(access), mapping, mapping_length, "ibv_reg_dmabuf_mr");
  if (!mr) {
    const int error = errno;
    ::munmap(mapping, mapping_length);
    errno = error;
  }
  return mr;
}

int ibv_dereg_mr(ibv_mr* mr) {
  Mr* fake = mr_of(mr);
  Hca& hca = *fake->pd->context->hca;
  std::lock_guard lock(hca.mutex);
  release_mr_locked(hca, *fake);
  return 0;
}

}  // extern "C"
