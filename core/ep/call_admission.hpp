// Whether a call of an EP Buffer goes ahead (docs/ep.md, "Bad input"): the
// first call's configuration is agreed by every rank through the bootstrap;
// later calls are checked against it. Both EP modes and both transports
// (proxy and direct) use it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/ep/tensor_checks.hpp"
#include "courier/context.hpp"

namespace courier::ep {

// What every rank must call a Buffer with, the same on all ranks.
struct CallConfig {
  uint32_t hidden = 0;
  DType dtype = DType::float32;
  uint32_t topk = 0;
  uint32_t num_experts = 0;
  bool operator==(const CallConfig&) const = default;
};

class CallAdmission {
 public:
  explicit CallAdmission(Context& ctx);

  // Decides whether this rank's call of `what` goes ahead; `refused` is
  // this rank's reason to refuse its arguments ("" when none). On the first
  // call every rank compares its configuration and acceptance (one
  // bootstrap allgather) and all throw together when one refused or the
  // configurations differ. Later a refused call, or one whose configuration
  // differs from the first, goes to `refuse`, which tells the peers and
  // throws.
  void admit(const CallConfig& mine, const std::string& refused, const char* what,
             const std::function<void(const std::string&)>& refuse);
  bool configured() const { return configured_; }
  const CallConfig& config() const { return config_; }

 private:
  Context& ctx_;
  uint32_t rank_, ranks_;
  bool configured_ = false;
  CallConfig config_;
};

}  // namespace courier::ep
