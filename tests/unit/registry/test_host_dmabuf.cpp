// The host services' dmabuf_export: NIC plugins find it with
// COURIER_HOST_HAS, and the core answers it through the GPU backend lent to
// the services, or with -EOPNOTSUPP and a logged reason when it cannot.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/backend_instance.hpp"
#include "test_support.hpp"

namespace courier::test {
namespace {

// The test plugin directory holding the sim built with SIM_GPU_DMABUF
// (tests/plugins/CMakeLists.txt).
const std::string kDmabufPluginDir = kTestPluginDir + "/dmabuf";

// Device memory of a GPU backend, freed on every path.
class DeviceBuffer {
 public:
  DeviceBuffer(const GpuBackend& gpu, size_t bytes) : gpu_(gpu) {
    REQUIRE(gpu.runtime().mem_alloc(gpu.handle(), 0, bytes, &ptr_) == COURIER_OK);
  }
  ~DeviceBuffer() { gpu_.runtime().mem_free(gpu_.handle(), 0, ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* data() const { return static_cast<char*>(ptr_); }

 private:
  const GpuBackend& gpu_;
  void* ptr_ = nullptr;
};

struct Export {
  int status;
  int fd;
  uint64_t offset;
};

Export export_dmabuf(const courier_host_services_v1* table, const void* addr, size_t len) {
  Export result{0, -1, 0};
  result.status = table->dmabuf_export(table->ctx, addr, len, &result.fd, &result.offset);
  return result;
}

TEST_CASE("host services: COURIER_HOST_HAS sees dmabuf_export; without a GPU it is refused") {
  CapturedLog log;
  HostServices host(log.logger(), FakeEnv().lookup());
  const courier_host_services_v1* table = host.table();
  REQUIRE(COURIER_HOST_HAS(table, dmabuf_export));

  char memory[64] = {};
  Export result = export_dmabuf(table, memory, sizeof memory);
  CHECK(result.status == -EOPNOTSUPP);
  CHECK(result.fd == -1);  // untouched
  CHECK(log.lines_containing("dmabuf_export of 64 bytes at ").size() == 1);
  CHECK(log.lines_containing("no GPU backend is attached to these host services").size() == 1);

  int fd = -1;
  CHECK(table->dmabuf_export(table->ctx, memory, sizeof memory, &fd, nullptr) == -EINVAL);
  CHECK(log.lines_containing("fd or offset is NULL").size() == 1);
}

TEST_CASE("COURIER_HOST_HAS: a table from before dmabuf_export does not carry it") {
  CapturedLog log;
  HostServices host(log.logger(), FakeEnv().lookup());
  courier_host_services_v1 older = *host.table();
  older.struct_size = offsetof(courier_host_services_v1, dmabuf_export);
  CHECK_FALSE(COURIER_HOST_HAS(&older, dmabuf_export));
  courier_host_services_v1 unset = *host.table();
  unset.dmabuf_export = nullptr;
  CHECK_FALSE(COURIER_HOST_HAS(&unset, dmabuf_export));
}

TEST_CASE("host services with gpu-host lent: -EOPNOTSUPP, the reason names the backend") {
  CapturedLog log;
  Registry registry(kRealPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "host", host, log.logger());
  REQUIRE(gpu);
  REQUIRE(gpu->plugin().name == "host");
  host.lend_gpu(gpu.get());
  DeviceBuffer buffer(*gpu, 8192);

  Export result = export_dmabuf(host.table(), buffer.data() + 100, 4000);
  CHECK(result.status == -EOPNOTSUPP);
  CHECK(result.fd == -1);
  CHECK(log.lines_containing("GPU backend 'host' cannot export dmabuf: it does not report the "
                             "dmabuf capability")
            .size() == 1);

  // Taken back: the services no longer reach the backend.
  host.lend_gpu(nullptr);
  CHECK(export_dmabuf(host.table(), buffer.data(), 4000).status == -EOPNOTSUPP);
  CHECK(log.lines_containing("no GPU backend is attached").size() == 1);
}

TEST_CASE("a GPU plugin older than dmabuf_export (ABI 1.0) still loads; export is refused") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "sim", host, log.logger());
  REQUIRE(gpu);
  REQUIRE(gpu->plugin().abi_minor == 0);
  CHECK_FALSE(gpu->supports(GpuFeature::dmabuf_export));
  CHECK(gpu->predates(GpuFeature::dmabuf_export));
  host.lend_gpu(gpu.get());
  DeviceBuffer buffer(*gpu, 4096);

  // The core must not read the entry: the plugin's struct ends before it.
  CHECK(export_dmabuf(host.table(), buffer.data(), 4096).status == -EOPNOTSUPP);
  CHECK(log.lines_containing("GPU backend 'sim' cannot export dmabuf: its plugin speaks GPU ABI "
                             "1.0, older than dmabuf_export (1.1)")
            .size() == 1);
}

TEST_CASE("host services export through a GPU plugin that can: its fd and offset come back") {
  CapturedLog log;
  Registry registry(kDmabufPluginDir, log.logger());
  HostServices host(log.logger(), FakeEnv().lookup());
  std::unique_ptr<GpuBackend> gpu = open_gpu_backend(registry, "sim", host, log.logger());
  REQUIRE(gpu);
  REQUIRE((gpu->props().caps & COURIER_GPU_CAP_DMABUF) != 0);
  host.lend_gpu(gpu.get());
  DeviceBuffer buffer(*gpu, 3 * 4096);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));

  // The sim answers as a GPU backend does: the dmabuf starts at the page
  // holding addr, and offset is addr's distance from that page.
  const char* addr = buffer.data() + 4096 + 7;
  Export result = export_dmabuf(host.table(), addr, 1000);
  REQUIRE(result.status == COURIER_OK);
  REQUIRE(result.fd >= 0);
  CHECK(result.offset == reinterpret_cast<uintptr_t>(addr) % page);
  struct stat info {};
  CHECK(fstat(result.fd, &info) == 0);
  CHECK(static_cast<uint64_t>(info.st_size) >= result.offset + 1000);
  CHECK(close(result.fd) == 0);
  CHECK(log.lines_containing("dmabuf_export").empty());

  // The plugin's refusal comes back as its status, its reason in the log.
  CHECK(export_dmabuf(host.table(), addr, 0).status == -EINVAL);
  CHECK(log.lines_containing("GPU backend 'sim': sim: dmabuf_export: NULL or empty range").size() ==
        1);
}

}  // namespace
}  // namespace courier::test
