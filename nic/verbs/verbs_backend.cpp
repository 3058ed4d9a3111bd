#include "verbs_backend.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "verbs_error.hpp"

namespace courier::verbs {
namespace {

// Reads an integer knob in [low, high]; unset or empty means `fallback`.
int read_number(const courier_host_services_v1* host, const char* knob, const char* fallback,
                unsigned long long low, unsigned long long high, unsigned long long* out) {
  const char* value = host->get_env(host->ctx, knob);
  if (!value || !*value) value = fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long number = std::strtoull(value, &end, 10);
  if (errno != 0 || *end != '\0' || value[0] == '-' || number < low || number > high) {
    return set_error(-EINVAL, "%s='%s' is not valid: expected a whole number from %llu to %llu",
                     knob, value, low, high);
  }
  *out = number;
  return 0;
}

// "0000:3b:00.0" from the device's sysfs node, or "" (no sysfs node).
std::string pci_address_of(ibv_context* context) {
  char path[PATH_MAX];
  std::snprintf(path, sizeof path, "%s/device", context->device->ibdev_path);
  char resolved[PATH_MAX];
  if (!context->device->ibdev_path[0] || !realpath(path, resolved)) return "";
  const char* slash = std::strrchr(resolved, '/');
  return slash ? slash + 1 : "";
}

}  // namespace

int Backend::create(const BackendTraits& traits, const courier_host_services_v1* host,
                    std::unique_ptr<Backend>* out) {
  if (!host || host->struct_size < offsetof(courier_host_services_v1, free) + sizeof host->free ||
      !host->get_env) {
    return set_error(-EINVAL, "init: host services missing or too old");
  }
  std::unique_ptr<Backend> backend(new (std::nothrow) Backend(traits));
  if (!backend) return set_error(-ENOMEM, "init: out of memory");
  backend->host_ = host;

  const char* wanted = host->get_env(host->ctx, kDeviceKnob);
  const char* paired = host->get_env(host->ctx, kPairedNicsVariable);
  int rc =
      Device::open(traits.family, wanted ? wanted : "", paired ? paired : "", &backend->device_);
  if (rc != 0) return rc;
  rc = backend->read_knobs();
  if (rc != 0) return rc;

  const Device& device = *backend->device_;
  const DeviceInfo& info = device.info();
  if (info.atomic_cap == IBV_ATOMIC_NONE) {
    backend->log(COURIER_LOG_WARN, info.name +
                                       " reports no atomic capability: Courier's atomics fall "
                                       "back to immediate-data emulation");
  } else {
    backend->atomic_ops_ =
        COURIER_NIC_ATOMIC_ADD_U64 | COURIER_NIC_ATOMIC_FETCH_ADD_U64 | COURIER_NIC_ATOMIC_CAS_U64;
  }

  courier_nic_props_v1& props = backend->props_;
  props.struct_size = sizeof props;
  // RC queue pairs: ordered, acknowledged by the target's NIC, the sender
  // known from the queue pair, no target CPU involved, loopback supported.
  props.caps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM |
               COURIER_NIC_CAP_ORDERED_WRITES | COURIER_NIC_CAP_DELIVERY_COMPLETE |
               COURIER_NIC_CAP_IMM_SOURCE | COURIER_NIC_CAP_LOOPBACK |
               COURIER_NIC_CAP_PASSIVE_TARGET;
  props.caps_with_atomics = props.caps;
  props.atomic_ops = backend->atomic_ops_;
  props.atomic_native = backend->atomic_ops_;
  props.imm_bytes = 4;
  props.mem_kinds = COURIER_MEM_HOST | COURIER_MEM_CUDA | COURIER_MEM_ROCM;
  if (backend->endpoint_defaults_.registration.prefer_odp) props.mem_kinds |= COURIER_MEM_ODP;
  props.max_msg_size = uint64_t{1} << 31;
  props.max_ep_name = static_cast<uint32_t>(kNameBytes);
  props.latency_ns = traits.latency_ns;
  props.bandwidth_mbps = traits.bandwidth_mbps;
  std::snprintf(props.device, sizeof props.device, "%s", info.name.c_str());
  std::snprintf(props.pci_address, sizeof props.pci_address, "%s",
                pci_address_of(device.context()).c_str());

  char line[256];
  std::snprintf(line, sizeof line, "%s port %u (%s), %s registration, atomics %s",
                info.name.c_str(), device.port().number,
                device.port().ethernet() ? "RoCE" : "InfiniBand",
                props.mem_kinds & COURIER_MEM_ODP ? "on-demand" : "pinned",
                backend->atomic_ops_ ? "native" : "emulated by the core");
  backend->log(COURIER_LOG_INFO, line);
  *out = std::move(backend);
  return 0;
}

int Backend::read_knobs() {
  EndpointOptions& o = endpoint_defaults_;
  unsigned long long tc = 0, sl = 0, timeout = 0, retry = 0, connect_s = 0, inflight = 0;
  int rc = read_number(host_, kTrafficClassKnob, "0", 0, 255, &tc);
  if (rc == 0) rc = read_number(host_, kServiceLevelKnob, "0", 0, 15, &sl);
  if (rc == 0) rc = read_number(host_, kTimeoutKnob, "20", 1, 31, &timeout);
  if (rc == 0) rc = read_number(host_, kRetryKnob, "7", 0, 7, &retry);
  if (rc == 0) rc = read_number(host_, kConnectTimeoutKnob, "60", 1, 3600, &connect_s);
  if (rc == 0) {
    rc = read_number(host_, kInflightBytesKnob, traits_.inflight_bytes_default, 0,
                     uint64_t{1} << 40, &inflight);
  }
  if (rc != 0) return rc;
  o.tuning.traffic_class = static_cast<uint8_t>(tc);
  o.tuning.service_level = static_cast<uint8_t>(sl);
  o.tuning.timeout = static_cast<uint8_t>(timeout);
  o.tuning.retry_cnt = static_cast<uint8_t>(retry);
  o.connect_timeout_ms = static_cast<uint32_t>(connect_s * 1000);
  const char* connect = host_->get_env(host_->ctx, kConnectKnob);
  const std::string how = connect != nullptr && *connect != '\0' ? connect : "eager";
  if (how != "eager" && how != "lazy") {
    return set_error(-EINVAL, "%s='%s' is invalid: expected eager or lazy", kConnectKnob,
                     how.c_str());
  }
  o.lazy_connect = how == "lazy";
  o.max_inflight_bytes = inflight;
  o.registration.prefer_odp = traits_.prefer_odp && device_->info().odp_for_rc();
  if (traits_.prefer_odp && !o.registration.prefer_odp) {
    log(COURIER_LOG_INFO, device_->info().name +
                              " has no on-demand paging for RC writes and atomics: memory is "
                              "pinned");
  }
  std::string warning;
  rc = select_gid(device_->port(), host_->get_env(host_->ctx, kGidIndexKnob), &o.gid_index, &o.gid,
                  &warning);
  if (rc != 0) return rc;
  if (!warning.empty()) log(COURIER_LOG_WARN, warning);
  return 0;
}

int Backend::query(courier_nic_props_v1* props) const {
  if (!props) return set_error(-EINVAL, "query: NULL props");
  const uint32_t caller_size = props->struct_size;
  if (caller_size < offsetof(courier_nic_props_v1, caps)) {
    return set_error(-EINVAL, "query: props->struct_size %u is too small", caller_size);
  }
  std::memcpy(props, &props_, std::min<size_t>(caller_size, sizeof props_));
  props->struct_size = caller_size;
  return 0;
}

int Backend::open_endpoint(const courier_nic_ep_attr_v1& attr,
                           std::unique_ptr<Endpoint>* out) const {
  if ((attr.flags & COURIER_NIC_EP_ATOMICS) && atomic_ops_ == 0) {
    return set_error(-EOPNOTSUPP,
                     "ep_open: COURIER_NIC_EP_ATOMICS asked for, but %s has no atomic capability",
                     device_->info().name.c_str());
  }
  EndpointOptions options = endpoint_defaults_;
  options.tx_depth = std::max<uint32_t>(attr.tx_depth, 1);
  options.rx_depth = std::max<uint32_t>(attr.rx_depth, 1);
  options.atomic_ops = (attr.flags & COURIER_NIC_EP_ATOMICS) ? atomic_ops_ : 0;
  return Endpoint::open(
      *device_, host_, options,
      [this](int level, const std::string& message) { log(level, message); }, &endpoints_, out);
}

std::string Backend::describe() const {
  std::string text;
  const EndpointOptions& o = endpoint_defaults_;
  for (const std::string& line : describe_device(device_->info(), device_->port().number,
                                                 o.gid_index == kNoGid ? -1 : o.gid_index)) {
    text += line + "\n";
  }
  char line[256];
  const std::string cap =
      o.max_inflight_bytes == 0 ? std::string("no cap") : std::to_string(o.max_inflight_bytes);
  std::snprintf(line, sizeof line,
                "settings: traffic class %u, service level %u, timeout %u, retry count %u, "
                "in-flight bytes per peer %s",
                o.tuning.traffic_class, o.tuning.service_level, o.tuning.timeout,
                o.tuning.retry_cnt, cap.c_str());
  text += line;
  return text;
}

void Backend::log(int level, const std::string& message) const {
  if (host_ && host_->log) host_->log(host_->ctx, level, traits_.name, message.c_str());
}

}  // namespace courier::verbs
