// HostServices: what the core lends to plugins through courier_host_services_v1.
// These functions are called from C code in the plugins, so no exception may
// leave them.
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "core/backend_instance.hpp"
#include "core/log.hpp"

namespace courier {

namespace {

// What the table's functions reach through their ctx argument.
struct ServiceContext {
  ServiceContext(Logger& logger, EnvLookup lookup) : log(logger), env(std::move(lookup)) {}

  Logger& log;
  EnvLookup env;

  // get_env hands out C strings that a plugin may keep for the lifetime of
  // the services, so a value, once handed out, is never changed or freed: a
  // variable whose value changed gets a new string. The deque never moves
  // its elements. Plugins may call get_env from several threads.
  std::mutex env_mutex;
  std::deque<std::string> env_values;
  std::unordered_map<std::string, const std::string*> env_latest;
  // Values the core derived (HostServices::derive), seen where the
  // environment does not set the variable.
  std::unordered_map<std::string, std::string> derived;

  // The GPU backend dmabuf_export asks; lent after the table was handed to
  // plugins (the GPU backend itself is initialized with it), so atomic.
  std::atomic<const GpuBackend*> gpu{nullptr};
  // The rank's GPU gpu_device answers, kNoGpuDevice until the core chose
  // it; set after plugins were handed the table, so atomic.
  static constexpr int64_t kNoGpuDevice = -1;
  std::atomic<int64_t> gpu_device{kNoGpuDevice};
};

LogLevel level_from_abi(int level) {
  if (level <= COURIER_LOG_ERROR) return LogLevel::error;
  if (level >= COURIER_LOG_TRACE) return LogLevel::trace;
  return static_cast<LogLevel>(level);
}

void host_log(void* ctx, int level, const char* backend, const char* message) {
  auto* state = static_cast<ServiceContext*>(ctx);
  try {
    LogLevel log_level = level_from_abi(level);
    if (!state->log.enabled(log_level)) return;
    state->log.write(log_level, backend != nullptr ? backend : "plugin",
                     message != nullptr ? message : "");
  } catch (...) {
    // Logging must never take the plugin down; a lost line is the lesser harm.
  }
}

const char* host_get_env(void* ctx, const char* name) {
  auto* state = static_cast<ServiceContext*>(ctx);
  if (name == nullptr) return nullptr;
  try {
    std::optional<std::string> value = state->env(name);
    std::lock_guard lock(state->env_mutex);
    if (!value) {
      auto derived = state->derived.find(name);
      if (derived == state->derived.end()) return nullptr;
      value = derived->second;
    }
    auto latest = state->env_latest.find(name);
    if (latest != state->env_latest.end() && *latest->second == *value) {
      return latest->second->c_str();
    }
    const std::string& stored = state->env_values.emplace_back(std::move(*value));
    state->env_latest[name] = &stored;
    return stored.c_str();
  } catch (...) {
    return nullptr;
  }
}

void* host_alloc(void* /*ctx*/, size_t size, size_t alignment) {
  if (alignment == 0) alignment = alignof(std::max_align_t);
  if ((alignment & (alignment - 1)) != 0) return nullptr;  // not a power of two
  // posix_memalign also wants a multiple of sizeof(void*).
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  void* memory = nullptr;
  if (posix_memalign(&memory, alignment, size == 0 ? 1 : size) != 0) return nullptr;
  return memory;
}

void host_free(void* /*ctx*/, void* ptr) { std::free(ptr); }

int host_dmabuf_export(void* ctx, const void* addr, size_t len, int* fd, uint64_t* offset) {
  auto* state = static_cast<ServiceContext*>(ctx);
  try {
    std::string why;
    int status = -EINVAL;
    const GpuBackend* gpu = state->gpu.load(std::memory_order_acquire);
    if (fd == nullptr || offset == nullptr) {
      why = "fd or offset is NULL";
    } else if (gpu == nullptr) {
      status = -EOPNOTSUPP;
      why = "no GPU backend is attached to these host services";
    } else {
      status = gpu->export_dmabuf(addr, len, fd, offset, &why);
    }
    // The plugin sees only the status; the reason goes to the log, where the
    // plugin's own line about falling back to another registration sits.
    if (status != COURIER_OK) {
      state->log.info("host", "dmabuf_export of {} bytes at {}: {}", len, addr, why);
    }
    return status;
  } catch (...) {
    return -ENOMEM;  // only formatting the reason allocates
  }
}

int host_gpu_device(void* ctx, uint32_t* device) {
  auto* state = static_cast<ServiceContext*>(ctx);
  if (device == nullptr) return -EINVAL;
  const int64_t chosen = state->gpu_device.load(std::memory_order_acquire);
  if (chosen == ServiceContext::kNoGpuDevice) return -EAGAIN;
  *device = static_cast<uint32_t>(chosen);
  return COURIER_OK;
}

}  // namespace

struct HostServices::State {
  State(Logger& log, EnvLookup env) : context(log, std::move(env)) {}

  ServiceContext context;
  courier_host_services_v1 table{};
};

HostServices::HostServices(Logger& log, EnvLookup env)
    : state_(std::make_unique<State>(log, std::move(env))) {
  courier_host_services_v1& table = state_->table;
  table.struct_size = sizeof(courier_host_services_v1);
  table.ctx = &state_->context;
  table.log = host_log;
  table.get_env = host_get_env;
  table.alloc = host_alloc;
  table.free = host_free;
  table.dmabuf_export = host_dmabuf_export;
  table.gpu_device = host_gpu_device;
}

HostServices::~HostServices() = default;

const courier_host_services_v1* HostServices::table() const { return &state_->table; }

std::optional<std::string> HostServices::env(std::string_view name) const {
  return state_->context.env(name);
}

void HostServices::derive(std::string name, std::string value) {
  std::lock_guard lock(state_->context.env_mutex);
  state_->context.derived[std::move(name)] = std::move(value);
}

void HostServices::lend_gpu(const GpuBackend* gpu) {
  state_->context.gpu.store(gpu, std::memory_order_release);
}

void HostServices::set_gpu_device(uint32_t device) {
  state_->context.gpu_device.store(device, std::memory_order_release);
}

}  // namespace courier
