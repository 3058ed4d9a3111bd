// Initialized backends: RAII over a plugin's init()/fini(), plus the host
// services the core lends to plugins.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"
#include "core/registry.hpp"

namespace courier {

class GpuBackend;

// The courier_host_services_v1 table handed to plugins: logging through a
// Logger, environment through an EnvLookup, aligned allocation, and dmabuf
// export of GPU memory through the GPU backend lent with lend_gpu(). A
// plugin may keep the table, so it must outlive every backend initialized
// with it. Its functions may be called from any thread.
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
  const courier_gpu_plugin_v1* ops() const { return plugin_.ops; }
  void* handle() const { return handle_; }
  const courier_gpu_props_v1& props() const { return props_; }
  std::string last_error() const;
  // Whether the minor-1 entry points (ipc_*, dmabuf_export, run_fifo_*)
  // exist; each is usable only where its capability bit is set too.
  bool has_minor1() const { return has_minor1_; }
  // Whether the minor-2 entry points (ep_*: the EP direct path) exist.
  bool has_minor2() const { return has_minor2_; }
  // Whether the minor-3 entry points (ep_proxy_*: the EP proxy path) exist.
  bool has_minor3() const { return has_minor3_; }
  // Whether ep_set_stream (minor 9: EP kernels on a caller's stream) exists.
  bool has_minor9() const { return has_minor9_; }
  // Whether ep_stream_capturing (minor 10: is the EP stream being captured) exists.
  bool has_minor10() const { return has_minor10_; }
  // Whether ep_copy (minor 11: a copy on the EP stream) exists.
  bool has_minor11() const { return has_minor11_; }
  // ep_counters, ep_stamp, ep_stamp_elapsed (benchmarks' figures).
  bool has_minor12() const { return has_minor12_; }
  // ep_hold (minor 14: a spin on the EP stream, so stamps time the GPU alone).
  bool has_minor14() const { return has_minor14_; }
  // Exports [addr, addr + len) of this backend's device memory as a dmabuf,
  // with the contract of courier_host_services_v1.dmabuf_export. When the
  // status is not COURIER_OK, *why says what refused it (this backend
  // lacking the entry or the capability, or the plugin's last_error).
  int export_dmabuf(const void* addr, size_t len, int* fd, uint64_t* offset,
                    std::string* why) const;

 private:
  GpuPlugin plugin_;
  void* handle_ = nullptr;
  courier_gpu_props_v1 props_{};
  bool has_minor1_ = false;
  bool has_minor2_ = false;
  bool has_minor3_ = false;
  bool has_minor9_ = false;
  bool has_minor10_ = false;
  bool has_minor11_ = false;
  bool has_minor12_ = false;
  bool has_minor14_ = false;
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
