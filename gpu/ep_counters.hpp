// What a GPU backend's EP entries cost, per device (GPU ABI 1.12,
// ep_counters), and the two events of ep_stamp, with the three entries'
// work. Shared by gpu-cuda and gpu-hip; `Event` is the runtime's event
// handle, `Runtime` a struct of its event calls (see the backends). For
// benchmarks, not for control: the counts are relaxed atomics.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "courier/abi/gpu_v1.h"

namespace courier::device {

template <class Event>
struct EpDeviceCounters {
  std::atomic<uint64_t> kernel_launches{0};
  std::atomic<uint64_t> host_waits{0};
  std::mutex stamp_lock;  // guards the three below (made at the first ep_stamp)
  Event stamps[2] = {};
  bool stamps_made = false;
  bool recorded[2] = {false, false};
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

// ep_counters: the counts of a valid device into *out.
template <class Runtime>
int read_ep_counters(EpCounters<typename Runtime::Event>& all, int device,
                     courier_gpu_ep_counters_v1* out) {
  // The fields of minor 12 (a later minor may append more: written only
  // within out->struct_size).
  constexpr size_t kMinor12 = offsetof(courier_gpu_ep_counters_v1, host_waits) + sizeof(uint64_t);
  if (out == nullptr || out->struct_size < kMinor12) {
    return Runtime::fail(-EINVAL, "ep_counters: out is NULL or its struct_size is too small");
  }
  if (!all.valid(device)) {
    return Runtime::fail(-ENODEV,
                         "ep_counters: device " + std::to_string(device) + " does not exist");
  }
  auto& counters = all.at(device);
  out->kernel_launches = counters.kernel_launches.load(std::memory_order_relaxed);
  out->host_waits = counters.host_waits.load(std::memory_order_relaxed);
  return 0;
}

// ep_stamp: records stamp `slot` on the stream stream_of() gives (it
// checks the device and returns false having said why), making the two
// events at the first stamp.
template <class Runtime, class StreamOf>
int record_ep_stamp(EpCounters<typename Runtime::Event>& all, int device, uint32_t slot,
                    StreamOf stream_of) {
  if (slot > 1) {
    return Runtime::fail(-EINVAL, "ep_stamp: slot " + std::to_string(slot) + " is not 0 or 1");
  }
  typename Runtime::Stream stream{};
  if (!stream_of(&stream)) return -EIO;
  if (!all.valid(device)) {
    return Runtime::fail(-ENODEV, "ep_stamp: device " + std::to_string(device) + " does not exist");
  }
  auto& counters = all.at(device);
  std::lock_guard<std::mutex> lock(counters.stamp_lock);
  if (!counters.stamps_made) {
    for (int i = 0; i < 2; ++i) {
      if (const auto rc = Runtime::create(&counters.stamps[i]); rc != Runtime::kOk) {
        if (i == 1) (void)Runtime::destroy(counters.stamps[0]);
        return Runtime::fail(rc, "making the ep_stamp events");
      }
    }
    counters.stamps_made = true;
  }
  const auto rc = Runtime::record(counters.stamps[slot], stream);
  if (rc != Runtime::kOk) return Runtime::fail(rc, "recording an ep_stamp event");
  counters.recorded[slot] = true;
  return 0;
}

// ep_stamp_elapsed on a valid device (made current by the caller).
template <class Runtime>
int ep_stamp_elapsed_ns(EpCounters<typename Runtime::Event>& all, int device, uint64_t* ns) {
  if (ns == nullptr) return Runtime::fail(-EINVAL, "ep_stamp_elapsed: ns is NULL");
  auto& counters = all.at(device);
  std::lock_guard<std::mutex> lock(counters.stamp_lock);
  for (int i = 0; i < 2; ++i) {
    if (!counters.recorded[i]) {
      return Runtime::fail(
          -EINVAL, "ep_stamp_elapsed: stamp " + std::to_string(i) + " was not recorded (ep_stamp)");
    }
  }
  // Both: stamp 0 may be on another stream than stamp 1.
  auto rc = Runtime::synchronize(counters.stamps[0]);
  if (rc == Runtime::kOk) rc = Runtime::synchronize(counters.stamps[1]);
  float ms = 0;
  if (rc == Runtime::kOk) rc = Runtime::elapsed_ms(&ms, counters.stamps[0], counters.stamps[1]);
  if (rc != Runtime::kOk) return Runtime::fail(rc, "timing the ep_stamp events");
  *ns = ms > 0 ? static_cast<uint64_t>(static_cast<double>(ms) * 1e6) : 0;  // 1 before 0: none
  return 0;
}

// At the backend's fini: the events made.
template <class Runtime>
void destroy_ep_stamps(EpCounters<typename Runtime::Event>& all) {
  for (int d = 0; d < all.devices(); ++d) {
    auto& counters = all.at(d);
    if (!counters.stamps_made) continue;
    for (auto& event : counters.stamps) (void)Runtime::destroy(event);
  }
}

}  // namespace courier::device
