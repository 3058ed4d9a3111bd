#include "ofi_info.hpp"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ofi_error.hpp"
#include "ofi_hmem.hpp"

namespace courier::ofi {

const ProviderAlias* find_provider_alias(std::string_view knob_value) {
  // shm: ~0.7 us, ~6 GB/s at 1 MiB. tcp: ~4.5 us, ~280 k writes/s of 7 KiB
  // (~2 GB/s). libfabric 1.17's tcp provider offers FI_EP_RDM only through
  // the ofi_rxm utility layer, hence the layered name. efa: AWS's SRD
  // through the efa provider, FI_EP_RDM natively; ~10 us for small writes
  // and 100 Gb/s per EFA device (p4d, p5), nominal figures, not measured here.
  static constexpr ProviderAlias kAliases[] = {
      {"shm", "shm", 700, 48000},
      {"tcp", "tcp;ofi_rxm", 4500, 16000},
      {"efa", "efa", 10000, 100000},
  };
  for (const ProviderAlias& alias : kAliases) {
    if (knob_value == alias.knob_value) return &alias;
  }
  return nullptr;
}

InfoPtr make_hints(const std::string& prov_name, const FeatureRequest& features) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return hints;

  // One-sided writes, issued here (FI_WRITE) and received (FI_REMOTE_WRITE).
  hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
  if (features.source) hints->caps |= FI_SOURCE;
  if (features.receives) hints->caps |= FI_MSG | FI_RECV;
  if (features.atomics) hints->caps |= FI_ATOMIC | FI_READ | FI_REMOTE_READ;
  if (features.hmem) hints->caps |= FI_HMEM;

  // Modes we are able to honour: every operation carries a context of
  // fi_context2 size (see ofi_context.hpp), and receive buffers can be posted
  // when remote CQ data needs them.
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;

  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = kRequestedMrMode | (features.hmem ? FI_MR_HMEM : 0);
  // FI_AV_TABLE: addresses inserted in rank order get fi_addr == rank.
  hints->domain_attr->av_type = FI_AV_TABLE;
  // Each endpoint gets its own domain and is driven by one thread at a time,
  // so the provider may skip its internal locking.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;

  if (features.delivery_complete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  if (features.ordered_writes) {
    // With atomics, FI_ORDER_RMA_WAW alone orders writes among themselves
    // only; FI_ORDER_WAW orders writes and atomics with each other, which is
    // what write-then-atomic needs.
    const uint64_t order = FI_ORDER_RMA_WAW | (features.atomics ? FI_ORDER_WAW : 0);
    hints->tx_attr->msg_order = order;
    hints->rx_attr->msg_order = order;
  }

  // fi_freeinfo frees prov_name, so it must come from malloc.
  hints->fabric_attr->prov_name = strdup(prov_name.c_str());
  if (!hints->fabric_attr->prov_name) hints.reset();
  return hints;
}

namespace {

// Feature sets from the most to the least wanted: the innermost loop gives
// up its feature first. Delivery-complete matters most because it decides
// what a TX completion means; ordering next because it saves the core
// sequence numbers; FI_SOURCE least because the core can encode the sender
// in the immediate data when it is missing. Ordering is not asked for at all
// where the backend would not claim it.
std::vector<FeatureRequest> attempts(bool atomics, bool ordering_wanted) {
  std::vector<FeatureRequest> ladder;
  for (bool delivery_complete : {true, false}) {
    for (bool ordered_writes : {true, false}) {
      if (ordered_writes && !ordering_wanted) continue;
      for (bool source : {true, false}) {
        ladder.push_back({delivery_complete, ordered_writes, source, false, atomics});
      }
    }
  }
  return ladder;
}

// Whether fi_info `i` is on `device`: its domain is the device (`exact`), or
// the device with a suffix (efa names domains "<device>-rdm" and "-dgrm").
bool on_device(const fi_info& i, const std::string& device, bool exact) {
  const char* domain = i.domain_attr && i.domain_attr->name ? i.domain_attr->name : "";
  const std::string_view name(domain);
  if (exact) return name == device;
  return name.starts_with(device) && name.size() > device.size() && name[device.size()] == '-';
}

int getinfo(const std::string& prov_name, const FeatureRequest& features,
            const ProbeOptions& options, InfoPtr* out) {
  InfoPtr hints = make_hints(prov_name, features);
  if (!hints) return -FI_ENOMEM;
  fi_info* list = nullptr;
  const int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints.get(), &list);
  if (rc != 0) return rc;
  InfoPtr all(list);
  // The first entry is the provider's preferred one (for tcp: the first
  // interface, IPv4 before IPv6), unless a preferred device is listed.
  const fi_info* chosen = nullptr;
  for (const std::string& device : options.devices) {
    // The exact name first: over tcp the domains are network interfaces, and
    // "eth0" must not pick "eth0-backup" listed before it.
    for (bool exact : {true, false}) {
      for (const fi_info* i = all.get(); i && !chosen; i = i->next) {
        if (on_device(*i, device, exact)) chosen = i;
      }
    }
    if (chosen) break;
  }
  if (!chosen && options.device_required && !options.devices.empty()) {
    std::string domains;
    for (const fi_info* i = all.get(); i; i = i->next) {
      const char* name = i->domain_attr && i->domain_attr->name ? i->domain_attr->name : "?";
      if (domains.find(name) == std::string::npos)
        domains += (domains.empty() ? "" : ", ") + std::string(name);
    }
    set_error(-ENODEV, "no device %s among the provider's domains (%s)",
              options.devices.front().c_str(), domains.c_str());
    return -FI_ENODEV;
  }
  if (!chosen) chosen = all.get();
  out->reset(fi_dupinfo(chosen));  // one entry (fi_dupinfo never copies `next`)
  return *out ? 0 : -FI_ENOMEM;
}

bool has_order(uint64_t order, bool atomics) {
  const uint64_t needed = FI_ORDER_RMA_WAW | (atomics ? FI_ORDER_WAW : 0);
  return (order & needed) == needed;
}

// Whether the provider fills fi_cq_data_entry::len for incoming writes with
// remote CQ data. fi_info does not say; the conformance suite found that shm
// does and tcp;ofi_rxm reports 0. Providers not known to report it are
// treated as not reporting it, which is always correct, only narrower.
bool reports_remote_write_length(const char* prov_name) {
  return prov_name && std::strcmp(prov_name, "shm") == 0;
}

// How many operations may be in flight on an endpoint when an atomic is
// posted. fi_info does not say; the conformance suite found that shm 1.17
// applies concurrent atomics wrongly (2000 concurrent ADDs do not sum
// exactly, concurrent FETCH_ADDs return garbled old values; seen with limits
// of 8 and 32, intermittently), and exactly when each atomic is posted alone.
// So on shm an atomic waits until nothing else is in flight. 0: no limit.
uint32_t atomic_in_flight_limit(const char* prov_name) {
  return prov_name && std::strcmp(prov_name, "shm") == 0 ? 1 : 0;
}

// Asks again with FI_HMEM added to `granted`. Keeps the answer (and returns
// the device memory kinds) only when the provider grants FI_HMEM and at
// least one device interface registers memory; otherwise the host-only
// answer stays, and with it the path the provider tunes for host memory.
uint32_t try_device_memory(const std::string& prov_name, const ProbeOptions& options,
                           FeatureRequest* granted, InfoPtr* info) {
  FeatureRequest with_hmem = *granted;
  with_hmem.hmem = true;
  InfoPtr hmem_info;
  if (getinfo(prov_name, with_hmem, options, &hmem_info) != 0 || !(hmem_info->caps & FI_HMEM)) {
    return 0;
  }
  const uint32_t kinds = device_memory_kinds(*hmem_info);
  if (kinds == 0) return 0;
  *granted = with_hmem;
  *info = std::move(hmem_info);
  return kinds;
}

int probe(const std::string& prov_name, bool atomics, const ProbeOptions& options,
          ProviderProfile* out) {
  InfoPtr info;
  FeatureRequest granted;
  int rc = -FI_ENODATA;
  for (const FeatureRequest& attempt : attempts(atomics, options.ordered_writes)) {
    rc = getinfo(prov_name, attempt, options, &info);
    if (rc == 0) {
      granted = attempt;
      break;
    }
    if (rc == -FI_ENODEV) return -ENODEV;  // the named device is not there (last_error says)
  }
  if (rc != 0) {
    return set_error(to_errno(rc), "provider '%s' not available%s: %s", prov_name.c_str(),
                     atomics ? " with FI_ATOMIC" : "", describe_fi_error("fi_getinfo", rc).c_str());
  }
  uint32_t device_kinds = 0;
  if (options.device_memory) device_kinds = try_device_memory(prov_name, options, &granted, &info);

  // FI_RX_CQ_DATA: remote CQ data is only delivered into posted receive
  // buffers. Posting receives needs FI_MSG|FI_RECV, which the first round did
  // not ask for (no provider here needs it, and asking for more than needed
  // can select a slower path), so ask again with them.
  if (info->mode & FI_RX_CQ_DATA) {
    granted.receives = true;
    rc = getinfo(prov_name, granted, options, &info);
    if (rc != 0) {
      return set_error(to_errno(rc),
                       "provider '%s' requires FI_RX_CQ_DATA but cannot post receives: %s",
                       prov_name.c_str(), describe_fi_error("fi_getinfo", rc).c_str());
    }
  }

  ProviderProfile profile;
  const fi_info& i = *info;
  // A TX completion means "visible in remote memory" only with
  // FI_DELIVERY_COMPLETE; without it the provider may complete once the data
  // left the local buffer (transmit-complete).
  profile.delivery_complete =
      granted.delivery_complete && (i.tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
  // Write-after-write ordering must hold on both sides and for every size we
  // allow (max_order_waw_size bounds the ordered message size).
  // With atomics the orders asked for include FI_ORDER_WAW (writes and
  // atomics with each other); tcp;ofi_rxm cannot grant it and, once FI_ATOMIC
  // is in the caps, reports max_order_waw_size 0 even for RMA writes.
  profile.ordered_writes = granted.ordered_writes && has_order(i.tx_attr->msg_order, atomics) &&
                           has_order(i.rx_attr->msg_order, atomics) &&
                           i.ep_attr->max_order_waw_size >= i.ep_attr->max_msg_size;
  profile.source = (i.caps & FI_SOURCE) != 0;
  profile.rx_cq_data = (i.mode & FI_RX_CQ_DATA) != 0;
  profile.mr_mode = i.domain_attr->mr_mode;
  profile.virt_addr = (profile.mr_mode & FI_MR_VIRT_ADDR) != 0;
  // shm and tcp;ofi_rxm move data only inside fi_cq_read on both sides
  // (FI_PROGRESS_MANUAL): the target's proxy must keep reading its CQ.
  profile.auto_progress = i.domain_attr->data_progress == FI_PROGRESS_AUTO;
  const size_t cq_data_size = std::min<size_t>(i.domain_attr->cq_data_size, 8);
  profile.length_in_data =
      !reports_remote_write_length(i.fabric_attr->prov_name) && cq_data_size >= 8;
  // Courier's own encodings use 32 bits of immediate data (DESIGN.md), so
  // giving up the upper half for the length costs nothing.
  profile.imm_bytes = profile.length_in_data ? 4 : static_cast<uint32_t>(cq_data_size);
  profile.imm_bytes = std::min(profile.imm_bytes, options.max_imm_bytes);
  profile.mem_kinds = COURIER_MEM_HOST | device_kinds;
  profile.max_msg_size = i.ep_attr->max_msg_size;
  profile.provider_name = i.fabric_attr->prov_name ? i.fabric_attr->prov_name : prov_name;
  profile.atomics = (i.caps & FI_ATOMIC) != 0;
  if (profile.atomics)
    profile.max_in_flight_for_atomics = atomic_in_flight_limit(i.fabric_attr->prov_name);
  profile.info = std::move(info);
  *out = std::move(profile);
  return 0;
}

}  // namespace

int probe_provider(const std::string& prov_name, ProviderProfile* out,
                   const ProbeOptions& options) {
  return probe(prov_name, false, options, out);
}

int probe_atomic_provider(const std::string& prov_name, ProviderProfile* out,
                          const ProbeOptions& options) {
  return probe(prov_name, true, options, out);
}

bool has_utility_layer(std::string_view prov_name) {
  while (!prov_name.empty()) {
    const size_t end = std::min(prov_name.find(';'), prov_name.size());
    if (prov_name.substr(0, end).starts_with("ofi_")) return true;
    prov_name.remove_prefix(std::min(end + 1, prov_name.size()));
  }
  return false;
}

std::string describe_profile(const ProviderProfile& p) {
  char mr_mode[256] = "";
  fi_tostr_r(mr_mode, sizeof mr_mode, &p.mr_mode, FI_TYPE_MR_MODE);
  std::string text = "provider " + p.provider_name + " (domain " +
                     (p.info->domain_attr->name ? p.info->domain_attr->name : "?") +
                     "): mr_mode [" + mr_mode + "]";
  text += ", delivery-complete ";
  text += p.delivery_complete ? "yes" : "no";
  text += ", RMA WAW ordering ";
  text += p.ordered_writes ? "yes" : "no";
  text += ", FI_SOURCE ";
  text += p.source ? "yes" : "no";
  text += ", FI_RX_CQ_DATA ";
  text += p.rx_cq_data ? "yes" : "no";
  text += ", immediate data " + std::to_string(p.imm_bytes) + " bytes";
  if (p.length_in_data) text += " (length carried in the upper 32 bits)";
  if (p.mem_kinds != COURIER_MEM_HOST) text += ", FI_HMEM " + describe_memory_kinds(p.mem_kinds);
  if (p.atomics) {
    char ops[16];
    std::snprintf(ops, sizeof ops, "0x%x", p.atomic_ops);
    text += ", FI_ATOMIC ops ";
    text += ops;
    text += has_utility_layer(p.provider_name) ? " (emulated by a utility layer)" : " (native)";
  }
  return text;
}

bool atomics_trusted(const std::string& prov_name) { return prov_name != "shm"; }

}  // namespace courier::ofi
