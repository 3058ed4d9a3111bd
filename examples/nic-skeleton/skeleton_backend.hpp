// The skeleton backend object: reads its knobs, "probes the hardware" and
// describes what the transport can do (query).
#pragma once

#include <courier/abi/nic_v1.h>

#include <memory>

namespace courier::skeleton {

// Knobs (declared in the plugin's knob table; the core validates the ranges
// before init, and init checks them again for callers that do not).
inline constexpr const char* kMaxMsgSizeKnob = "COURIER_SKELETON_MAX_MSG_SIZE";
inline constexpr const char* kMaxMsgSizeDefault = "1073741824";
inline constexpr const char* kMaxMsgSizeAllowed = "1..1073741824";
inline constexpr const char* kSocketBufferKnob = "COURIER_SKELETON_SOCKET_BUFFER";
inline constexpr const char* kSocketBufferDefault = "0";
inline constexpr const char* kSocketBufferAllowed = "0..67108864";

class Backend {
 public:
  // Reads the knobs through `host` and checks that the transport works here.
  // On failure returns -errno with last_error() naming the reason.
  static int create(const courier_host_services_v1* host, std::unique_ptr<Backend>* out);

  // Fills the caller's props up to props->struct_size.
  int query(courier_nic_props_v1* props) const;
  const courier_nic_props_v1& props() const { return props_; }
  // COURIER_SKELETON_SOCKET_BUFFER: bytes of socket buffer per stream, 0 for
  // the system's default.
  int socket_buffer_bytes() const { return socket_buffer_bytes_; }

  // One line into Courier's log, under the component "skeleton".
  [[gnu::format(printf, 3, 4)]] void log(int level, const char* format, ...) const;

 private:
  Backend() = default;

  const courier_host_services_v1* host_ = nullptr;
  courier_nic_props_v1 props_{};
  int socket_buffer_bytes_ = 0;
};

}  // namespace courier::skeleton
