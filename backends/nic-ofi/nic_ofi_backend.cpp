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

}  // namespace
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
  props.caps = COURIER_NIC_CAP_RMA_WRITE;
  if (p.imm_bytes > 0) props.caps |= COURIER_NIC_CAP_WRITE_IMM;
  if (p.imm_bytes > 0 && p.source) props.caps |= COURIER_NIC_CAP_IMM_SOURCE;
  if (p.ordered_writes) props.caps |= COURIER_NIC_CAP_ORDERED_WRITES;
  if (p.delivery_complete) props.caps |= COURIER_NIC_CAP_DELIVERY_COMPLETE;
  if (p.auto_progress) props.caps |= COURIER_NIC_CAP_PASSIVE_TARGET;
  props.atomic_ops = 0;  // post_atomic is not wired to libfabric yet
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

  backend->log(COURIER_LOG_INFO, ofi::describe_profile(p).c_str());
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
