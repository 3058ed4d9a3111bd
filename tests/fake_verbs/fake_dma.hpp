// The adapter's own accesses to application memory at a target (remote
// writes, atomics, receives). Real DMA is not a CPU thread, and applications
// legitimately poll memory that remote writes land in; so under
// ThreadSanitizer these accesses are not recorded as accesses of the engine
// thread (the requester's reads of source buffers still are: reusing a
// buffer before its completion is a real bug).
#pragma once

#include <cstddef>
#include <cstdint>

namespace courier::fake_verbs {

class DmaScope {
 public:
  DmaScope();
  ~DmaScope();
  DmaScope(const DmaScope&) = delete;
  DmaScope& operator=(const DmaScope&) = delete;
};

void dma_copy(std::byte* target, const std::byte* source, size_t bytes);

}  // namespace courier::fake_verbs
