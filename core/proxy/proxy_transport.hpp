// What a proxy thread drives: one NIC endpoint's data movement between
// registered windows, and the completions that come back. The real
// implementation is NicEndpoint (a NIC backend's endpoint plus the window
// tables); decorators (fault injection, retries) wrap it, and benchmarks and
// tests plug in their own to measure or check the proxy alone.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

#include "courier/abi/nic_v1.h"
#include "courier/transfer_cmd.hpp"

namespace courier {

// Window ids: 0..15 are the user's (TransferCmd's 4-bit field), the ids from
// kFirstInternalWindow up belong to Courier itself (atomic mailboxes,
// barriers), then this rank's WRITE sources (local only: Context::set_source).
inline constexpr uint32_t kUserWindows = 16;
inline constexpr uint32_t kFirstInternalWindow = kUserWindows;
inline constexpr uint32_t kFirstSourceWindow = kFirstInternalWindow + 6;
inline constexpr uint32_t kMaxWindowIds = kFirstSourceWindow + kCmdSources;

// [src_offset, +length) of local window src_window -> [dst_offset, +length)
// of the peer's window dst_window.
struct WriteRequest {
  uint32_t peer = 0;
  uint32_t src_window = 0;
  uint32_t dst_window = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
  bool with_imm = false;  // deliver `imm` to the peer's poll() once the data landed
  uint32_t imm = 0;       // 32 bits: docs/wire-formats.md, "Immediate data"
};

// One transport atomic (COURIER_NIC_ATOMIC_* op) on the peer's window; the old
// value of fetching ops lands at result_offset of the local result_window.
struct AtomicRequest {
  uint32_t peer = 0;
  uint32_t window = 0;
  uint64_t offset = 0;
  uint32_t op = 0;
  uint64_t operand = 0;
  uint64_t compare = 0;
  uint32_t result_window = 0;
  uint64_t result_offset = 0;
};

class ProxyTransport {
 public:
  virtual ~ProxyTransport() = default;

  // COURIER_NIC_CAP_* of this endpoint (a decorator that reorders clears
  // COURIER_NIC_CAP_ORDERED_WRITES).
  virtual uint32_t caps() const = 0;
  // COURIER_NIC_ATOMIC_* that post_atomic carries out, and the natively
  // executed subset.
  virtual uint32_t atomic_ops() const { return 0; }
  virtual uint32_t atomic_native() const { return 0; }

  // Start one operation. Return COURIER_OK, -EAGAIN (transport full: poll,
  // then retry the same request), -EBUSY (a transient failure: retry later,
  // with back-off) or another negative status, in which case *error says
  // what was wrong. A TX completion with `cookie` follows every COURIER_OK.
  virtual int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) = 0;
  virtual int post_atomic(const AtomicRequest&, uint64_t, std::string* error) {
    *error = "this transport carries out no atomics";
    return -EOPNOTSUPP;
  }

  // Reaps up to `max` completions (TX completions carry the cookie given to
  // the post). Returns the count or a negative status.
  virtual int poll(courier_nic_completion_v1* out, uint32_t max) = 0;

  // Text of the last failure reported by poll (for logs).
  virtual std::string last_error() const = 0;
};

}  // namespace courier
