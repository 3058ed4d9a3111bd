// Points of the EP direct path's kernels where, with a stamp buffer
// (gpu-cuda's COURIER_CUDA_EP_TIMELINE), thread 0 of each block records the
// device clock: stamps[block * kStampPoints + point], ns, 0 where a block
// did not pass. Shared by the kernels (gpu/ep/direct_kernels.hpp) and the
// host code that reads the stamps back.
#pragma once

#include <cstdint>

namespace courier::device::ep {

enum StampPoint : uint32_t {
  kStampStart,      // the block began
  kStampReleased,   // the destinations' release flags seen (low-latency send)
  kStampRouted,     // the block's first token's slots known (low-latency send)
  kStampSent,       // the block's rows stored
  kStampSignalled,  // the last block raised the flags
  kStampFlagsSeen,  // every rank's flag seen (a receive or a reduce)
  kStampMoved,      // the block's rows packed or summed
  kStampFinished,   // the last block finished the call
  kStampPoints
};

inline constexpr const char* kStampNames[kStampPoints] = {
    "start", "released", "routed", "sent", "signalled", "flags_seen", "moved", "finished"};

}  // namespace courier::device::ep
