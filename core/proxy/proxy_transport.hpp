// What a proxy thread drives: the data movement of one command, and the
// completions that come back. The real implementation is NicEndpoint (a NIC
// backend's endpoint plus the window tables); benchmarks and tests plug in
// their own to measure or check the proxy alone.
#pragma once

#include <cstdint>
#include <string>

#include "courier/abi/nic_v1.h"
#include "courier/transfer_cmd.hpp"

namespace courier {

class ProxyTransport {
 public:
  virtual ~ProxyTransport() = default;

  // Starts the data movement of a WRITE command pushed to FIFO channel
  // `channel` (carried in its immediate data, see docs/wire-formats.md). Returns COURIER_OK,
  // -EAGAIN (transport full: poll, then retry the same command) or another
  // negative status, in which case *error says what was wrong.
  virtual int post_write(uint32_t channel, const TransferCmd& cmd, uint64_t cookie,
                         std::string* error) = 0;

  // Reaps up to `max` completions (TX completions carry the cookie given to
  // post_write). Returns the count or a negative status.
  virtual int poll(courier_nic_completion_v1* out, uint32_t max) = 0;

  // Text of the last failure reported by poll (for logs).
  virtual std::string last_error() const = 0;
};

}  // namespace courier
