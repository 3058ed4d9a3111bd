// The backend registry: finds plugin files, dlopens them, checks the ABI
// (exact major, struct_size covers every required entry) and records one
// clear reason for every candidate it rejects. Selection follows
// COURIER_GPU_BACKEND / COURIER_NIC_BACKEND: a name, a path, or "^a,b" to
// exclude names; empty means "every usable backend, best first".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "courier/abi/gpu_v1.h"
#include "courier/abi/nic_v1.h"

namespace courier {

class Logger;

enum class PluginKind { gpu, nic };
std::string_view to_string(PluginKind kind);

// One file the registry looked at, usable or not.
struct PluginCandidate {
  PluginKind kind = PluginKind::nic;
  std::string name;  // from the file name: libcourier-nic-NAME.so -> NAME
  std::string path;
  bool usable = false;
  std::string reason;  // why it was rejected (empty when usable)
  uint16_t abi_major = 0;
  uint16_t abi_minor = 0;
};

// A dlopen handle; closes on destruction.
class PluginLibrary;

struct NicPlugin {
  std::string name;
  std::string path;
  uint16_t abi_minor = 0;
  const courier_nic_plugin_v1* ops = nullptr;
  std::shared_ptr<PluginLibrary> library;
};

struct GpuPlugin {
  std::string name;
  std::string path;
  uint16_t abi_minor = 0;
  const courier_gpu_plugin_v1* ops = nullptr;
  std::shared_ptr<PluginLibrary> library;
};

class Registry {
 public:
  // Scans `search_path` (':'-separated directories, COURIER_BACKEND_PATH)
  // first, then the install's plugin directory (lib/courier beside
  // libcourier.so). A name found twice is taken from the first directory.
  Registry(std::string_view search_path, Logger& log);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Directories in search order, made absolute, each listed once.
  std::vector<std::string> search_dirs() const;
  // The install's plugin directory (the last of search_dirs() unless
  // COURIER_BACKEND_PATH already named it); "" if libcourier's location is
  // unknown.
  std::string default_dir() const;
  const std::vector<PluginCandidate>& candidates() const;
  const std::vector<NicPlugin>& nic_plugins() const;
  const std::vector<GpuPlugin>& gpu_plugins() const;

  // Usable plugins allowed by `spec` (COURIER_*_BACKEND semantics), in the
  // order they should be tried. A forced name or path that is missing or
  // unusable is an Error naming the variable, the name and the reason.
  // A path is loaded on first use and recorded in candidates(); the
  // returned pointers stay valid for the registry's lifetime. Not
  // thread-safe: select from one thread.
  std::vector<const NicPlugin*> nic_choices(std::string_view spec);
  std::vector<const GpuPlugin*> gpu_choices(std::string_view spec);

  // Every knob name declared by a usable plugin (for typo detection).
  std::vector<std::string> declared_knob_names() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace courier
