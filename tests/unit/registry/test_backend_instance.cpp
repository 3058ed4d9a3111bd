// Backend instances: host services, knob validation before init(), init
// failures surfacing with the plugin's reason, and open_*_backend's fallback.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "core/backend_instance.hpp"
#include "test_support.hpp"

namespace courier::test {
namespace {

TEST_CASE("host services: get_env answers from the EnvLookup with pointers that stay valid") {
  CapturedLog log;
  FakeEnv env;
  env.set("COURIER_SIM_IMM_BYTES", "8");
  HostServices host(log.logger(), env.lookup());
  const courier_host_services_v1* table = host.table();
  REQUIRE(table->struct_size == sizeof(courier_host_services_v1));

  CHECK(table->get_env(table->ctx, "COURIER_UNSET_FOR_THIS_TEST") == nullptr);
  CHECK(table->get_env(table->ctx, nullptr) == nullptr);
  const char* first = table->get_env(table->ctx, "COURIER_SIM_IMM_BYTES");
  REQUIRE(first != nullptr);
  CHECK(std::string(first) == "8");
  CHECK(table->get_env(table->ctx, "COURIER_SIM_IMM_BYTES") == first);  // cached

  env.set("COURIER_SIM_IMM_BYTES", "4");
  const char* second = table->get_env(table->ctx, "COURIER_SIM_IMM_BYTES");
  REQUIRE(second != nullptr);
  CHECK(std::string(second) == "4");
  CHECK(std::string(first) == "8");  // a pointer handed out earlier still reads its value
  CHECK(host.env("COURIER_SIM_IMM_BYTES") == "4");
}

TEST_CASE("host services: aligned allocation") {
  CapturedLog log;
  HostServices host(log.logger(), FakeEnv().lookup());
  const courier_host_services_v1* table = host.table();
  for (size_t alignment : {size_t{0}, size_t{1}, size_t{8}, size_t{64}, size_t{4096}}) {
    CAPTURE(alignment);
    void* memory = table->alloc(table->ctx, 100, alignment);
    REQUIRE(memory != nullptr);
    if (alignment > 0) CHECK(reinterpret_cast<uintptr_t>(memory) % alignment == 0);
    std::memset(memory, 0xab, 100);
    table->free(table->ctx, memory);
  }
  CHECK(table->alloc(table->ctx, 100, 48) == nullptr);  // not a power of two
}

TEST_CASE("host services: a plugin's log line goes to the Logger under the backend's name") {
  CapturedLog log(LogLevel::info);
  HostServices host(log.logger(), FakeEnv().lookup());
  const courier_host_services_v1* table = host.table();
  table->log(table->ctx, COURIER_LOG_WARN, "sim", "link is slow");
  table->log(table->ctx, COURIER_LOG_DEBUG, "sim", "below the level: dropped");
  table->log(table->ctx, 99, nullptr, nullptr);  // out of range and NULLs: tolerated, dropped
  CHECK(log.text() == "courier warn sim: link is slow\n");
}

TEST_CASE("host services: derived values show where the environment is silent") {
  CapturedLog log(LogLevel::info);
  FakeEnv env;
  env.set("COURIER_IB_DEVICE", "mlx5_3");
  HostServices host(log.logger(), env.lookup());
  const courier_host_services_v1* table = host.table();
  CHECK(table->get_env(table->ctx, "COURIER_PAIRED_NICS") == nullptr);
  host.derive("COURIER_PAIRED_NICS", "mlx5_0,mlx5_1");
  host.derive("COURIER_IB_DEVICE", "mlx5_0");
  CHECK(std::string(table->get_env(table->ctx, "COURIER_PAIRED_NICS")) == "mlx5_0,mlx5_1");
  // The environment wins over what the core derived.
  CHECK(std::string(table->get_env(table->ctx, "COURIER_IB_DEVICE")) == "mlx5_3");
}

TEST_CASE("host services may be used from several threads at once") {
  CapturedLog log(LogLevel::info);
  FakeEnv env;
  env.set("COURIER_SIM_IMM_BYTES", "8");
  HostServices host(log.logger(), env.lookup());
  const courier_host_services_v1* table = host.table();
  constexpr int kThreads = 4;
  constexpr int kCalls = 200;
  std::vector<std::thread> threads;
  std::vector<int> good(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const char* value = table->get_env(table->ctx, "COURIER_SIM_IMM_BYTES");
        if (value != nullptr && std::string(value) == "8") ++good[t];
        void* memory = table->alloc(table->ctx, 32, 16);
        table->free(table->ctx, memory);
        table->log(table->ctx, COURIER_LOG_INFO, "sim", "tick");
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int count : good) CHECK(count == kCalls);
  CHECK(log.lines_containing("courier info sim: tick").size() == kThreads * kCalls);
}

const NicPlugin& nic_named(Registry& registry, std::string_view name) {
  std::vector<const NicPlugin*> chosen = registry.nic_choices(name);
  REQUIRE(chosen.size() == 1);
  return *chosen[0];
}

TEST_CASE("a NIC backend initializes and reports its properties") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  FakeEnv env;
  HostServices host(log.logger(), env.lookup());

  NicBackend sim(nic_named(registry, "sim"), host);
  CHECK(sim.handle() != nullptr);
  CHECK(sim.props().struct_size == sizeof(courier_nic_props_v1));
  CHECK(sim.props().imm_bytes == 4);  // the knob's default
  CHECK(std::string(sim.props().device) == "sim");
  CHECK(nic_capability_names(sim.props().caps) ==
        std::vector<std::string>{"rma_write", "write_imm", "ordered_writes", "delivery_complete",
                                 "loopback"});
  CHECK(memory_kind_names(sim.props().mem_kinds) == std::vector<std::string>{"host"});

  SUBCASE("the plugin reads its knob through host services") {
    env.set("COURIER_SIM_IMM_BYTES", "8");
    NicBackend wide(nic_named(registry, "sim"), host);
    CHECK(wide.props().imm_bytes == 8);
  }
}

TEST_CASE("the ops of an initialized NIC backend carry a write") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  NicBackend sim(nic_named(registry, "sim"), host);
  const courier_nic_plugin_v1* ops = sim.ops();

  courier_nic_ep_attr_v1 attr{sizeof(attr), 16, 16, 0};
  void* ep = nullptr;
  REQUIRE(ops->ep_open(sim.handle(), &attr, &ep) == COURIER_OK);
  char name[64];
  size_t name_len = sizeof(name);
  REQUIRE(ops->ep_name(ep, name, &name_len) == COURIER_OK);
  REQUIRE(ops->ep_connect(ep, 1, name, name_len) == COURIER_OK);  // rank 0 is ourselves

  char source[16] = "hello, courier";
  char target[16] = {};
  void* source_mr = nullptr;
  void* target_mr = nullptr;
  courier_nic_rkey_v1 source_key{};
  courier_nic_rkey_v1 target_key{};
  REQUIRE(ops->mr_register(ep, source, sizeof(source), COURIER_MEM_HOST, &source_mr, &source_key) ==
          COURIER_OK);
  REQUIRE(ops->mr_register(ep, target, sizeof(target), COURIER_MEM_HOST, &target_mr, &target_key) ==
          COURIER_OK);

  courier_nic_write_v1 write{};
  write.peer = 0;
  write.flags = COURIER_NIC_WRITE_IMM;
  write.local_mr = source_mr;
  write.length = sizeof(source);
  write.remote = target_key;
  write.imm = 0x1234;
  write.cookie = 77;
  REQUIRE(ops->post_write(ep, &write) == COURIER_OK);

  courier_nic_completion_v1 completions[4];
  REQUIRE(ops->poll(ep, completions, 4) == 2);
  CHECK(completions[0].kind == COURIER_NIC_COMP_TX);
  CHECK(completions[0].cookie == 77);
  CHECK(completions[1].kind == COURIER_NIC_COMP_RX_IMM);
  CHECK(completions[1].imm == 0x1234);
  CHECK(std::string(target) == "hello, courier");

  CHECK(ops->mr_register(ep, source, sizeof(source), COURIER_MEM_CUDA, &source_mr, &source_key) ==
        -ENOTSUP);
  CHECK(sim.last_error() == "sim: only host memory is supported");

  CHECK(ops->mr_deregister(source_mr) == COURIER_OK);
  CHECK(ops->mr_deregister(target_mr) == COURIER_OK);
  CHECK(ops->ep_close(ep) == COURIER_OK);
}

TEST_CASE("a bad value of a plugin's enumerated knob is refused before init") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  FakeEnv env;
  env.set("COURIER_SIM_IMM_BYTES", "3");
  HostServices host(log.logger(), env.lookup());
  const std::string expected =
      "COURIER_SIM_IMM_BYTES='3' is invalid for NIC backend 'sim': expected one of 4, 8";

  CHECK(error_from([&] { NicBackend sim(nic_named(registry, "sim"), host); }) == expected);
  // Selection does not skip to another backend: the user has to fix the value.
  CHECK(error_from([&] { open_nic_backend(registry, "sim", host, log.logger()); }) == expected);
  CHECK(error_from([&] { open_nic_backend(registry, "^ofi", host, log.logger()); }) == expected);
}

TEST_CASE("knob_value_error") {
  courier_knob_v1 enumerated{"COURIER_X", "a", "a|bb|c", "help"};
  CHECK_FALSE(knob_value_error(enumerated, "bb"));
  CHECK(knob_value_error(enumerated, "b") == "expected one of a, bb, c");
  CHECK(knob_value_error(enumerated, "") == "expected one of a, bb, c");
  courier_knob_v1 free_form{"COURIER_Y", "", nullptr, "help"};
  CHECK_FALSE(knob_value_error(free_form, "anything at all"));
  courier_knob_v1 ranged{"COURIER_T_RANGE", "30", "0..86400", "seconds"};
  CHECK_FALSE(knob_value_error(ranged, "0"));
  CHECK_FALSE(knob_value_error(ranged, "86400"));
  CHECK(knob_value_error(ranged, "86401") == "expected an integer in [0, 86400]");
  CHECK(knob_value_error(ranged, "-1") == "expected an integer in [0, 86400]");
  CHECK(knob_value_error(ranged, "30s") == "expected an integer in [0, 86400]");
  courier_knob_v1 broken{"COURIER_T_BROKEN", "1", "1..x", "a plugin bug"};
  CHECK(knob_value_error(broken, "1") == "the plugin declares an unreadable range '1..x'");
}

TEST_CASE("an init failure surfaces with the backend, its file and the plugin's reason") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  const NicPlugin& mock = nic_named(registry, "mock");
  const std::string failure = "NIC backend 'mock' (" + test_plugin("libcourier-nic-mock.so") +
                              ") failed to initialize: mock: no device found (status -19: ";

  CHECK(error_from([&] { NicBackend backend(mock, host); }).starts_with(failure));
  std::string error = error_from([&] { open_nic_backend(registry, "mock", host, log.logger()); });
  CAPTURE(error);
  CHECK(
      error.starts_with("no NIC backend allowed by COURIER_NIC_BACKEND=mock could be "
                        "initialized: " +
                        failure));
}

TEST_CASE("open_nic_backend moves past a backend that fails to the next choice") {
  CapturedLog log(LogLevel::info);
  Registry registry(kTestPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  // "mock" sorts before "sim"; leave out a real backend that would come between.
  std::unique_ptr<NicBackend> backend = open_nic_backend(registry, "^ofi", host, log.logger());
  REQUIRE(backend);
  CHECK(backend->plugin().name == "sim");
  std::vector<std::string> skipped = log.lines_containing("mock: no device found");
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].find("trying the next one") != std::string::npos);
}

TEST_CASE("open_nic_backend with nothing to choose lists what was searched and rejected") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  std::string exclude_all = "^";
  for (const NicPlugin& plugin : registry.nic_plugins()) exclude_all += plugin.name + ",";
  std::string error =
      error_from([&] { open_nic_backend(registry, exclude_all, host, log.logger()); });
  CAPTURE(error);
  CHECK(error.starts_with("no usable NIC backend allowed by COURIER_NIC_BACKEND=" + exclude_all +
                          " (searched " + canonical(kTestPluginDir)));
  CHECK(error.find(test_plugin("libcourier-nic-short.so") + " (struct_size 16") !=
        std::string::npos);
}

TEST_CASE("a GPU backend initializes; open_gpu_backend prefers a device to CPU threads") {
  CapturedLog log;
  // The real gpu-host (host_kernels: CPU threads) sorts before "sim" (a
  // device without host kernels); the capability, not the name, decides.
  Registry registry(kTestPluginDir + ":" + kRealPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());

  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "", host, log.logger());
  REQUIRE(gpu);
  CHECK(gpu->plugin().name == "sim");
  CHECK((gpu->props().caps & COURIER_GPU_CAP_HOST_KERNELS) == 0);

  // Without a device backend, the CPU-thread GPU is the one taken.
  std::unique_ptr<GpuBackend> fallback = open_gpu_backend(registry, "^sim", host, log.logger());
  REQUIRE(fallback);
  CHECK(fallback->plugin().name == "host");
  CHECK(gpu->props().struct_size == sizeof(courier_gpu_props_v1));

  std::unique_ptr<GpuBackend> sim = open_gpu_backend(registry, "sim", host, log.logger());
  CHECK(sim->props().device_count == 1);
  CHECK(std::string(sim->props().device_name) == "sim (host memory)");
  CHECK(gpu_capability_names(sim->props().caps) == std::vector<std::string>{"mapped_host"});
  void* memory = nullptr;
  REQUIRE(sim->runtime().mem_alloc(sim->handle(), 0, 1024, &memory) == COURIER_OK);
  CHECK(reinterpret_cast<uintptr_t>(memory) % 256 == 0);
  CHECK(sim->runtime().mem_free(sim->handle(), 0, memory) == COURIER_OK);
  courier_host_kernel_launch_v1 launch{};
  CHECK(sim->runtime().launch_host_kernel(sim->handle(), &launch) == -ENOTSUP);
  CHECK(sim->last_error() == "sim: runs no kernels (no COURIER_GPU_CAP_HOST_KERNELS)");
}

TEST_CASE("gpu-host counts the host waits it is asked for and stamps its clock (GPU ABI 1.12)") {
  CapturedLog log;
  Registry registry(kRealPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "host", host, log.logger());
  REQUIRE(gpu);
  REQUIRE(gpu->supports(GpuFeature::ep_counters));
  const courier_gpu_ep_part_v1& ops = gpu->ep();
  void* b = gpu->handle();
  courier_gpu_ep_counters_v1 before{};
  before.struct_size = sizeof before;
  REQUIRE(ops.ep_counters(b, 0, &before) == COURIER_OK);
  REQUIRE(ops.ep_sync(b, 0) == COURIER_OK);
  char from[64] = {1}, to[64] = {};
  REQUIRE(gpu->runtime().memcpy_sync(b, to, from, sizeof from) == COURIER_OK);
  courier_gpu_ep_counters_v1 after{};
  after.struct_size = sizeof after;
  REQUIRE(ops.ep_counters(b, 0, &after) == COURIER_OK);
  CHECK(after.host_waits == before.host_waits + 2);        // the sync and the synchronous copy
  CHECK(after.kernel_launches == before.kernel_launches);  // neither is a kernel

  uint64_t ns = 0;
  CHECK(ops.ep_stamp_elapsed(b, 0, &ns) == -EINVAL);  // nothing stamped yet
  CHECK(gpu->last_error() == "ep_stamp_elapsed: stamp 0 was not recorded (ep_stamp)");
  REQUIRE(ops.ep_stamp(b, 0, 0) == COURIER_OK);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(ops.ep_stamp(b, 0, 1) == COURIER_OK);
  REQUIRE(ops.ep_stamp_elapsed(b, 0, &ns) == COURIER_OK);
  CHECK(ns >= 2'000'000);

  // Bad arguments are refused, naming what is wrong.
  CHECK(ops.ep_stamp(b, 0, 2) == -EINVAL);
  CHECK(gpu->last_error() == "ep_stamp: slot 2 is not 0 or 1");
  CHECK(ops.ep_counters(b, 1, &after) == -ENODEV);
  CHECK(gpu->last_error() == "device 1 does not exist");
  courier_gpu_ep_counters_v1 small{};
  small.struct_size = 8;
  CHECK(ops.ep_counters(b, 0, &small) == -EINVAL);
  CHECK(ops.ep_stamp_elapsed(b, 0, nullptr) == -EINVAL);
}

TEST_CASE("gpu-host has ep_hold and it does nothing (GPU ABI 1.14)") {
  CapturedLog log;
  Registry registry(kRealPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "host", host, log.logger());
  REQUIRE(gpu);
  REQUIRE(gpu->supports(GpuFeature::ep_hold));
  const courier_gpu_ep_part_v1& ops = gpu->ep();
  void* b = gpu->handle();
  courier_gpu_ep_counters_v1 before{}, after{};
  before.struct_size = after.struct_size = sizeof before;
  REQUIRE(ops.ep_counters(b, 0, &before) == COURIER_OK);
  // Kernels run before their entries return: no stream to hold.
  const auto start = std::chrono::steady_clock::now();
  CHECK(ops.ep_hold(b, 0, 1'000'000) == COURIER_OK);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
  REQUIRE(ops.ep_counters(b, 0, &after) == COURIER_OK);
  CHECK(after.kernel_launches == before.kernel_launches);
  CHECK(after.host_waits == before.host_waits);
  CHECK(ops.ep_hold(b, 1, 10) == -ENODEV);
  CHECK(gpu->last_error() == "device 1 does not exist");
}

TEST_CASE("capability names, with unknown bits shown by number") {
  CHECK(nic_capability_names(0).empty());
  CHECK(nic_capability_names(COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_IMM_SOURCE | (1u << 20)) ==
        std::vector<std::string>{"rma_write", "imm_source", "bit20"});
  CHECK(gpu_capability_names(COURIER_GPU_CAP_HOST_KERNELS | COURIER_GPU_CAP_IPC) ==
        std::vector<std::string>{"host_kernels", "ipc"});
  CHECK(memory_kind_names(COURIER_MEM_HOST | COURIER_MEM_DMABUF | COURIER_MEM_ODP) ==
        std::vector<std::string>{"host", "dmabuf", "odp"});
}

}  // namespace
}  // namespace courier::test
