// What a GPU backend's EP entries cost, per device (GPU ABI 1.12,
// ep_counters), and the two events of ep_stamp. Shared by gpu-cuda and
// gpu-hip; `Event` is the runtime's event handle. For benchmarks, not for
// control: the counts are relaxed atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace courier::device {

template <class Event>
struct EpDeviceCounters {
  std::atomic<uint64_t> kernel_launches{0};
  std::atomic<uint64_t> host_waits{0};
  std::mutex stamp_lock;  // guards stamps (made at the first ep_stamp)
  Event stamps[2] = {};
  bool stamps_made = false;
};

template <class Event>
class EpCounters {
 public:
  explicit EpCounters(int devices)
      : devices_(devices),
        counters_(std::make_unique<EpDeviceCounters<Event>[]>(
            static_cast<size_t>(devices > 0 ? devices : 1))) {}
  EpCounters(const EpCounters&) = delete;
  EpCounters& operator=(const EpCounters&) = delete;

  // A valid device's counters (callers check the device first).
  EpDeviceCounters<Event>& at(int device) { return counters_[static_cast<size_t>(device)]; }
  void launched(int device, uint32_t kernels) {
    if (valid(device)) at(device).kernel_launches.fetch_add(kernels, std::memory_order_relaxed);
  }
  void waited(int device) {
    if (valid(device)) at(device).host_waits.fetch_add(1, std::memory_order_relaxed);
  }
  bool valid(int device) const { return device >= 0 && device < devices_; }
  int devices() const { return devices_; }

 private:
  int devices_;
  std::unique_ptr<EpDeviceCounters<Event>[]> counters_;
};

}  // namespace courier::device
