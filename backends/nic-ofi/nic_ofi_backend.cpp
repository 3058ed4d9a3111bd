#include "nic_ofi_backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "nic/ofi/ofi_error.hpp"
#include "nic/ofi/ofi_fabric.hpp"

namespace courier::nic_ofi {
namespace {

// COURIER_OFI_WRITE_TIMEOUT_S: whole seconds, 0 (watchdog off) to one day.
int parse_write_timeout(const char* value, uint32_t* timeout_ms) {
  if (!value || !*value) value = kWriteTimeoutDefault;
  char* end = nullptr;
  errno = 0;
  const unsigned long seconds = std::strtoul(value, &end, 10);
  if (errno != 0 || *end != '\0' || value[0] == '-' || seconds > 86400) {
    return ofi::set_error(-EINVAL,
                          "%s='%s' is not valid: expected whole seconds from 0 (off) to 86400",
                          kWriteTimeoutKnob, value);
  }
  *timeout_ms = static_cast<uint32_t>(seconds * 1000);
  return 0;
}

// The capability bits a profile lets an endpoint promise.
uint32_t caps_of(const ofi::ProviderProfile& p) {
  uint32_t caps = COURIER_NIC_CAP_RMA_WRITE;
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

int Backend::probe_atomics(const std::string& prov_name) {
  ofi::ProviderProfile profile;
  if (ofi::probe_atomic_provider(prov_name, &profile) != 0 || !profile.atomics) {
    // No atomics is not a failure of the backend: it offers writes only.
    log(COURIER_LOG_INFO, ("no transport atomics: " + ofi::last_error()).c_str());
    return 0;
  }
  const int rc = ofi::probe_atomic_ops(&profile);
  if (rc != 0) {
    log(COURIER_LOG_INFO, ("no transport atomics: " + ofi::last_error()).c_str());
    return 0;
  }
  if (profile.atomic_ops == 0) return 0;
  if (!ofi::atomics_trusted(profile.provider_name)) {
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
  props.atomic_native = ofi::has_utility_layer(profile.provider_name) ? 0 : profile.atomic_ops;
  uint32_t caps = caps_of(profile);
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

int Backend::create(const courier_host_services_v1* host, std::unique_ptr<Backend>* out) {
  if (!host || host->struct_size < sizeof(courier_host_services_v1) || !host->get_env) {
    return ofi::set_error(-EINVAL, "init: host services missing or too old");
  }
  const char* value = host->get_env(host->ctx, kProviderKnob);
  if (!value || !*value) value = kProviderDefault;

  const ofi::ProviderAlias* choice = ofi::find_provider_alias(value);
  if (!choice) {
    return ofi::set_error(-EINVAL, "%s='%s' is not valid: allowed values are %s", kProviderKnob,
                          value, kProviderAllowed);
  }

  std::unique_ptr<Backend> backend(new (std::nothrow) Backend);
  if (!backend) return ofi::set_error(-ENOMEM, "init: out of memory");
  backend->host_ = host;
  int rc =
      parse_write_timeout(host->get_env(host->ctx, kWriteTimeoutKnob), &backend->write_timeout_ms_);
  if (rc != 0) return rc;
  rc = ofi::probe_provider(choice->prov_name, &backend->profile_);
  if (rc != 0) {
    // Keep the probe's reason and say which knob value led there.
    const std::string reason = ofi::last_error();
    return ofi::set_error(rc, "%s (%s=%s)", reason.c_str(), kProviderKnob, value);
  }

  const ofi::ProviderProfile& p = backend->profile_;
  courier_nic_props_v1& props = backend->props_;
  props.struct_size = sizeof props;
  props.caps = caps_of(p);
  // Replaced by probe_atomics below when the provider has atomics.
  props.atomic_ops = 0;
  props.atomic_native = 0;
  props.caps_with_atomics = props.caps;
  props.imm_bytes = p.imm_bytes;
  props.mem_kinds = COURIER_MEM_HOST;
  props.max_msg_size = p.max_msg_size;
  props.max_ep_name = ofi::kMaxNameBytes;
  props.latency_ns = choice->latency_ns;
  props.bandwidth_mbps = choice->bandwidth_mbps;
  std::snprintf(props.device, sizeof props.device, "%s", p.provider_name.c_str());
  props.pci_address[0] = '\0';  // software transports have no PCI device

  rc = backend->probe_atomics(choice->prov_name);
  if (rc != 0) return rc;

  backend->log(COURIER_LOG_INFO, ofi::describe_profile(p).c_str());
  if (backend->atomic_profile_.atomics) {
    backend->log(COURIER_LOG_INFO,
                 ("atomic endpoints: " + ofi::describe_profile(backend->atomic_profile_)).c_str());
  }
  *out = std::move(backend);
  return 0;
}

int Backend::query(courier_nic_props_v1* props) const {
  if (!props) return ofi::set_error(-EINVAL, "query: NULL props");
  const uint32_t caller_size = props->struct_size;
  if (caller_size < offsetof(courier_nic_props_v1, caps)) {
    return ofi::set_error(-EINVAL, "query: props->struct_size %u is too small", caller_size);
  }
  // Copy only what the caller's struct has room for (an older core has a
  // shorter struct), and keep its struct_size.
  std::memcpy(props, &props_, std::min<size_t>(caller_size, sizeof props_));
  props->struct_size = caller_size;
  return 0;
}

void Backend::log(int level, const char* message) const {
  if (host_ && host_->log) host_->log(host_->ctx, level, "ofi", message);
}

}  // namespace courier::nic_ofi
