// NicBackend / GpuBackend: a plugin after init(), until fini(). And the
// selection loop that tries the registry's choices in order.
#include "core/backend_instance.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <system_error>

#include "core/check.hpp"
#include "core/log.hpp"

namespace courier {

namespace {

constexpr std::string_view kComponent = "backend";

std::vector<std::string> split_allowed(std::string_view allowed) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start <= allowed.size()) {
    size_t end = allowed.find('|', start);
    if (end == std::string_view::npos) end = allowed.size();
    words.emplace_back(allowed.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

// The plugin's own explanation; the ABI promises a string, but a plugin that
// breaks that promise must not crash the message that reports it.
std::string reason_from(const char* text) {
  return text != nullptr && text[0] != '\0' ? text : "(the plugin gave no reason)";
}

std::string describe_status(int status) {
  if (status < 0) {
    return fmt::format("status {}: {}", status,
                       std::error_code(-status, std::generic_category()).message());
  }
  return fmt::format("status {}", status);
}

// Checks the environment the plugin will see against every enumerated knob
// it declares, before init() acts on a value it may not expect.
void validate_knobs(std::string_view label, const std::string& backend,
                    const courier_knob_v1* knobs, uint32_t count, const HostServices& host) {
  for (uint32_t i = 0; i < count; ++i) {
    const courier_knob_v1& knob = knobs[i];
    std::optional<std::string> value = host.env(knob.name);
    if (!value || value->empty()) continue;  // set but empty means the default
    if (std::optional<std::string> error = knob_value_error(knob, *value)) {
      fail("{}='{}' is invalid for {} backend '{}': {}", knob.name, *value, label, backend, *error);
    }
  }
}

// The part NicBackend and GpuBackend share: knobs, init, query.
template <class Plugin, class Props>
void* initialize(std::string_view label, const Plugin& plugin, const HostServices& host,
                 Props& props) {
  const auto* ops = plugin.ops;
  validate_knobs(label, plugin.name, ops->knobs, ops->num_knobs, host);
  void* handle = nullptr;
  int status = ops->init(host.table(), &handle);
  if (status != COURIER_OK) {
    fail("{} backend '{}' ({}) failed to initialize: {} ({})", label, plugin.name, plugin.path,
         reason_from(ops->last_error(nullptr)), describe_status(status));
  }
  props = Props{};
  props.struct_size = sizeof(Props);
  status = ops->query(handle, &props);
  if (status != COURIER_OK) {
    std::string reason = reason_from(ops->last_error(handle));
    ops->fini(handle);
    fail("{} backend '{}' ({}) initialized, but query() failed: {} ({})", label, plugin.name,
         plugin.path, reason, describe_status(status));
  }
  return handle;
}

// Plugins fill fixed-size text fields; make sure they end, whatever was written.
template <size_t N>
void terminate(char (&text)[N]) {
  text[N - 1] = '\0';
}

// "searched /a, /b; rejected: x (reason), ..." for an empty choice list.
std::string search_summary(const Registry& registry, PluginKind kind) {
  std::vector<std::string> rejected;
  for (const PluginCandidate& candidate : registry.candidates()) {
    if (candidate.kind == kind && !candidate.usable) {
      rejected.push_back(fmt::format("{} ({})", candidate.path, candidate.reason));
    }
  }
  std::vector<std::string> dirs = registry.search_dirs();
  std::string summary =
      fmt::format("searched {}",
                  dirs.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(dirs, ", ")));
  if (!rejected.empty()) summary += fmt::format("; rejected: {}", fmt::join(rejected, "; "));
  return summary;
}

template <class Backend, class Plugin>
std::unique_ptr<Backend> open_first(std::string_view label, std::string_view variable,
                                    PluginKind kind, const Registry& registry,
                                    const std::vector<const Plugin*>& choices,
                                    std::string_view spec, const HostServices& host, Logger& log) {
  std::string allowed_by = spec.empty() ? "" : fmt::format(" allowed by {}={}", variable, spec);
  if (choices.empty()) {
    fail("no usable {} backend{} ({})", label, allowed_by, search_summary(registry, kind));
  }
  std::vector<std::string> failures;
  for (const Plugin* plugin : choices) {
    // Outside the try: a bad knob value must stop start-up, not be skipped.
    validate_knobs(label, plugin->name, plugin->ops->knobs, plugin->ops->num_knobs, host);
    try {
      auto backend = std::make_unique<Backend>(*plugin, host);
      log.info(kComponent, "using {} backend '{}' ({})", label, plugin->name, plugin->path);
      return backend;
    } catch (const Error& error) {
      log.info(kComponent, "{}; trying the next one", error.what());
      failures.emplace_back(error.what());
    }
  }
  fail("no {} backend{} could be initialized: {}", label, allowed_by, fmt::join(failures, "; "));
}

}  // namespace

std::optional<std::string> knob_value_error(const courier_knob_v1& knob, std::string_view value) {
  if (knob.allowed == nullptr) return std::nullopt;
  std::string_view spec = knob.allowed;
  if (size_t dots = spec.find(".."); dots != std::string_view::npos) {
    // "min..max": an integer range.
    auto parse = [](std::string_view text, long long* out) {
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
      return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
    };
    long long min = 0, max = 0, number = 0;
    if (!parse(spec.substr(0, dots), &min) || !parse(spec.substr(dots + 2), &max)) {
      return fmt::format("the plugin declares an unreadable range '{}'", spec);
    }
    if (parse(value, &number) && number >= min && number <= max) return std::nullopt;
    return fmt::format("expected an integer in [{}, {}]", min, max);
  }
  std::vector<std::string> allowed = split_allowed(knob.allowed);
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return std::nullopt;
  return fmt::format("expected one of {}", fmt::join(allowed, ", "));
}

NicBackend::NicBackend(const NicPlugin& plugin, const HostServices& host) : plugin_(plugin) {
  handle_ = initialize("NIC", plugin_, host, props_);
  terminate(props_.device);
  terminate(props_.pci_address);
  // Atomics came with minor 1: an older plugin's struct ends before
  // post_atomic, and its query() left the minor-1 props untouched.
  const auto* ops = plugin_.ops;
  const size_t needed = offsetof(courier_nic_plugin_v1, post_atomic) + sizeof ops->post_atomic;
  if (plugin_.abi_minor >= 1 && ops->header.struct_size >= needed) post_atomic_ = ops->post_atomic;
  if (post_atomic_ == nullptr) {
    props_.atomic_ops = 0;
    props_.atomic_native = 0;
  }
  if (plugin_.abi_minor < 1) props_.caps_with_atomics = props_.caps;
}

NicBackend::~NicBackend() { plugin_.ops->fini(handle_); }

std::string NicBackend::last_error() const { return reason_from(plugin_.ops->last_error(handle_)); }

GpuBackend::GpuBackend(const GpuPlugin& plugin, const HostServices& host) : plugin_(plugin) {
  handle_ = initialize("GPU", plugin_, host, props_);
  adopt_props();
}

void GpuBackend::requery() {
  courier_gpu_props_v1 props{};
  props.struct_size = sizeof props;
  const int status = plugin_.ops->query(handle_, &props);
  if (status != COURIER_OK) {
    fail("GPU backend '{}' ({}) failed to describe the chosen GPU: query(): {} ({})", plugin_.name,
         plugin_.path, reason_from(plugin_.ops->last_error(handle_)), describe_status(status));
  }
  if (props.device_count != props_.device_count) {
    fail("GPU backend '{}' ({}) reported {} device(s), then {} when asked again", plugin_.name,
         plugin_.path, props_.device_count, props.device_count);
  }
  props_ = props;
  adopt_props();
}

void GpuBackend::adopt_props() {
  terminate(props_.device_name);
  terminate(props_.no_device_reason);
  // From here on the core sees the plugin's parts alone; capability bits
  // whose entries (or minor) the plugin lacks are not to be believed.
  parts_ = gpu_parts_of(*plugin_.ops, plugin_.abi_minor, props_.caps);
  props_.caps = parts_.caps;
}

GpuBackend::~GpuBackend() { plugin_.ops->fini(handle_); }

int GpuBackend::export_dmabuf(const void* addr, size_t len, int* fd, uint64_t* offset,
                              std::string* why) const {
  if (!supports(GpuFeature::dmabuf_export)) {
    *why = predates(GpuFeature::dmabuf_export)
               ? fmt::format(
                     "GPU backend '{}' cannot export dmabuf: its plugin speaks GPU ABI 1.{}, "
                     "older than dmabuf_export (1.{})",
                     plugin_.name, plugin_.abi_minor, gpu_feature_minor(GpuFeature::dmabuf_export))
               : fmt::format(
                     "GPU backend '{}' cannot export dmabuf: it does not report the dmabuf "
                     "capability (its memory, driver or device has no dmabuf export)",
                     plugin_.name);
    return -EOPNOTSUPP;
  }
  // The ABI's entry predates const-correct pointers; it does not write
  // through ptr.
  int status = parts_.runtime.dmabuf_export(handle_, const_cast<void*>(addr), len, fd, offset);
  if (status != COURIER_OK) {
    *why = fmt::format("GPU backend '{}': {}", plugin_.name,
                       reason_from(plugin_.ops->last_error(handle_)));
  }
  return status;
}

std::string GpuBackend::last_error() const { return reason_from(plugin_.ops->last_error(handle_)); }

std::unique_ptr<NicBackend> open_nic_backend(Registry& registry, std::string_view spec,
                                             const HostServices& host, Logger& log,
                                             std::string_view preferred) {
  std::vector<const NicPlugin*> choices = registry.nic_choices(spec);
  if (spec.empty() && !preferred.empty()) {
    std::stable_partition(choices.begin(), choices.end(),
                          [&](const NicPlugin* plugin) { return plugin->name == preferred; });
  }
  // A backend that reaches only its own host (COURIER_NIC_CAP_HOST_LOCAL) is
  // taken only when nothing else initializes: the core cannot know yet
  // whether the job stays on one host. Naming it in the spec still works.
  std::unique_ptr<NicBackend> host_local;
  while (!choices.empty()) {
    std::unique_ptr<NicBackend> backend;
    try {
      backend = open_first<NicBackend>("NIC", "COURIER_NIC_BACKEND", PluginKind::nic, registry,
                                       choices, spec, host, log);
    } catch (const Error&) {
      if (host_local) return host_local;
      throw;
    }
    if ((backend->props().caps & COURIER_NIC_CAP_HOST_LOCAL) == 0) return backend;
    auto opened = std::find_if(choices.begin(), choices.end(), [&](const NicPlugin* plugin) {
      return plugin->path == backend->plugin().path;
    });
    choices.erase(choices.begin(), opened + 1);
    if (!host_local) host_local = std::move(backend);
  }
  if (host_local) return host_local;
  return open_first<NicBackend>("NIC", "COURIER_NIC_BACKEND", PluginKind::nic, registry, choices,
                                spec, host, log);
}

std::unique_ptr<GpuBackend> open_gpu_backend(Registry& registry, std::string_view spec,
                                             const HostServices& host, Logger& log) {
  std::vector<const GpuPlugin*> choices = registry.gpu_choices(spec);
  // A bad knob value stops start-up even when an earlier choice already
  // initialized (the loop below only tolerates init failures).
  for (const GpuPlugin* plugin : choices) {
    validate_knobs("GPU", plugin->name, plugin->ops->knobs, plugin->ops->num_knobs, host);
  }
  // Preference by capability, not by name: a backend with a real device
  // first; one that runs kernels on CPU threads (host_kernels) only when no
  // real device is usable; a backend without devices last.
  auto preference = [&](const GpuBackend& backend) {
    if (backend.props().device_count == 0) return 2;
    return backend.supports(GpuFeature::host_kernels) ? 1 : 0;
  };
  std::unique_ptr<GpuBackend> best;
  // The first round always runs: with no choice left (COURIER_GPU_BACKEND
  // excluded them all) open_first says so instead of returning none.
  while (!best || (!choices.empty() && preference(*best) != 0)) {
    std::unique_ptr<GpuBackend> backend;
    try {
      backend = open_first<GpuBackend>("GPU", "COURIER_GPU_BACKEND", PluginKind::gpu, registry,
                                       choices, spec, host, log);
    } catch (const Error&) {
      if (best) break;  // none of the rest initializes: keep the one we have
      throw;
    }
    auto opened = std::find_if(choices.begin(), choices.end(), [&](const GpuPlugin* plugin) {
      return plugin->path == backend->plugin().path;
    });
    choices.erase(choices.begin(), opened + 1);
    if (!best || preference(*backend) < preference(*best)) best = std::move(backend);
  }
  return best;
}

}  // namespace courier
