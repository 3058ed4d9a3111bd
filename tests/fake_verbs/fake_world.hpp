// The process-wide state of the fake: the devices listed so far and the HCA
// each has while open. It is a singleton because the verbs API it stands in
// for is one (libibverbs keeps one device list per process), and it is
// rebuilt in a forked child, which is a different "host".
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fake_hca.hpp"
#include "fake_profile.hpp"
#include "fake_wire.hpp"

namespace courier::fake_verbs {

struct DeviceHandle {
  ibv_device ibv;
  Device* impl;
};

struct Device {
  DeviceHandle handle{};
  Profile profile;
  // The HCA number, reserved by a bound (not listening) socket while the
  // device is closed, so its GUID stays stable and nobody else takes it.
  uint32_t number = 0;
  std::optional<BoundSocket> reservation;
  std::weak_ptr<Hca> hca;
};

inline Device* device_of(ibv_device* device) {
  return reinterpret_cast<DeviceHandle*>(device)->impl;
}

class World {
 public:
  // This process's state (fresh after fork).
  static World& get();

  pid_t pid() const { return pid_; }

  // The devices FAKE_VERBS_DEVICES lists now, in order.
  std::vector<Device*> list_devices();
  // Reserves the device's HCA number if it has none; false if none is free.
  bool reserve(Device& device);
  // The device's HCA, started if it is not open yet.
  std::shared_ptr<Hca> open(Device& device);
  // Called after a context let go of its HCA: re-reserves the number once
  // the HCA is gone.
  void release(Device& device, std::shared_ptr<Hca> hca);

  World* previous_ = nullptr;  // worlds of ancestor processes, kept reachable

 private:
  World();
  bool reserve_locked(Device& device);

  pid_t pid_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace courier::fake_verbs
