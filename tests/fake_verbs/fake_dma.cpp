#include "fake_dma.hpp"

#include <cstring>

#if defined(__SANITIZE_THREAD__)
#define FAKE_VERBS_DEVICES_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAKE_VERBS_DEVICES_TSAN 1
#endif
#endif

#ifdef FAKE_VERBS_DEVICES_TSAN
// ThreadSanitizer's dynamic annotations (defined by its runtime).
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace courier::fake_verbs {

DmaScope::DmaScope() {
#ifdef FAKE_VERBS_DEVICES_TSAN
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
}

DmaScope::~DmaScope() {
#ifdef FAKE_VERBS_DEVICES_TSAN
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

void dma_copy(std::byte* target, const std::byte* source, size_t bytes) {
  if (bytes == 0) return;
  DmaScope dma;
  std::memcpy(target, source, bytes);
}

}  // namespace courier::fake_verbs
