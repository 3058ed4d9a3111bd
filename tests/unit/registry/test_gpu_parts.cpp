// The GPU table in parts (GPU ABI 1.15): plugins built as older minors'
// flat tables load and GpuBackend::supports answers as the core's minor
// checks did; a plugin with parts is called through them alone, each read up
// to its struct_size; gpu-host provides parts and the same flat entries.
// The plugins are tests/plugins/gpu_table.c, built as several minors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend_instance.hpp"
#include "core/gpu_parts.hpp"
#include "test_support.hpp"

namespace courier::test {
namespace {

const std::string kTableDir = kTestPluginDir + "/gpu-tables";

// Whether a part's entry is the same function as another (doctest cannot
// print function pointers), or absent.
template <class Entry>
bool same(Entry a, Entry b) {
  return a == b;
}
template <class Entry>
bool absent(Entry entry) {
  return entry == nullptr;
}

// The names of the features `gpu` supports, in GpuFeature's order.
std::vector<std::string> supported(const GpuBackend& gpu) {
  std::vector<std::string> names;
  for (size_t i = 0; i < kGpuFeatureCount; ++i) {
    const auto feature = static_cast<GpuFeature>(i);
    if (gpu.supports(feature)) names.emplace_back(to_string(feature));
  }
  return names;
}

struct Opened {
  explicit Opened(const std::string& dir, const std::string& name)
      : registry(dir, log.logger()),
        host(log.logger(), FakeEnv().lookup()),
        gpu(open_gpu_backend(registry, name, host, log.logger())) {}
  CapturedLog log;
  Registry registry;
  HostServices host;
  std::unique_ptr<GpuBackend> gpu;
};

// What every variant of gpu_table.c does through the runtime part: memory
// and copies work, kernels are refused naming the entry.
void check_runtime_calls(const GpuBackend& gpu) {
  const courier_gpu_runtime_part_v1& runtime = gpu.runtime();
  CHECK(runtime.struct_size == sizeof(courier_gpu_runtime_part_v1));
  void* memory = nullptr;
  REQUIRE(runtime.mem_alloc(gpu.handle(), 0, 64, &memory) == COURIER_OK);
  const char text[] = "through the runtime part";
  REQUIRE(runtime.memcpy_sync(gpu.handle(), memory, text, sizeof text) == COURIER_OK);
  CHECK(std::strcmp(static_cast<const char*>(memory), text) == 0);
  CHECK(runtime.mem_free(gpu.handle(), 0, memory) == COURIER_OK);
  CHECK(runtime.mem_alloc(gpu.handle(), 3, 64, &memory) == -ENODEV);
  courier_host_kernel_launch_v1 launch{};
  CHECK(runtime.launch_host_kernel(gpu.handle(), &launch) == -ENOTSUP);
  CHECK(gpu.last_error() == gpu.plugin().name + ": launch_host_kernel runs no kernels");
}

TEST_CASE("a plugin built against GPU ABI 1.14 (the flat table) loads and keeps every feature") {
  Opened opened(kTableDir, "flat14");
  REQUIRE(opened.gpu);
  const GpuBackend& gpu = *opened.gpu;
  const courier_gpu_plugin_v1& flat = *gpu.plugin().ops;
  REQUIRE(gpu.plugin().abi_minor == 14);
  REQUIRE(flat.header.struct_size == offsetof(courier_gpu_plugin_v1, runtime));

  // What has_minor1() .. has_minor14() and the capability bits said.
  CHECK(supported(gpu) ==
        std::vector<std::string>{"ipc", "dmabuf_export", "fifo_kernels", "ep_layout", "ep_direct",
                                 "ep_proxy", "ep_fp8_pow2", "ep_logfmt", "ep_counts_first",
                                 "ep_proxy_sources", "ep_set_stream", "ep_capture_query",
                                 "ep_scales_layout", "ep_copy", "ep_counters", "ep_fused",
                                 "ep_local_rows", "ep_hold"});
  CHECK(gpu_capability_names(gpu.props().caps) ==
        std::vector<std::string>{"mapped_host", "ipc", "dmabuf", "fifo_kernels", "graphs",
                                 "ep_kernels", "ep_direct", "ep_proxy", "ep_fp8_pow2", "ep_logfmt",
                                 "ep_fused", "ep_local_rows"});

  // The core built the parts from the flat fields.
  CHECK(same(gpu.runtime().ipc_export, flat.ipc_export));
  CHECK(same(gpu.runtime().dmabuf_export, flat.dmabuf_export));
  CHECK(gpu.selftest().struct_size == sizeof(courier_gpu_selftest_part_v1));
  CHECK(same(gpu.selftest().run_command_lists, flat.run_command_lists));
  CHECK(gpu.ep().struct_size == sizeof(courier_gpu_ep_part_v1));
  CHECK(same(gpu.ep().run_ep_layout, flat.run_ep_layout));
  CHECK(same(gpu.ep().ep_reduce, flat.ep_reduce));
  CHECK(same(gpu.ep().ep_sync, flat.ep_sync));
  CHECK(same(gpu.ep().ep_proxy_reduce, flat.ep_proxy_reduce));
  CHECK(same(gpu.ep().ep_set_stream, flat.ep_set_stream));
  CHECK(same(gpu.ep().ep_hold, flat.ep_hold));
  check_runtime_calls(gpu);

  // Calls through the parts reach the plugin's entries.
  courier_gpu_ep_route_v1 route{};
  route.struct_size = sizeof route;
  CHECK(gpu.ep().ep_route(gpu.handle(), &route) == -ENOTSUP);
  CHECK(gpu.last_error() == "flat14: ep_route runs no kernels");
  courier_gpu_command_lists_v1 lists{};
  CHECK(gpu.selftest().run_command_lists(gpu.handle(), &lists) == -ENOTSUP);
  CHECK(gpu.last_error() == "flat14: run_command_lists runs no kernels");
  int capturing = -1;
  CHECK(gpu.ep().ep_stream_capturing(gpu.handle(), 0, &capturing) == COURIER_OK);
  CHECK(capturing == 0);
  CHECK(gpu.ep().ep_hold(gpu.handle(), 1, 10) == -ENODEV);
  CHECK(gpu.last_error() == "flat14: ep_hold names a device that does not exist");
}

TEST_CASE("a 1.14 plugin without ep_set_stream: none of minors 9 to 14's entries, as before") {
  Opened opened(kTableDir, "flat14nostream");
  REQUIRE(opened.gpu);
  const GpuBackend& gpu = *opened.gpu;
  // ep_stream_capturing .. ep_hold are set, but each minor's entry counted
  // only with those of the minors before it.
  REQUIRE(!absent(gpu.plugin().ops->ep_copy));
  CHECK(supported(gpu) == std::vector<std::string>{
                              "ipc", "dmabuf_export", "fifo_kernels", "ep_layout", "ep_direct",
                              "ep_proxy", "ep_fp8_pow2", "ep_logfmt", "ep_counts_first",
                              "ep_proxy_sources", "ep_scales_layout", "ep_fused", "ep_local_rows"});
  CHECK(absent(gpu.ep().ep_set_stream));
  CHECK(absent(gpu.ep().ep_stream_capturing));
  CHECK(absent(gpu.ep().ep_copy));
  CHECK(absent(gpu.ep().ep_counters));
  CHECK(absent(gpu.ep().ep_hold));
  CHECK(same(gpu.ep().ep_sync, gpu.plugin().ops->ep_sync));
  check_runtime_calls(gpu);
}

TEST_CASE("a 1.8 plugin: nothing past its struct_size is read, later minors' bits are cleared") {
  Opened opened(kTableDir, "flat8");
  REQUIRE(opened.gpu);
  const GpuBackend& gpu = *opened.gpu;
  const courier_gpu_plugin_v1& flat = *gpu.plugin().ops;
  REQUIRE(flat.header.struct_size == offsetof(courier_gpu_plugin_v1, ep_set_stream));
  REQUIRE(!absent(flat.ep_set_stream));  // there, but past the struct the plugin declares
  CHECK(supported(gpu) == std::vector<std::string>{"ipc", "dmabuf_export", "fifo_kernels",
                                                   "ep_layout", "ep_direct", "ep_proxy",
                                                   "ep_fp8_pow2", "ep_logfmt", "ep_counts_first",
                                                   "ep_proxy_sources"});
  CHECK(gpu_capability_names(gpu.props().caps) ==
        std::vector<std::string>{"mapped_host", "ipc", "dmabuf", "fifo_kernels", "graphs",
                                 "ep_kernels", "ep_direct", "ep_proxy", "ep_fp8_pow2",
                                 "ep_logfmt"});
  CHECK(same(gpu.ep().ep_proxy_ll_receive, flat.ep_proxy_ll_receive));
  CHECK(absent(gpu.ep().ep_set_stream));
  CHECK(absent(gpu.ep().ep_hold));
  CHECK(gpu.predates(GpuFeature::ep_set_stream));
  CHECK_FALSE(gpu.predates(GpuFeature::ep_proxy_sources));
  check_runtime_calls(gpu);
}

TEST_CASE(
    "the fused features: a plugin of their minor keeps them, older ones that claim them do not") {
  // Every table claims COURIER_GPU_CAP_EP_HT_FUSED (minor 16),
  // COURIER_GPU_CAP_EP_COMBINE_FUSED (minor 17) and
  // COURIER_GPU_CAP_EP_DONE_MARK (minor 18); only a plugin of that minor or
  // later knows the job fields that the core would set with them.
  struct Fused {
    GpuFeature feature;
    const char* name;
    uint16_t minor;
  };
  for (const Fused f : {Fused{GpuFeature::ep_ht_fused, "ep_ht_fused", 16},
                        Fused{GpuFeature::ep_combine_fused, "ep_combine_fused", 17},
                        Fused{GpuFeature::ep_done_mark, "ep_done_mark", 18}}) {
    CAPTURE(f.name);
    CHECK(gpu_feature_minor(f.feature) == f.minor);
    for (const auto& [table, minor] :
         {std::pair{"parts18", 18}, std::pair{"parts17", 17}, std::pair{"parts16", 16},
          std::pair{"parts", 15}, std::pair{"flat14", 14}}) {
      CAPTURE(table);
      Opened opened(kTableDir, table);
      REQUIRE(opened.gpu);
      CHECK(opened.gpu->plugin().abi_minor == minor);
      const bool kept = minor >= f.minor;
      CHECK(opened.gpu->supports(f.feature) == kept);
      const std::vector<std::string> caps = gpu_capability_names(opened.gpu->props().caps);
      CHECK((std::find(caps.begin(), caps.end(), f.name) != caps.end()) == kept);
    }
  }
}

TEST_CASE("a 1.15 plugin is called through its parts alone, each read up to its struct_size") {
  Opened opened(kTableDir, "parts");
  REQUIRE(opened.gpu);
  const GpuBackend& gpu = *opened.gpu;
  const courier_gpu_plugin_v1& table = *gpu.plugin().ops;
  REQUIRE(gpu.plugin().abi_minor == kGpuPartsMinor);
  REQUIRE(table.runtime != nullptr);
  REQUIRE(table.selftest == nullptr);
  REQUIRE(table.ep != nullptr);
  REQUIRE(table.ep->struct_size == offsetof(courier_gpu_ep_part_v1, ep_hold));

  // No selftest part: no fifo_kernels, though the flat fields and the
  // capability bits claim them; ep_hold lies past the EP part's end.
  CHECK(supported(gpu) ==
        std::vector<std::string>{"ipc", "dmabuf_export", "ep_layout", "ep_direct", "ep_proxy",
                                 "ep_fp8_pow2", "ep_logfmt", "ep_counts_first", "ep_proxy_sources",
                                 "ep_set_stream", "ep_capture_query", "ep_scales_layout", "ep_copy",
                                 "ep_counters", "ep_fused", "ep_local_rows"});
  CHECK(gpu_capability_names(gpu.props().caps) ==
        std::vector<std::string>{"mapped_host", "ipc", "dmabuf", "graphs", "ep_kernels",
                                 "ep_direct", "ep_proxy", "ep_fp8_pow2", "ep_logfmt", "ep_fused",
                                 "ep_local_rows"});
  CHECK(!absent(table.run_command_lists));
  CHECK(absent(gpu.selftest().run_command_lists));
  CHECK(!absent(table.ep_hold));
  CHECK(!absent(table.ep->ep_hold));
  CHECK(absent(gpu.ep().ep_hold));
  CHECK(same(gpu.ep().ep_route, table.ep->ep_route));
  CHECK(same(gpu.ep().ep_stamp_elapsed, table.ep->ep_stamp_elapsed));
  CHECK(same(gpu.runtime().dmabuf_export, table.runtime->dmabuf_export));
  check_runtime_calls(gpu);

  courier_gpu_ep_proxy_combine_v1 combine{};
  combine.struct_size = sizeof combine;
  CHECK(gpu.ep().ep_proxy_combine(gpu.handle(), &combine) == -ENOTSUP);
  CHECK(gpu.last_error() == "parts: ep_proxy_combine runs no kernels");
  uint64_t ns = 1;
  CHECK(gpu.ep().ep_stamp_elapsed(gpu.handle(), 0, &ns) == COURIER_OK);
  CHECK(ns == 0);
}

TEST_CASE("the registry rejects a 1.15 plugin without a runtime part, naming it") {
  CapturedLog log;
  Registry registry(kTableDir, log.logger());
  const std::string path = canonical(kTableDir + "/libcourier-gpu-noruntime.so");
  bool seen = false;
  for (const PluginCandidate& candidate : registry.candidates()) {
    if (candidate.path != path) continue;
    seen = true;
    CHECK_FALSE(candidate.usable);
    CHECK(candidate.reason ==
          "speaks GPU ABI 1.15 but its runtime part is NULL (required from 1.15)");
  }
  CHECK(seen);
  HostServices host(log.logger(), FakeEnv().lookup());
  const std::string error =
      error_from([&] { open_gpu_backend(registry, "noruntime", host, log.logger()); });
  CHECK(error.find("runtime part is NULL") != std::string::npos);
}

TEST_CASE("gpu-host provides the parts, and the same entries in the flat fields for older cores") {
  Opened opened(kRealPluginDir, "host");
  REQUIRE(opened.gpu);
  const GpuBackend& gpu = *opened.gpu;
  const courier_gpu_plugin_v1& table = *gpu.plugin().ops;
  REQUIRE(gpu.plugin().abi_minor == COURIER_GPU_ABI_MINOR);
  REQUIRE(table.runtime != nullptr);
  REQUIRE(table.selftest != nullptr);
  REQUIRE(table.ep != nullptr);
  CHECK(table.runtime->struct_size == sizeof(courier_gpu_runtime_part_v1));
  CHECK(table.selftest->struct_size == sizeof(courier_gpu_selftest_part_v1));
  CHECK(table.ep->struct_size == sizeof(courier_gpu_ep_part_v1));
  CHECK(supported(gpu) ==
        std::vector<std::string>{"host_kernels", "fifo_kernels", "ep_layout", "ep_proxy",
                                 "ep_fp8_pow2", "ep_logfmt", "ep_counts_first", "ep_proxy_sources",
                                 "ep_set_stream", "ep_capture_query", "ep_scales_layout", "ep_copy",
                                 "ep_counters", "ep_hold"});
  CHECK(same(gpu.runtime().mem_alloc, table.runtime->mem_alloc));
  CHECK(absent(gpu.runtime().ipc_export));
  CHECK(same(gpu.selftest().run_fifo_producers, table.selftest->run_fifo_producers));
  CHECK(absent(gpu.ep().ep_route));
  CHECK(same(gpu.ep().ep_proxy_ht_dispatch, table.ep->ep_proxy_ht_dispatch));
  CHECK(same(gpu.ep().ep_hold, table.ep->ep_hold));

  // A core of 1.14 reads the flat fields alone: it finds the same entries
  // and the same features (less none).
  courier_gpu_plugin_v1 as_older = table;
  as_older.header.struct_size = offsetof(courier_gpu_plugin_v1, runtime);
  as_older.header.abi_minor = kGpuPartsMinor - 1;
  const GpuParts older = gpu_parts_of(as_older, kGpuPartsMinor - 1, gpu.props().caps);
  CHECK(older.features == gpu_parts_of(table, kGpuPartsMinor, gpu.props().caps).features);
  CHECK(older.caps == gpu.props().caps);
  CHECK(std::memcmp(&older.runtime, &gpu.runtime(), sizeof older.runtime) == 0);
  CHECK(std::memcmp(&older.selftest, &gpu.selftest(), sizeof older.selftest) == 0);
  CHECK(std::memcmp(&older.ep, &gpu.ep(), sizeof older.ep) == 0);
}

TEST_CASE("every feature has a name and the minor that brought it") {
  CHECK(to_string(GpuFeature::ep_set_stream) == "ep_set_stream");
  CHECK(gpu_feature_minor(GpuFeature::ep_set_stream) == 9);
  CHECK(gpu_feature_minor(GpuFeature::ep_direct) == 2);
  CHECK(gpu_feature_minor(GpuFeature::ep_hold) == 14);
  for (size_t i = 0; i < kGpuFeatureCount; ++i) {
    const auto feature = static_cast<GpuFeature>(i);
    CAPTURE(i);
    CHECK_FALSE(to_string(feature).empty());
    CHECK(gpu_feature_minor(feature) <= COURIER_GPU_ABI_MINOR);
  }
}

}  // namespace
}  // namespace courier::test
