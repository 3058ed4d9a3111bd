// COURIER_FAULTS: which transport faults to inject, parsed from
// "reorder=0.3,delay_us=50,dup=0.01,fail=0.001,seed=7" (every key optional).
// See docs/faults.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace courier {

struct FaultSpec {
  double reorder = 0;     // probability that a post is held back (and a completion batch shuffled)
  uint32_t delay_us = 0;  // completions are released after a random delay in [0, delay_us]
  double dup = 0;         // probability that an RX_IMM completion is delivered twice
  double fail = 0;        // probability that a post fails with -EBUSY (transient)
  uint64_t seed = 0;      // the generators' seed (xored with the proxy thread's index)
  // Probability that an emulated atomic request leaves malformed (offset
  // outside any window, misaligned, unknown op, in turn): the receiver's
  // checks at work. Injected by the semantics layer, not the decorator.
  double malform = 0;

  // False when no fault would ever be injected: no decorator is inserted then.
  bool active() const { return reorder > 0 || delay_us > 0 || dup > 0 || fail > 0; }
  // "reorder=0.3,delay_us=50,..." (the keys that are set), or "off".
  std::string describe() const;
};

inline constexpr uint32_t kMaxFaultDelayUs = 1'000'000;

// Parses `text` (empty = no faults); throws courier::Error naming `variable`,
// the value and the bad part.
FaultSpec parse_fault_spec(std::string_view text, std::string_view variable = "COURIER_FAULTS");

}  // namespace courier
