#include "core/semantics/shared_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/check.hpp"

namespace courier {

SharedSegment::SharedSegment(std::string name, size_t bytes)
    : name_(std::move(name)), size_(bytes) {
  const int fd = ::shm_open(name_.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) fail("shared memory segment {}: shm_open failed: {}", name_, std::strerror(errno));
  // Every rank of the host sets the same size; a new segment reads as zeros.
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    fail("shared memory segment {}: ftruncate to {} bytes failed: {}", name_, bytes,
         std::strerror(err));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    fail("shared memory segment {}: mmap of {} bytes failed: {}", name_, bytes, std::strerror(err));
  }
  data_ = static_cast<std::byte*>(p);
}

SharedSegment::~SharedSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void SharedSegment::unlink() {
  if (!name_.empty()) ::shm_unlink(name_.c_str());
}

}  // namespace courier
