// Which stream a GPU backend's EP kernels go to, per device (GPU ABI 1.9,
// ep_set_stream): the backend's own, made at first use, or one the caller
// chose. Shared by gpu-cuda and gpu-hip; `Stream` is the runtime's handle.
#pragma once

#include <mutex>
#include <vector>

namespace courier::device {

template <class Stream>
class EpStreams {
 public:
  explicit EpStreams(int devices)
      : own_(static_cast<size_t>(devices), nullptr),
        chosen_(static_cast<size_t>(devices), false),
        caller_(static_cast<size_t>(devices), nullptr) {}
  EpStreams(const EpStreams&) = delete;
  EpStreams& operator=(const EpStreams&) = delete;

  // The stream of a valid `device` into *out (the caller's may be NULL: the
  // runtime's default stream); false when making the own one failed
  // (make(device, &stream) returns non-zero, having said why). The own
  // stream is made first even when the caller's is chosen: making it loads
  // the EP kernels, and a kernel loaded lazily at its first launch could
  // wait for an EP kernel already spinning for a peer (a hang).
  template <class Make>
  bool get(int device, Make make, Stream* out) {
    std::lock_guard<std::mutex> lock(lock_);
    const auto d = static_cast<size_t>(device);
    if (own_[d] == nullptr && make(device, &own_[d]) != 0) return false;
    *out = chosen_[d] ? caller_[d] : own_[d];
    return true;
  }
  // caller false: the backend's own stream again.
  void choose(int device, bool caller, Stream stream) {
    std::lock_guard<std::mutex> lock(lock_);
    const auto d = static_cast<size_t>(device);
    chosen_[d] = caller;
    caller_[d] = caller ? stream : nullptr;
  }
  // The own streams made so far, for the backend to destroy at fini.
  const std::vector<Stream>& own() const { return own_; }

 private:
  std::mutex lock_;
  std::vector<Stream> own_;
  std::vector<bool> chosen_;
  std::vector<Stream> caller_;
};

}  // namespace courier::device
