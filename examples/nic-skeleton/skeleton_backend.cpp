#include "skeleton_backend.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "skeleton_error.hpp"
#include "skeleton_socket.hpp"
#include "skeleton_wire.hpp"

namespace courier::skeleton {
namespace {

// What the transport promises (docs/plugin-abi.md, section 7). No
// PASSIVE_TARGET: a write lands only when the target calls poll(), so the
// core keeps the target's proxy polling. No atomics: the core emulates them
// over immediate data.
constexpr uint32_t kCaps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM |
                           COURIER_NIC_CAP_ORDERED_WRITES | COURIER_NIC_CAP_DELIVERY_COMPLETE |
                           COURIER_NIC_CAP_IMM_SOURCE | COURIER_NIC_CAP_LOOPBACK;

// Reads an integer knob within [min, max]; unset means `fallback`.
int read_integer_knob(const courier_host_services_v1* host, const char* name, const char* fallback,
                      unsigned long long min, unsigned long long max, unsigned long long* out) {
  const char* value = host->get_env(host->ctx, name);
  if (!value || !*value) value = fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long parsed = std::strtoull(value, &end, 10);
  if (errno != 0 || *end != '\0' || value[0] == '-' || value[0] == '+' || parsed < min ||
      parsed > max) {
    return fail(-EINVAL, "%s='%s' is invalid: expected an integer in [%llu, %llu]", name, value,
                min, max);
  }
  *out = parsed;
  return 0;
}

}  // namespace

int Backend::create(const courier_host_services_v1* host, std::unique_ptr<Backend>* out) {
  if (!host || host->struct_size < offsetof(courier_host_services_v1, free) + sizeof host->free) {
    return fail(-EINVAL, "init: host services missing or too old");
  }
  std::unique_ptr<Backend> backend(new (std::nothrow) Backend);
  if (!backend) return fail(-ENOMEM, "init: out of memory");
  backend->host_ = host;

  unsigned long long max_msg_size = 0;
  unsigned long long socket_buffer = 0;
  if (const int rc = read_integer_knob(host, kMaxMsgSizeKnob, kMaxMsgSizeDefault, 1, 1ull << 30,
                                       &max_msg_size);
      rc != 0) {
    return rc;
  }
  if (const int rc = read_integer_knob(host, kSocketBufferKnob, kSocketBufferDefault, 0,
                                       64ull << 20, &socket_buffer);
      rc != 0) {
    return rc;
  }
  backend->socket_buffer_bytes_ = static_cast<int>(socket_buffer);

  // A NIC backend opens its device here (ibv_get_device_list, fi_getinfo)
  // and fails with -ENODEV and the reason when there is none, so that the
  // registry moves on to the next backend. The skeleton's "device" is the
  // kernel's AF_UNIX sockets: check one can be made.
  if (Socket probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)); !probe) {
    const int error = errno;
    return fail(-ENODEV, "init: AF_UNIX sockets are not available: %s", errno_text(error));
  }

  courier_nic_props_v1& props = backend->props_;
  props.struct_size = sizeof props;
  props.caps = kCaps;
  props.caps_with_atomics = kCaps;  // no atomic endpoints exist; kept equal for clarity
  props.atomic_ops = 0;
  props.atomic_native = 0;
  props.imm_bytes = 4;  // like verbs and EFA: design for 32 bits
  props.mem_kinds = COURIER_MEM_HOST;
  props.max_msg_size = max_msg_size;
  props.max_ep_name = sizeof(EndpointAddress);
  // Nominal, for scoring against other backends: an AF_UNIX round trip
  // through two processes, and what one stream moves.
  props.latency_ns = 5000;
  props.bandwidth_mbps = 20000;
  std::snprintf(props.device, sizeof props.device, "af_unix");
  props.pci_address[0] = '\0';  // no PCI device; a NIC reports its own for topology

  backend->log(COURIER_LOG_DEBUG,
               "initialized: max_msg_size %llu, socket buffers %llu bytes (0: "
               "the system's default)",
               max_msg_size, socket_buffer);
  *out = std::move(backend);
  return 0;
}

int Backend::query(courier_nic_props_v1* props) const {
  if (!props) return fail(-EINVAL, "query: NULL props");
  const uint32_t caller_size = props->struct_size;
  if (caller_size < offsetof(courier_nic_props_v1, caps) + sizeof props->caps) {
    return fail(-EINVAL, "query: props->struct_size %u is too small", caller_size);
  }
  // An older core has a shorter struct: copy only what it has room for and
  // keep its struct_size.
  std::memcpy(props, &props_, std::min<size_t>(caller_size, sizeof props_));
  props->struct_size = caller_size;
  return 0;
}

void Backend::log(int level, const char* format, ...) const {
  char line[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  host_->log(host_->ctx, level, "skeleton", line);
}

}  // namespace courier::skeleton
