// The device report of a libfabric-based backend (NIC ABI 1.2 describe):
// what the provider granted and what Courier derived from it, for
// courier-info and hardware-validation reports.
#include <rdma/fabric.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ofi_backend.hpp"

namespace courier::ofi {
namespace {

using FlagNames = std::vector<std::pair<uint64_t, const char*>>;

// The named bits of `bits` that `names` knows, then what is left in hex.
// (fi_tostr would do this, but it writes a shared static buffer.)
std::string flag_text(uint64_t bits, const FlagNames& names) {
  std::string text;
  for (const auto& [bit, name] : names) {
    if ((bits & bit) == 0) continue;
    text += (text.empty() ? "" : " ") + std::string(name);
    bits &= ~bit;
  }
  if (bits != 0) {
    char rest[32];
    std::snprintf(rest, sizeof rest, "0x%llx", static_cast<unsigned long long>(bits));
    text += (text.empty() ? "" : " ") + std::string(rest);
  }
  return text.empty() ? "none" : text;
}

const FlagNames kCaps = {
    {FI_MSG, "FI_MSG"},
    {FI_RMA, "FI_RMA"},
    {FI_TAGGED, "FI_TAGGED"},
    {FI_ATOMIC, "FI_ATOMIC"},
    {FI_MULTICAST, "FI_MULTICAST"},
    {FI_COLLECTIVE, "FI_COLLECTIVE"},
    {FI_READ, "FI_READ"},
    {FI_WRITE, "FI_WRITE"},
    {FI_RECV, "FI_RECV"},
    {FI_SEND, "FI_SEND"},
    {FI_REMOTE_READ, "FI_REMOTE_READ"},
    {FI_REMOTE_WRITE, "FI_REMOTE_WRITE"},
    {FI_MULTI_RECV, "FI_MULTI_RECV"},
    {FI_TRIGGER, "FI_TRIGGER"},
    {FI_FENCE, "FI_FENCE"},
    {FI_RMA_EVENT, "FI_RMA_EVENT"},
    {FI_SOURCE, "FI_SOURCE"},
    {FI_HMEM, "FI_HMEM"},
    {FI_AV_USER_ID, "FI_AV_USER_ID"},
    {FI_VARIABLE_MSG, "FI_VARIABLE_MSG"},
    {FI_RMA_PMEM, "FI_RMA_PMEM"},
    {FI_SHARED_AV, "FI_SHARED_AV"},
    {FI_LOCAL_COMM, "FI_LOCAL_COMM"},
    {FI_REMOTE_COMM, "FI_REMOTE_COMM"},
    {FI_NAMED_RX_CTX, "FI_NAMED_RX_CTX"},
    {FI_DIRECTED_RECV, "FI_DIRECTED_RECV"},
};

const FlagNames kMrMode = {
    {FI_MR_LOCAL, "FI_MR_LOCAL"},         {FI_MR_RAW, "FI_MR_RAW"},
    {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
    {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},   {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
    {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
    {FI_MR_HMEM, "FI_MR_HMEM"},
};

const FlagNames kOrder = {
    {FI_ORDER_RAR, "RAR"},
    {FI_ORDER_RAW, "RAW"},
    {FI_ORDER_RAS, "RAS"},
    {FI_ORDER_WAR, "WAR"},
    {FI_ORDER_WAW, "WAW"},
    {FI_ORDER_WAS, "WAS"},
    {FI_ORDER_SAR, "SAR"},
    {FI_ORDER_SAW, "SAW"},
    {FI_ORDER_SAS, "SAS"},
    {FI_ORDER_DATA, "DATA"},
    {FI_ORDER_RMA_RAR, "RMA_RAR"},
    {FI_ORDER_RMA_RAW, "RMA_RAW"},
    {FI_ORDER_RMA_WAR, "RMA_WAR"},
    {FI_ORDER_RMA_WAW, "RMA_WAW"},
    {FI_ORDER_ATOMIC_RAR, "ATOMIC_RAR"},
    {FI_ORDER_ATOMIC_RAW, "ATOMIC_RAW"},
    {FI_ORDER_ATOMIC_WAR, "ATOMIC_WAR"},
    {FI_ORDER_ATOMIC_WAW, "ATOMIC_WAW"},
};

const FlagNames kMemKinds = {
    {COURIER_MEM_HOST, "host"},
    {COURIER_MEM_CUDA, "cuda"},
    {COURIER_MEM_ROCM, "rocm"},
};

const FlagNames kAtomicOps = {
    {COURIER_NIC_ATOMIC_ADD_U64, "add_u64"},
    {COURIER_NIC_ATOMIC_FETCH_ADD_U64, "fetch_add_u64"},
    {COURIER_NIC_ATOMIC_CAS_U64, "cas_u64"},
    {COURIER_NIC_ATOMIC_ADD_U32, "add_u32"},
    {COURIER_NIC_ATOMIC_FETCH_ADD_U32, "fetch_add_u32"},
    {COURIER_NIC_ATOMIC_CAS_U32, "cas_u32"},
};

const char* endpoint_type(int type) {
  switch (type) {
    case FI_EP_RDM:
      return "FI_EP_RDM";
    case FI_EP_MSG:
      return "FI_EP_MSG";
    case FI_EP_DGRAM:
      return "FI_EP_DGRAM";
    default:
      return "other";
  }
}

[[gnu::format(printf, 1, 2)]] std::string format(const char* pattern, ...) {
  char line[512];
  va_list args;
  va_start(args, pattern);
  std::vsnprintf(line, sizeof line, pattern, args);
  va_end(args);
  return line;
}

const char* yes_no(bool value) { return value ? "yes" : "no"; }

}  // namespace

std::string Backend::describe() const {
  const ProviderProfile& p = profile_;
  const fi_info& info = *p.info;
  const uint32_t runtime = fi_version();
  std::string text;
  auto add = [&text](const std::string& line) { text += line + "\n"; };

  add(format("provider: %s (provider version %u.%u), libfabric %u.%u", p.provider_name.c_str(),
             FI_MAJOR(info.fabric_attr->prov_version), FI_MINOR(info.fabric_attr->prov_version),
             FI_MAJOR(runtime), FI_MINOR(runtime)));
  add(format("fabric %s, domain %s, endpoint %s", info.fabric_attr->name, info.domain_attr->name,
             endpoint_type(info.ep_attr->type)));
  add("caps: " + flag_text(info.caps, kCaps));
  add("mr_mode: " + flag_text(p.mr_mode, kMrMode) +
      "; registers memory: " + flag_text(p.mem_kinds, kMemKinds));
  add(
      format("sizes: max message %llu bytes, inject %zu bytes, tx queue %zu, rx queue %zu, "
             "CQ data %zu bytes",
             static_cast<unsigned long long>(p.max_msg_size), info.tx_attr->inject_size,
             info.tx_attr->size, info.rx_attr->size, info.domain_attr->cq_data_size));
  add(format("immediate data for Courier: %u bytes%s", p.imm_bytes,
             p.length_in_data ? " (the write's length travels in the upper 32 bits)" : ""));
  add("message order: " + flag_text(info.tx_attr->msg_order, kOrder) +
      format("; ordered writes claimed: %s; delivery complete: %s",
             yes_no(props_.caps & COURIER_NIC_CAP_ORDERED_WRITES), yes_no(p.delivery_complete)));
  add(format("progress: %s; remote addresses: %s; completions name the source: %s",
             p.auto_progress ? "automatic" : "manual (the target's CQ reads drive it)",
             p.virt_addr ? "virtual" : "offsets", yes_no(p.source)));
  if (!traits_->may_offer_atomics) {
    add("atomics: none offered by this backend (the core emulates them)");
  } else if (!atomic_profile_.atomics) {
    add("atomics: none granted by the provider (the core emulates them)");
  } else {
    std::string line = "atomics: " + flag_text(props_.atomic_ops, kAtomicOps) +
                       "; native: " + flag_text(props_.atomic_native, kAtomicOps);
    if (atomic_profile_.max_in_flight_for_atomics != 0) {
      line += format("; posted with fewer than %u operations in flight",
                     atomic_profile_.max_in_flight_for_atomics);
    }
    add(line);
  }
  add(write_timeout_ms_ == 0 ? std::string("settings: write watchdog off")
                             : format("settings: write watchdog %u s", write_timeout_ms_ / 1000));
  return text;
}

}  // namespace courier::ofi
