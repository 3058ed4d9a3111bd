// The GPU backend's host-side entry points on a real device (tests/gpu/ runs
// only on a GPU host): memory, copies, mapped host memory, IPC export,
// dmabuf export and the errors that name what was wrong. The backend is the
// one COURIER_GPU_BACKEND picks (run.sh sets cuda).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend_instance.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"

namespace {

struct Gpu {
  courier::Logger log{courier::LogLevel::warn};
  courier::EnvLookup env = courier::process_env();
  courier::Config config = courier::Config::load(env, false);
  courier::Registry registry{config.backend_path, log};
  courier::HostServices host{log, env};
  std::unique_ptr<courier::GpuBackend> backend{
      courier::open_gpu_backend(registry, config.gpu_backend, host, log)};
  const courier_gpu_plugin_v1& ops() const { return *backend->ops(); }
  void* handle() const { return backend->handle(); }
};

}  // namespace

TEST_CASE("the backend sees a device and reports the minor-1 capabilities") {
  Gpu gpu;
  const courier_gpu_props_v1& props = gpu.backend->props();
  INFO("backend " << gpu.backend->plugin().name << ": " << props.no_device_reason);
  REQUIRE(props.device_count >= 1);
  CHECK(gpu.backend->has_minor1());
  CHECK((props.caps & COURIER_GPU_CAP_MAPPED_HOST) != 0);
  CHECK((props.caps & COURIER_GPU_CAP_IPC) != 0);
  CHECK((props.caps & COURIER_GPU_CAP_FIFO_KERNELS) != 0);
  CHECK(std::strlen(props.device_name) > 0);
}

TEST_CASE("device memory: allocate, copy in and out, free") {
  Gpu gpu;
  void* device = nullptr;
  REQUIRE(gpu.ops().mem_alloc(gpu.handle(), 0, 1 << 20, &device) == 0);
  std::vector<uint32_t> in(1 << 18), out(1 << 18, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint32_t>(i * 2654435761u);
  REQUIRE(gpu.ops().memcpy_sync(gpu.handle(), device, in.data(), 1 << 20) == 0);
  REQUIRE(gpu.ops().memcpy_sync(gpu.handle(), out.data(), device, 1 << 20) == 0);
  CHECK(in == out);
  // New device memory starts zeroed, as on every backend.
  void* fresh = nullptr;
  REQUIRE(gpu.ops().mem_alloc(gpu.handle(), 0, 4096, &fresh) == 0);
  std::vector<uint8_t> bytes(4096, 0xFF);
  REQUIRE(gpu.ops().memcpy_sync(gpu.handle(), bytes.data(), fresh, 4096) == 0);
  CHECK(std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; }));
  CHECK(gpu.ops().mem_free(gpu.handle(), 0, fresh) == 0);
  CHECK(gpu.ops().mem_free(gpu.handle(), 0, device) == 0);
}

TEST_CASE("a device that does not exist is named in the error") {
  Gpu gpu;
  void* device = nullptr;
  CHECK(gpu.ops().mem_alloc(gpu.handle(), 99, 4096, &device) == -ENODEV);
  CHECK(gpu.backend->last_error().find("device 99") != std::string::npos);
}

TEST_CASE("mapped host memory: the device pointer reaches the same bytes") {
  Gpu gpu;
  void* host = nullptr;
  void* device = nullptr;
  REQUIRE(gpu.ops().host_alloc_mapped(gpu.handle(), 8192, &host, &device) == 0);
  REQUIRE(device != nullptr);
  std::memset(host, 0x5A, 8192);
  std::vector<uint8_t> seen(8192, 0);
  REQUIRE(gpu.ops().memcpy_sync(gpu.handle(), seen.data(), device, 8192) == 0);
  CHECK(std::all_of(seen.begin(), seen.end(), [](uint8_t b) { return b == 0x5A; }));
  CHECK(gpu.ops().host_free_mapped(gpu.handle(), host) == 0);
}

TEST_CASE("IPC: a handle is exported; opening one's own handle is refused with a reason") {
  Gpu gpu;
  void* device = nullptr;
  REQUIRE(gpu.ops().mem_alloc(gpu.handle(), 0, 1 << 20, &device) == 0);
  courier_gpu_ipc_handle_v1 handle{};
  REQUIRE(gpu.ops().ipc_export(gpu.handle(), device, &handle) == 0);
  CHECK(std::any_of(std::begin(handle.bytes), std::end(handle.bytes),
                    [](uint8_t b) { return b != 0; }));
  void* mapped = nullptr;
  // CUDA maps a handle only in another process (the nic-ce tests do that).
  CHECK(gpu.ops().ipc_import(gpu.handle(), 0, &handle, &mapped) != 0);
  CHECK_FALSE(gpu.backend->last_error().empty());
  CHECK(gpu.ops().mem_free(gpu.handle(), 0, device) == 0);
}

TEST_CASE("dmabuf: an fd covering device memory, or a reason why not") {
  Gpu gpu;
  void* device = nullptr;
  REQUIRE(gpu.ops().mem_alloc(gpu.handle(), 0, 2 << 20, &device) == 0);
  int fd = -1;
  uint64_t offset = 0;
  int rc =
      gpu.ops().dmabuf_export(gpu.handle(), static_cast<char*>(device) + 4096, 8192, &fd, &offset);
  if ((gpu.backend->props().caps & COURIER_GPU_CAP_DMABUF) != 0) {
    INFO(gpu.backend->last_error());
    CHECK(rc == 0);
    CHECK(fd >= 0);
    CHECK(offset == 0);  // the pointer was page-aligned
    if (fd >= 0) close(fd);
  } else {
    CHECK(rc == -ENOTSUP);
    MESSAGE("dmabuf not offered: " << gpu.backend->last_error());
  }
  CHECK(gpu.ops().mem_free(gpu.handle(), 0, device) == 0);
}
