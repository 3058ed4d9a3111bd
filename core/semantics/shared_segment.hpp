// A POSIX shared-memory segment that the ranks of one host map together
// (the node-local phase of BARRIER). RAII: unmapped on destruction; the
// name is unlinked by whoever calls unlink() once every rank mapped it, so
// nothing is left in /dev/shm even when a rank dies later.
#pragma once

#include <cstddef>
#include <string>

namespace courier {

class SharedSegment {
 public:
  SharedSegment() = default;
  // Creates the segment, or opens the one another rank created; zero-filled.
  SharedSegment(std::string name, size_t bytes);
  ~SharedSegment();
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  void unlink();

 private:
  std::string name_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace courier
