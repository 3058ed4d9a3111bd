// Initialized backends: RAII over a plugin's init()/fini(), plus the host
// services the core lends to plugins.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"
#include "core/gpu_features.hpp"
#include "core/gpu_parts.hpp"
#include "core/registry.hpp"

namespace courier {

class GpuBackend;

// The courier_host_services_v1 table handed to plugins: logging through a
// Logger, environment through an EnvLookup, aligned allocation, dmabuf
// export of GPU memory through the GPU backend lent with lend_gpu(), and the
// rank's GPU set with set_gpu_device(). A plugin may keep the table, so it
// must outlive every backend initialized with it. Its functions may be
// called from any thread.
class HostServices {
 public:
  HostServices(Logger& log, EnvLookup env);
  ~HostServices();
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;
  const courier_host_services_v1* table() const;
  // The environment plugins see (what get_env answers).
  std::optional<std::string> env(std::string_view name) const;
  // Makes get_env(name) answer `value` where the environment does not set
  // `name`: facts the core worked out for plugins (docs/plugin-abi.md,
  // "Derived variables"), e.g. COURIER_PAIRED_NICS.
  void derive(std::string name, std::string value);
  // The GPU backend whose memory dmabuf_export exports (nullptr: none, the
  // state of new services, where dmabuf_export answers -EOPNOTSUPP). The
  // Context lends its GPU before the NIC backend's init; `gpu` must outlive
  // every call plugins make, or be taken back with lend_gpu(nullptr).
  void lend_gpu(const GpuBackend* gpu);
  // The GPU this rank uses (core/device_choice.hpp), which gpu_device
  // answers from now on; before, it answers -EAGAIN. Set once per Context.
  void set_gpu_device(uint32_t device);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

class NicBackend {
 public:
  // Validates the plugin's enumerated knobs, then init() + query(). Throws
  // courier::Error naming the backend, its file and the plugin's reason.
  // `host` must outlive the backend. fini() runs in the destructor.
  NicBackend(const NicPlugin& plugin, const HostServices& host);
  ~NicBackend();
  NicBackend(const NicBackend&) = delete;
  NicBackend& operator=(const NicBackend&) = delete;

  const NicPlugin& plugin() const { return plugin_; }
  const courier_nic_plugin_v1* ops() const { return plugin_.ops; }
  void* handle() const { return handle_; }
  const courier_nic_props_v1& props() const { return props_; }
  // The plugin's post_atomic, or nullptr when it has none (or predates it).
  using PostAtomicFn = int (*)(void*, const courier_nic_atomic_v1*);
  PostAtomicFn post_atomic() const { return post_atomic_; }
  // The plugin's explanation of its last failure on this thread.
  std::string last_error() const;

 private:
  NicPlugin plugin_;
  void* handle_ = nullptr;
  courier_nic_props_v1 props_{};
  PostAtomicFn post_atomic_ = nullptr;
};

class GpuBackend {
 public:
  GpuBackend(const GpuPlugin& plugin, const HostServices& host);
  ~GpuBackend();
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  const GpuPlugin& plugin() const { return plugin_; }
  void* handle() const { return handle_; }
  // The plugin's properties; caps holds only the bits whose entries and
  // minor the plugin has.
  const courier_gpu_props_v1& props() const { return props_; }
  // Asks the plugin for its properties again. The core does once it chose
  // the rank's GPU (HostServices::set_gpu_device): a plugin's first query
  // runs before the choice, which needs its device count, so the properties
  // of one device (its name, dmabuf) described the device it used until
  // then; now they describe the chosen one. Throws naming the backend when
  // query fails or the device count changed.
  void requery();
  std::string last_error() const;
  // The plugin's entries in parts (GPU ABI 1.15, core/gpu_parts.hpp), the
  // same for every plugin minor: each part complete, an entry the plugin
  // lacks NULL. Call an entry only where supports() says its feature is
  // there (the runtime part's ABI 1.0 entries always are).
  const courier_gpu_runtime_part_v1& runtime() const { return parts_.runtime; }
  const courier_gpu_selftest_part_v1& selftest() const { return parts_.selftest; }
  const courier_gpu_ep_part_v1& ep() const { return parts_.ep; }
  // Whether the backend offers `feature`: its entries are there, its
  // capability bit is set, its jobs' fields are read.
  bool supports(GpuFeature feature) const {
    return parts_.features.test(static_cast<size_t>(feature));
  }
  // Whether the plugin speaks a GPU ABI older than `feature` (for messages:
  // "older than ep_set_stream (1.9)" rather than "does not set it").
  bool predates(GpuFeature feature) const { return plugin_.abi_minor < gpu_feature_minor(feature); }
  // Exports [addr, addr + len) of this backend's device memory as a dmabuf,
  // with the contract of courier_host_services_v1.dmabuf_export. When the
  // status is not COURIER_OK, *why says what refused it (this backend
  // lacking the entry or the capability, or the plugin's last_error).
  int export_dmabuf(const void* addr, size_t len, int* fd, uint64_t* offset,
                    std::string* why) const;

 private:
  // props_ as the plugin filled it, made safe to use: texts terminated,
  // parts_ built, capability bits without their entries cleared.
  void adopt_props();

  GpuPlugin plugin_;
  void* handle_ = nullptr;
  courier_gpu_props_v1 props_{};
  GpuParts parts_;
};

// Tries every choice of `spec` in order and returns the first that
// initializes; otherwise throws an Error listing each candidate's reason.
// A bad knob value is the user's mistake, not the backend's, so it is thrown
// at once instead of moving on to the next choice.
// `preferred` (topology's pick, core/topology_choice.hpp) is tried first
// when `spec` names nothing and a plugin of that name exists.
std::unique_ptr<NicBackend> open_nic_backend(Registry& registry, std::string_view spec,
                                             const HostServices& host, Logger& log,
                                             std::string_view preferred = {});
std::unique_ptr<GpuBackend> open_gpu_backend(Registry& registry, std::string_view spec,
                                             const HostServices& host, Logger& log);

// Why `value` is not accepted by `knob` ("expected one of a, b, c"), or
// std::nullopt when it is. Knobs without an `allowed` list accept anything.
std::optional<std::string> knob_value_error(const courier_knob_v1& knob, std::string_view value);

// Human-readable names of capability bits, e.g. {"rma_write", "write_imm"}.
std::vector<std::string> nic_capability_names(uint32_t caps);
std::vector<std::string> gpu_capability_names(uint32_t caps);
std::vector<std::string> memory_kind_names(uint32_t kinds);

}  // namespace courier
