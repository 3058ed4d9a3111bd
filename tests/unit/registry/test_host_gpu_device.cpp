// The host services' gpu_device from both ends. The core chooses the rank's
// GPU once and answers it (core/device_choice.hpp), after the GPU backend's
// init and first query, which it then queries again; a plugin
// (gpu/rank_device.hpp) checks the answer against its own devices, and with
// host services older than gpu_device reads COURIER_GPU_DEVICE itself.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/backend_instance.hpp"
#include "core/device_choice.hpp"
#include "gpu/rank_device.hpp"
#include "test_support.hpp"

namespace courier::test {
namespace {

// The sim with four devices that names the GPU the host services answer
// (tests/plugins/CMakeLists.txt).
const std::string kDevicesPluginDir = kTestPluginDir + "/devices";

// What gpu_device answers: its status, and the device (kUntouched when it
// wrote none).
constexpr uint32_t kUntouched = 12345;
struct Answer {
  int status;
  uint32_t device;
};
Answer ask(const courier_host_services_v1* table) {
  Answer answer{0, kUntouched};
  answer.status = table->gpu_device(table->ctx, &answer.device);
  return answer;
}

FakeEnv env_of(const std::map<std::string, std::string>& values) {
  FakeEnv env;
  for (const auto& [name, value] : values) env.set(name, value);
  return env;
}

// A job of 8 ranks on one host, this one local rank 6 (no rendezvous: the
// Config is only asked where the rank sits), plus `extra`.
FakeEnv job_env(const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> values = {{"COURIER_RANK", "6"},
                                               {"COURIER_WORLD_SIZE", "8"},
                                               {"COURIER_LOCAL_RANK", "6"},
                                               {"COURIER_LOCAL_SIZE", "8"}};
  values.insert(extra.begin(), extra.end());
  return env_of(values);
}

Config job_config(const FakeEnv& env) {
  return Config::load(env.lookup(), /*need_job=*/true, /*need_rendezvous=*/false);
}

TEST_CASE("host services: gpu_device answers -EAGAIN until the GPU is set, then the GPU") {
  CapturedLog log;
  HostServices host(log.logger(), FakeEnv().lookup());
  const courier_host_services_v1* table = host.table();
  REQUIRE(COURIER_HOST_HAS(table, gpu_device));
  CHECK(table->gpu_device(table->ctx, nullptr) == -EINVAL);
  Answer answer = ask(table);
  CHECK(answer.status == -EAGAIN);
  CHECK(answer.device == kUntouched);

  host.set_gpu_device(3);
  answer = ask(table);
  CHECK(answer.status == COURIER_OK);
  CHECK(answer.device == 3);
  CHECK(table->gpu_device(table->ctx, nullptr) == -EINVAL);
}

TEST_CASE("COURIER_HOST_HAS: a table from before gpu_device does not carry it") {
  CapturedLog log;
  HostServices host(log.logger(), FakeEnv().lookup());
  courier_host_services_v1 older = *host.table();
  older.struct_size = offsetof(courier_host_services_v1, gpu_device);
  CHECK(COURIER_HOST_HAS(&older, dmabuf_export));
  CHECK_FALSE(COURIER_HOST_HAS(&older, gpu_device));
  courier_host_services_v1 unset = *host.table();
  unset.gpu_device = nullptr;
  CHECK_FALSE(COURIER_HOST_HAS(&unset, gpu_device));
}

TEST_CASE("the core tells the plugins the GPU it chose, after the GPU backend's init") {
  struct Case {
    const char* what;
    std::map<std::string, std::string> env;
    uint32_t device;
  };
  for (const Case& c : {Case{"local rank 6 modulo 4 devices", {}, 2},
                        Case{"COURIER_GPU_DEVICE=3", {{"COURIER_GPU_DEVICE", "3"}}, 3},
                        Case{"COURIER_GPU_DEVICE=0", {{"COURIER_GPU_DEVICE", "0"}}, 0}}) {
    CAPTURE(c.what);
    CapturedLog log;
    const FakeEnv env = job_env(c.env);
    Registry registry(kDevicesPluginDir, log.logger());
    HostServices host(log.logger(), env.lookup());
    std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "sim", host, log.logger());
    // init and the first query run before the choice, which needs their count.
    REQUIRE(gpu->props().device_count == 4);
    CHECK(std::string(gpu->props().device_name) == "sim: no GPU chosen yet");
    CHECK(ask(host.table()).status == -EAGAIN);

    CHECK(choose_and_announce_gpu_device(job_config(env), *gpu, host) == int(c.device));
    const Answer answer = ask(host.table());
    CHECK(answer.status == COURIER_OK);
    CHECK(answer.device == c.device);
    // Queried again: the backend now describes the GPU chosen.
    CHECK(std::string(gpu->props().device_name) == "sim GPU " + std::to_string(c.device) + " of 4");
  }
}

TEST_CASE("a COURIER_GPU_DEVICE beyond the devices stops start-up; the plugins learn nothing") {
  CapturedLog log;
  const FakeEnv env = job_env({{"COURIER_GPU_DEVICE", "4"}});
  Registry registry(kDevicesPluginDir, log.logger());
  HostServices host(log.logger(), env.lookup());
  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "sim", host, log.logger());
  CHECK(error_from([&] { choose_and_announce_gpu_device(job_config(env), *gpu, host); }) ==
        "COURIER_GPU_DEVICE=4 is invalid: GPU backend 'sim' has 4 device(s)");
  CHECK(ask(host.table()).status == -EAGAIN);
  CHECK(std::string(gpu->props().device_name) == "sim: no GPU chosen yet");
}

TEST_CASE("gpu-host: the core answers device 0, named or by default; device 1 is refused") {
  for (const auto& extra : {std::map<std::string, std::string>{},
                            std::map<std::string, std::string>{{"COURIER_GPU_DEVICE", "0"}}}) {
    CAPTURE(extra.size());
    CapturedLog log;
    const FakeEnv env = job_env(extra);
    Registry registry(kRealPluginDir, log.logger());
    HostServices host(log.logger(), env.lookup());
    std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "host", host, log.logger());
    REQUIRE(gpu->props().device_count == 1);
    CHECK(ask(host.table()).status == -EAGAIN);
    CHECK(choose_and_announce_gpu_device(job_config(env), *gpu, host) == 0);
    const Answer answer = ask(host.table());
    CHECK(answer.status == COURIER_OK);
    CHECK(answer.device == 0);
  }
  CapturedLog log;
  const FakeEnv env = job_env({{"COURIER_GPU_DEVICE", "1"}});
  Registry registry(kRealPluginDir, log.logger());
  HostServices host(log.logger(), env.lookup());
  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "host", host, log.logger());
  CHECK(error_from([&] { choose_and_announce_gpu_device(job_config(env), *gpu, host); }) ==
        "COURIER_GPU_DEVICE=1 is invalid: GPU backend 'host' has 1 device(s)");
  CHECK(ask(host.table()).status == -EAGAIN);
}

// ---- the plugin's end: gpu/rank_device.hpp

TEST_CASE("a plugin takes the core's answer, not COURIER_GPU_DEVICE") {
  CapturedLog log;
  HostServices host(log.logger(), env_of({{"COURIER_GPU_DEVICE", "99"}}).lookup());
  host.set_gpu_device(1);
  const device::RankDevice rank = device::rank_device(host.table(), 2, "CUDA");
  CHECK(rank.status == COURIER_OK);
  CHECK(rank.device == 1);
  CHECK(rank.error.empty());
}

TEST_CASE("a plugin refuses an answer beyond its devices, naming the device and the count") {
  CapturedLog log;
  HostServices host(log.logger(), FakeEnv().lookup());
  host.set_gpu_device(2);
  device::RankDevice rank = device::rank_device(host.table(), 2, "CUDA");
  CHECK(rank.status == -ENODEV);
  CHECK(rank.error == "the core chose GPU 2 for this rank, but there are 2 CUDA devices");
  rank = device::rank_device(host.table(), 1, "CUDA");
  CHECK(rank.status == -ENODEV);
  CHECK(rank.error == "the core chose GPU 2 for this rank, but there is 1 CUDA device");
}

TEST_CASE("a plugin asked before the choice hears -EAGAIN, with no device") {
  CapturedLog log;
  HostServices host(log.logger(), env_of({{"COURIER_GPU_DEVICE", "1"}}).lookup());
  const device::RankDevice rank = device::rank_device(host.table(), 2, "CUDA");
  CHECK(rank.status == -EAGAIN);
  CHECK(rank.error == "the core has not chosen this rank's GPU yet");
}

TEST_CASE("with host services older than gpu_device, a plugin applies the core's rule itself") {
  for (const bool short_table : {true, false}) {
    CAPTURE(short_table);
    CapturedLog log;
    FakeEnv env;
    HostServices host(log.logger(), env.lookup());
    host.set_gpu_device(0);  // not seen through the older table below
    courier_host_services_v1 older = *host.table();
    if (short_table) {
      older.struct_size = offsetof(courier_host_services_v1, gpu_device);
    } else {
      older.gpu_device = nullptr;  // the size covers it, but it is not set
    }
    // Neither variable: device 0.
    device::RankDevice rank = device::rank_device(&older, 4, "CUDA");
    CHECK(rank.status == COURIER_OK);
    CHECK(rank.device == 0);
    // The local rank modulo the count.
    env.set("COURIER_LOCAL_RANK", "6");
    rank = device::rank_device(&older, 4, "CUDA");
    CHECK(rank.status == COURIER_OK);
    CHECK(rank.device == 2);
    // COURIER_GPU_DEVICE wins over the local rank.
    env.set("COURIER_GPU_DEVICE", "3");
    rank = device::rank_device(&older, 4, "CUDA");
    CHECK(rank.status == COURIER_OK);
    CHECK(rank.device == 3);
    // Beyond the devices, or not a number: refused, never wrapped.
    for (const char* bad : {"4", "99", "-1", "1x"}) {
      CAPTURE(bad);
      env.set("COURIER_GPU_DEVICE", bad);
      rank = device::rank_device(&older, 4, "CUDA");
      CHECK(rank.status == -EINVAL);
      CHECK(rank.error ==
            std::string("COURIER_GPU_DEVICE='") + bad + "' is not one of the 4 CUDA devices");
    }
  }
}

}  // namespace
}  // namespace courier::test
