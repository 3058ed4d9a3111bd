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
  kStampExperts,    // the block's first token's experts read (low-latency send)
  kStampRouted,     // the block's first token's slots known (low-latency send)
  kStampReleased,   // the destinations' release flags seen (low-latency send)
  kStampSent,       // the block's rows stored
  kStampArrived,    // the send's last block learned it was last
  kStampSignalled,  // the last block raised the flags
  kStampFlagsSeen,  // every rank's flag seen (a receive or a reduce)
  kStampCounted,    // the block read the (expert, rank) counts (balanced low-latency receive)
  kStampScanned,    // the block summed them into ranges (balanced low-latency receive)
  kStampMoved,      // the block's rows packed or summed
  kStampLast,       // the receive's last block learned it was last
  kStampFinished,   // the last block finished the call
  kStampPoints
};

// (In the order a block passes them, which the timeline prints.)
inline constexpr const char* kStampNames[kStampPoints] = {
    "start",      "experts", "routed",  "released", "sent", "arrived", "signalled",
    "flags_seen", "counted", "scanned", "moved",    "last", "finished"};

}  // namespace courier::device::ep
