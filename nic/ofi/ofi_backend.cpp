#include "ofi_backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>

#include "ofi_ep.hpp"
#include "ofi_error.hpp"
#include "ofi_fabric.hpp"

namespace courier::ofi {
namespace {

// Whether `value` is one of the '|'-separated words of `allowed`.
bool is_allowed(std::string_view allowed, std::string_view value) {
  while (true) {
    const size_t bar = allowed.find('|');
    if (allowed.substr(0, bar) == value) return true;
    if (bar == std::string_view::npos) return false;
    allowed.remove_prefix(bar + 1);
  }
}

// The capability bits a profile lets an endpoint promise.
uint32_t caps_of(const ProviderProfile& p) {
  uint32_t caps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_LOOPBACK;  // see may_claim_loopback
  if (p.imm_bytes > 0) caps |= COURIER_NIC_CAP_WRITE_IMM;
  // The sender comes from FI_SOURCE, or from the CQ data where the provider
  // reports no length (and no reliable source either): see ofi_rma.cpp.
  if (p.imm_bytes > 0 && (p.source || p.length_in_data)) caps |= COURIER_NIC_CAP_IMM_SOURCE;
  if (p.ordered_writes) caps |= COURIER_NIC_CAP_ORDERED_WRITES;
  if (p.delivery_complete) caps |= COURIER_NIC_CAP_DELIVERY_COMPLETE;
  if (p.auto_progress) caps |= COURIER_NIC_CAP_PASSIVE_TARGET;
  return caps;
}

}  // namespace

// The knob: whole seconds, 0 (watchdog off) to one day.
int Backend::parse_write_timeout(const char* value) {
  if (!value || !*value) value = kWriteTimeoutDefault;
  char* end = nullptr;
  errno = 0;
  const unsigned long seconds = std::strtoul(value, &end, 10);
  if (errno != 0 || *end != '\0' || value[0] == '-' || seconds > 86400) {
    return set_error(-EINVAL, "%s='%s' is not valid: expected whole seconds from 0 (off) to 86400",
                     traits_->write_timeout_knob, value);
  }
  write_timeout_ms_ = static_cast<uint32_t>(seconds * 1000);
  return 0;
}

int Backend::probe_atomics(const std::string& prov_name, const ProbeOptions& options) {
  ProviderProfile profile;
  if (probe_atomic_provider(prov_name, &profile, options) != 0 || !profile.atomics) {
    // No atomics is not a failure of the backend: it offers writes only.
    log(COURIER_LOG_INFO, ("no transport atomics: " + last_error()).c_str());
    return 0;
  }
  const int rc = probe_atomic_ops(&profile);
  if (rc != 0) {
    log(COURIER_LOG_INFO, ("no transport atomics: " + last_error()).c_str());
    return 0;
  }
  if (profile.atomic_ops == 0) return 0;
  if (!atomics_trusted(profile.provider_name)) {
    log(COURIER_LOG_INFO, ("no transport atomics: provider " + profile.provider_name +
                           " applies concurrent atomics wrongly (docs/nic-ofi.md)")
                              .c_str());
    return 0;
  }

  courier_nic_props_v1& props = props_;
  props.atomic_ops = profile.atomic_ops;
  // A utility layer (tcp;ofi_rxm) carries atomics as messages and applies
  // them in software at the target; a provider without one executes them
  // itself (shm applies them to the mapped memory of the target).
  props.atomic_native = has_utility_layer(profile.provider_name) ? 0 : profile.atomic_ops;
  uint32_t caps = caps_of(profile);
  if (!traits_->may_claim_ordered_writes) caps &= ~COURIER_NIC_CAP_ORDERED_WRITES;
  if (!traits_->may_claim_loopback) caps &= ~COURIER_NIC_CAP_LOOPBACK;
  if (traits_->may_claim_cheap_registration) caps |= COURIER_NIC_CAP_CHEAP_REGISTRATION;
  // The immediate-data width is one property for both kinds of endpoints;
  // should FI_ATOMIC ever change it, atomic endpoints claim none rather than
  // a wrong width.
  if (profile.imm_bytes != profile_.imm_bytes ||
      profile.length_in_data != profile_.length_in_data) {
    caps &= ~(COURIER_NIC_CAP_WRITE_IMM | COURIER_NIC_CAP_IMM_SOURCE);
  }
  // The core relies on a TX completion meaning "applied at the target"; an
  // atomic endpoint without delivery-complete cannot promise that for its
  // atomics (fetching ones complete after the result came back anyway, plain
  // ADDs would not), so its non-fetching ops are not offered.
  if (!profile.delivery_complete) {
    props.atomic_ops &= ~(COURIER_NIC_ATOMIC_ADD_U64 | COURIER_NIC_ATOMIC_ADD_U32);
    props.atomic_native &= props.atomic_ops;
  }
  props.caps_with_atomics = caps;
  atomic_profile_ = std::move(profile);
  atomic_profile_.atomic_ops = props.atomic_ops;
  return 0;
}

int Backend::create(const BackendTraits& traits, const courier_host_services_v1* host,
                    std::unique_ptr<Backend>* out) {
  // Entries after `free` came later (COURIER_HOST_HAS): an older core's
  // shorter table is fine.
  if (!host || host->struct_size < offsetof(courier_host_services_v1, free) + sizeof host->free ||
      !host->get_env) {
    return set_error(-EINVAL, "init: host services missing or too old");
  }
  const char* value = host->get_env(host->ctx, traits.provider_knob);
  if (!value || !*value) value = traits.provider_default;

  const ProviderAlias* choice = find_provider_alias(value);
  if (!choice || !is_allowed(traits.provider_allowed, value)) {
    return set_error(-EINVAL, "%s='%s' is not valid: allowed values are %s", traits.provider_knob,
                     value, traits.provider_allowed);
  }
  const bool stand_in = traits.hardware_value && std::strcmp(value, traits.hardware_value) != 0;

  std::unique_ptr<Backend> backend(new (std::nothrow) Backend(traits));
  if (!backend) return set_error(-ENOMEM, "init: out of memory");
  backend->host_ = host;
  int rc = backend->parse_write_timeout(host->get_env(host->ctx, traits.write_timeout_knob));
  if (rc != 0) return rc;

  ProbeOptions options;
  options.ordered_writes = traits.may_claim_ordered_writes;
  options.device_memory = traits.device_memory;
  options.max_imm_bytes = traits.max_imm_bytes;
  const char* device = traits.device_knob ? host->get_env(host->ctx, traits.device_knob) : nullptr;
  if (device && *device) {
    options.devices.emplace_back(device);
    options.device_required = true;
  } else if (traits.device_knob && !stand_in) {
    // Topology's pairing (derived by the core), nearest NIC first.
    const char* paired = host->get_env(host->ctx, "COURIER_PAIRED_NICS");
    for (std::string_view rest = paired ? paired : ""; !rest.empty();) {
      const size_t comma = std::min(rest.find(','), rest.size());
      if (comma > 0) options.devices.emplace_back(rest.substr(0, comma));
      rest.remove_prefix(std::min(comma + 1, rest.size()));
    }
  }
  rc = probe_provider(choice->prov_name, &backend->profile_, options);
  if (rc == -ENODEV) {
    const std::string reason = last_error();
    return set_error(rc, "%s=%s: %s (%s=%s)", traits.device_knob, device, reason.c_str(),
                     traits.provider_knob, value);
  }
  if (rc != 0 && rc == -ENODATA && traits.hardware_value && !stand_in) {
    // The provider of the plugin's own hardware is absent: say which, why
    // that usually is, and which knob value asked for it.
    const uint32_t version = fi_version();
    return set_error(rc, "libfabric provider '%s' not found: %s (libfabric %u.%u; %s) (%s=%s)",
                     choice->prov_name, traits.hardware_missing, FI_MAJOR(version),
                     FI_MINOR(version), describe_fi_error("fi_getinfo", rc).c_str(),
                     traits.provider_knob, value);
  }
  if (rc != 0) {
    // Keep the probe's reason and say which knob value led there.
    const std::string reason = last_error();
    return set_error(rc, "%s (%s=%s)", reason.c_str(), traits.provider_knob, value);
  }

  const ProviderProfile& p = backend->profile_;
  courier_nic_props_v1& props = backend->props_;
  props.struct_size = sizeof props;
  props.caps = caps_of(p);
  if (!traits.may_claim_ordered_writes) props.caps &= ~COURIER_NIC_CAP_ORDERED_WRITES;
  if (!traits.may_claim_loopback) props.caps &= ~COURIER_NIC_CAP_LOOPBACK;
  if (traits.may_claim_cheap_registration) props.caps |= COURIER_NIC_CAP_CHEAP_REGISTRATION;
  // Replaced by probe_atomics below when the provider has atomics.
  props.atomic_ops = 0;
  props.atomic_native = 0;
  props.caps_with_atomics = props.caps;
  props.imm_bytes = p.imm_bytes;
  props.mem_kinds = p.mem_kinds;
  props.max_msg_size = p.max_msg_size;
  props.max_ep_name = kMaxNameBytes;
  props.latency_ns = choice->latency_ns;
  props.bandwidth_mbps = choice->bandwidth_mbps;
  if (stand_in) {
    // Whoever reads props.device (courier-info, logs, the conformance
    // suite) must see that this is not the hardware.
    std::snprintf(props.device, sizeof props.device, "%s (%s: test stand-in, not %s)",
                  p.provider_name.c_str(), traits.provider_knob, traits.hardware_name);
  } else if (traits.device_knob && p.info->domain_attr && p.info->domain_attr->name) {
    // A NIC provider: say which device (domain) this backend drives.
    std::snprintf(props.device, sizeof props.device, "%s %s", p.provider_name.c_str(),
                  p.info->domain_attr->name);
  } else {
    std::snprintf(props.device, sizeof props.device, "%s", p.provider_name.c_str());
  }
  // libfabric's fi_info names no PCI device for software transports; for a
  // NIC provider (efa) nic_attr could, but topology pairs by the driver.
  props.pci_address[0] = '\0';

  if (traits.may_offer_atomics) {
    // Where the write path's endpoints open (the domain it chose, required
    // when the user named one).
    ProbeOptions atomic_options;
    atomic_options.device_required = options.device_required;
    const fi_info& chosen = *p.info;
    if (chosen.domain_attr && chosen.domain_attr->name) {
      atomic_options.devices.emplace_back(chosen.domain_attr->name);
    }
    rc = backend->probe_atomics(choice->prov_name, atomic_options);
    if (rc != 0) return rc;
  }

  if (stand_in) {
    const std::string warning = std::string(traits.provider_knob) + "=" + value + ": nic-" +
                                traits.name + " runs over libfabric provider " + p.provider_name +
                                " as a test stand-in, not on " + traits.hardware_name +
                                " hardware; what only the hardware shows (its reordering, "
                                "device memory, enforced MR modes) is not exercised";
    backend->log(COURIER_LOG_WARN, warning.c_str());
  }
  backend->log(COURIER_LOG_INFO, describe_profile(p).c_str());
  if (p.provider_name == "shm") backend->remove_stale_regions();
  if (backend->atomic_profile_.atomics) {
    backend->log(COURIER_LOG_INFO,
                 ("atomic endpoints: " + describe_profile(backend->atomic_profile_)).c_str());
  }
  *out = std::move(backend);
  return 0;
}

int Backend::query(courier_nic_props_v1* props) const {
  if (!props) return set_error(-EINVAL, "query: NULL props");
  const uint32_t caller_size = props->struct_size;
  if (caller_size < offsetof(courier_nic_props_v1, caps)) {
    return set_error(-EINVAL, "query: props->struct_size %u is too small", caller_size);
  }
  // Copy only what the caller's struct has room for (an older core has a
  // shorter struct), and keep its struct_size.
  std::memcpy(props, &props_, std::min<size_t>(caller_size, sizeof props_));
  props->struct_size = caller_size;
  return 0;
}

int Backend::open_endpoint(const courier_nic_ep_attr_v1& attr,
                           std::unique_ptr<Endpoint>* out) const {
  EndpointOptions options;
  options.atomics = (attr.flags & COURIER_NIC_EP_ATOMICS) != 0;
  options.tx_depth = attr.tx_depth;
  options.rx_depth = attr.rx_depth;
  options.write_timeout_ms = write_timeout_ms_;
  // Atomic endpoints open from their own profile: requesting FI_ATOMIC can
  // change what the provider grants, and the write-only path stays as tuned.
  return Endpoint::open(options.atomics ? atomic_profile_ : profile_, options, out);
}

void Backend::remove_stale_regions() const {
  const StaleRegions stale = remove_stale_shm_regions();
  for (const StaleRegions::Removed& region : stale.removed) {
    log(COURIER_LOG_INFO, ("removed " + region.path + ": a stale shm region of process " +
                           std::to_string(region.owner) + ", which no longer exists")
                              .c_str());
  }
  for (const std::string& failure : stale.failed) {
    log(COURIER_LOG_INFO, ("cannot remove a stale shm region: " + failure).c_str());
  }
}

void Backend::log(int level, const char* message) const {
  if (host_ && host_->log) host_->log(host_->ctx, level, traits_->name, message);
}

}  // namespace courier::ofi
