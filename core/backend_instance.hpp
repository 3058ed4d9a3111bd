// Initialized backends: RAII over a plugin's init()/fini(), plus the host
// services the core lends to plugins.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/config.hpp"
#include "core/registry.hpp"

namespace courier {

// The courier_host_services_v1 table handed to plugins: logging through a
// Logger, environment through an EnvLookup, aligned allocation.
class HostServices {
 public:
  HostServices(Logger& log, EnvLookup env);
  ~HostServices();
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;
  const courier_host_services_v1* table() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

class NicBackend {
 public:
  // Validates the plugin's enumerated knobs, then init() + query(). Throws
  // courier::Error naming the backend, its file and the plugin's reason.
  NicBackend(const NicPlugin& plugin, const HostServices& host);
  ~NicBackend();
  NicBackend(const NicBackend&) = delete;
  NicBackend& operator=(const NicBackend&) = delete;

  const NicPlugin& plugin() const { return plugin_; }
  const courier_nic_plugin_v1* ops() const { return plugin_.ops; }
  void* handle() const { return handle_; }
  const courier_nic_props_v1& props() const { return props_; }
  // The plugin's explanation of its last failure on this thread.
  std::string last_error() const;

 private:
  NicPlugin plugin_;
  void* handle_ = nullptr;
  courier_nic_props_v1 props_{};
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

 private:
  GpuPlugin plugin_;
  void* handle_ = nullptr;
  courier_gpu_props_v1 props_{};
};

// Tries every choice of `spec` in order and returns the first that
// initializes; otherwise throws an Error listing each candidate's reason.
std::unique_ptr<NicBackend> open_nic_backend(Registry& registry, std::string_view spec,
                                             const HostServices& host, Logger& log);
std::unique_ptr<GpuBackend> open_gpu_backend(Registry& registry, std::string_view spec,
                                             const HostServices& host, Logger& log);

// Human-readable names of capability bits, e.g. {"rma_write", "write_imm"}.
std::vector<std::string> nic_capability_names(uint32_t caps);
std::vector<std::string> gpu_capability_names(uint32_t caps);
std::vector<std::string> memory_kind_names(uint32_t kinds);

}  // namespace courier
