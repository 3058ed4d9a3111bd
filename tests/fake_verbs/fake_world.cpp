#include "fake_world.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

namespace courier::fake_verbs {
namespace {

// The current world, and the lock for replacing it. The lock is held across
// fork() (pthread_atfork) so a child never inherits it locked.
std::atomic<World*> current_world{nullptr};
std::mutex world_creation;
World* ancestors = nullptr;  // abandoned worlds: their threads are not in this process

void install_world_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork([] { world_creation.lock(); }, [] { world_creation.unlock(); },
                   [] { world_creation.unlock(); });
  });
}

uint32_t starting_number(const std::string& device_name) {
  const size_t hash = std::hash<std::string>{}(device_name + "/" + std::to_string(::getpid()));
  return static_cast<uint32_t>(hash % kMaxHcaNumber) + 1;
}

}  // namespace

World::World() : pid_(::getpid()) {}

World& World::get() {
  World* world = current_world.load(std::memory_order_acquire);
  if (world && world->pid_ == ::getpid()) return *world;
  install_fork_handler();
  install_world_fork_handler();
  std::lock_guard lock(world_creation);
  world = current_world.load(std::memory_order_acquire);
  if (world && world->pid_ == ::getpid()) return *world;
  // A forked child: the parent's world stays untouched (its engine threads
  // do not exist here and its locks may be held) and reachable, and this
  // process, a different host, starts afresh.
  if (world) {
    world->previous_ = ancestors;
    ancestors = world;
  }
  world = new World();
  current_world.store(world, std::memory_order_release);
  return *world;
}

std::vector<Device*> World::list_devices() {
  const std::vector<Profile> profiles = profiles_from_environment();
  std::lock_guard lock(mutex_);
  std::vector<Device*> listed;
  std::map<std::string, int> per_family;
  for (const Profile& profile : profiles) {
    const std::string name =
        profile.device_stem + std::to_string(per_family[profile.device_stem]++);
    Device* device = nullptr;
    for (auto& known : devices_) {
      if (known->profile.name == profile.name && name == known->handle.ibv.name)
        device = known.get();
    }
    if (!device) {
      auto created = std::make_unique<Device>();
      created->profile = profile;
      created->handle.impl = created.get();
      ibv_device& ibv = created->handle.ibv;
      ibv.node_type = IBV_NODE_CA;
      ibv.transport_type = IBV_TRANSPORT_IB;
      std::snprintf(ibv.name, sizeof(ibv.name), "%s", name.c_str());
      std::snprintf(ibv.dev_name, sizeof(ibv.dev_name), "uverbs%zu", devices_.size());
      std::snprintf(ibv.dev_path, sizeof(ibv.dev_path), "/sys/class/infiniband_verbs/%s",
                    ibv.dev_name);
      std::snprintf(ibv.ibdev_path, sizeof(ibv.ibdev_path), "/sys/class/infiniband/%s", ibv.name);
      device = created.get();
      devices_.push_back(std::move(created));
    }
    listed.push_back(device);
  }
  return listed;
}

bool World::reserve_locked(Device& device) {
  if (device.number != 0) return true;
  auto bound = bind_free_number(starting_number(device.handle.ibv.name));
  if (!bound) {
    std::fprintf(stderr, "fake verbs: no free HCA number for %s (all %u taken)\n",
                 device.handle.ibv.name, kMaxHcaNumber);
    return false;
  }
  device.number = bound->number;
  device.reservation = std::move(bound);
  return true;
}

bool World::reserve(Device& device) {
  std::lock_guard lock(mutex_);
  return reserve_locked(device);
}

std::shared_ptr<Hca> World::open(Device& device) {
  std::lock_guard lock(mutex_);
  if (auto hca = device.hca.lock()) return hca;
  if (!reserve_locked(device)) return nullptr;
  if (!device.reservation) {
    // Lost the number while closed (someone else bound it): take a new one.
    device.number = 0;
    if (!reserve_locked(device)) return nullptr;
  }
  auto hca = std::make_shared<Hca>(device.profile, std::move(*device.reservation));
  device.reservation.reset();
  device.hca = hca;
  return hca;
}

void World::release(Device& device, std::shared_ptr<Hca> hca) {
  std::lock_guard lock(mutex_);
  hca.reset();  // the last reference stops the engine and closes the socket
  if (device.hca.expired() && !device.reservation && device.number != 0) {
    // Keep the number (and so the GUID) reserved, bound but not listening:
    // peers dialling a closed device are refused.
    device.reservation = bind_number(device.number);
  }
}

}  // namespace courier::fake_verbs
