// gather_report: loads what Courier would load, the way it would load it,
// and writes down every outcome instead of stopping at the first problem.
#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>

#include "core/backend_instance.hpp"
#include "courier/error.hpp"

namespace courier::info {

namespace {

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Config::load stops at the first bad variable. To list the rest anyway, the
// bad variable is hidden (as if unset) and the load repeated; afterwards its
// raw value is shown, marked invalid. Config's messages start with the
// variable's name ("NAME='value' is invalid: ..."), which is how we know
// which one to hide.
void load_configuration(const EnvLookup& env, Report& report) {
  std::vector<std::string> hidden;
  EnvLookup visible = [&](std::string_view name) -> std::optional<std::string> {
    if (contains(hidden, name)) return std::nullopt;
    return env(name);
  };
  while (true) {
    try {
      report.configuration = Config::load(visible, /*need_job=*/false).entries;
      break;
    } catch (const Error& error) {
      report.errors.emplace_back(error.what());
      std::string_view message = error.what();
      std::string name(message.substr(0, message.find_first_of("=' :")));
      // Without a variable to hide, another attempt would fail the same way.
      if (!name.starts_with("COURIER_") || !env(name) || contains(hidden, name)) break;
      hidden.push_back(name);
    }
  }
  for (ConfigEntry& entry : report.configuration) {
    if (!contains(hidden, entry.name)) continue;
    entry.value = env(entry.name).value_or("");
    entry.source = "environment (invalid)";
  }
}

std::vector<SearchDir> describe_search_dirs(const Registry& registry) {
  std::vector<SearchDir> dirs;
  for (const std::string& path : registry.search_dirs()) {
    std::error_code error;
    dirs.push_back({path, path == registry.default_dir() ? "default" : "COURIER_BACKEND_PATH",
                    std::filesystem::is_directory(path, error)});
  }
  return dirs;
}

// The plugins COURIER_*_BACKEND would try, in order. A spec naming a path
// loads that file here, so it shows up among the candidates afterwards.
template <class Plugin, class Choose>
std::vector<const Plugin*> describe_selection(std::string_view variable, const EnvLookup& env,
                                              Choose choose, Report& report) {
  SelectionReport selection;
  selection.variable = variable;
  selection.spec = env(variable).value_or("");
  std::vector<const Plugin*> chosen;
  try {
    chosen = choose(selection.spec);
    for (const Plugin* plugin : chosen) selection.order.push_back(plugin->name);
  } catch (const Error& error) {
    selection.error = error.what();
    report.errors.push_back(selection.error);
  }
  report.selection.push_back(std::move(selection));
  return chosen;
}

// The scanned plugins, plus any a spec loaded by path.
template <class Plugin>
std::vector<const Plugin*> usable_plugins(const std::vector<Plugin>& scanned,
                                          const std::vector<const Plugin*>& chosen) {
  std::vector<const Plugin*> plugins;
  for (const Plugin& plugin : scanned) plugins.push_back(&plugin);
  for (const Plugin* plugin : chosen) {
    if (std::find(plugins.begin(), plugins.end(), plugin) == plugins.end()) {
      plugins.push_back(plugin);
    }
  }
  return plugins;
}

std::vector<Property> nic_properties(const courier_nic_props_v1& props) {
  return {
      {"device", std::string(props.device)},
      {"pci_address", std::string(props.pci_address)},
      {"caps", nic_capability_names(props.caps)},
      {"atomic_ops", uint64_t{props.atomic_ops}},
      {"atomic_native", uint64_t{props.atomic_native}},
      {"imm_bytes", uint64_t{props.imm_bytes}},
      {"mem_kinds", memory_kind_names(props.mem_kinds)},
      {"max_msg_size", uint64_t{props.max_msg_size}},
      {"max_ep_name", uint64_t{props.max_ep_name}},
      {"latency_ns", uint64_t{props.latency_ns}},
      {"bandwidth_mbps", uint64_t{props.bandwidth_mbps}},
  };
}

std::vector<Property> gpu_properties(const courier_gpu_props_v1& props) {
  return {
      {"device_name", std::string(props.device_name)},
      {"device_count", uint64_t{props.device_count}},
      {"no_device_reason", std::string(props.no_device_reason)},
      {"caps", gpu_capability_names(props.caps)},
      {"warp_size", uint64_t{props.warp_size}},
      {"mem_kind", memory_kind_names(props.mem_kind)},
  };
}

std::vector<KnobReport> describe_knobs(const courier_knob_v1* knobs, uint32_t count,
                                       const EnvLookup& env) {
  std::vector<KnobReport> reports;
  for (uint32_t i = 0; i < count; ++i) {
    const courier_knob_v1& knob = knobs[i];
    KnobReport report;
    report.name = knob.name;
    report.default_value = knob.default_value != nullptr ? knob.default_value : "";
    report.allowed = knob.allowed != nullptr ? knob.allowed : "";
    report.help = knob.help != nullptr ? knob.help : "";
    std::optional<std::string> value = env(knob.name);
    report.value = value.value_or(report.default_value);
    report.source = value ? "environment" : "default";
    if (value) report.error = knob_value_error(knob, *value).value_or("");
    reports.push_back(std::move(report));
  }
  return reports;
}

// The NIC backend's device report (ABI 1.2 describe), split into lines.
std::vector<std::string> device_report(const NicBackend& backend) {
  const courier_nic_plugin_v1* ops = backend.ops();
  const size_t needed = offsetof(courier_nic_plugin_v1, describe) + sizeof ops->describe;
  if (ops->header.struct_size < needed || ops->describe == nullptr) return {};
  size_t length = 0;
  if (ops->describe(backend.handle(), nullptr, &length) != COURIER_OK || length == 0) return {};
  std::string text(length, '\0');
  if (ops->describe(backend.handle(), text.data(), &length) != COURIER_OK) return {};
  text.resize(std::strlen(text.c_str()));
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}
std::vector<std::string> device_report(const GpuBackend& /*backend*/) { return {}; }

// Initializes one plugin (Backend's constructor checks knobs, runs init and
// query) and records the result; fini runs when `backend` goes out of scope.
template <class Backend, class Plugin, class Describe>
BackendReport try_backend(PluginKind kind, const Plugin& plugin, const HostServices& host,
                          const EnvLookup& env, Describe describe_props) {
  BackendReport report;
  report.kind = kind;
  report.name = plugin.name;
  report.path = plugin.path;
  report.abi_minor = plugin.abi_minor;
  report.description = plugin.ops->description != nullptr ? plugin.ops->description : "";
  report.knobs = describe_knobs(plugin.ops->knobs, plugin.ops->num_knobs, env);
  try {
    Backend backend(plugin, host);
    report.initialized = true;
    report.properties = describe_props(backend.props());
    report.device_report = device_report(backend);
  } catch (const Error& error) {
    report.error = error.what();
  }
  return report;
}

}  // namespace

Report gather_report(Logger& log) {
  Report report;
  report.version = COURIER_VERSION;
  EnvLookup env = process_env();
  load_configuration(env, report);

  Registry registry(env("COURIER_BACKEND_PATH").value_or(""), log);
  report.search_dirs = describe_search_dirs(registry);
  std::vector<const GpuPlugin*> gpu_chosen = describe_selection<GpuPlugin>(
      "COURIER_GPU_BACKEND", env, [&](std::string_view spec) { return registry.gpu_choices(spec); },
      report);
  std::vector<const NicPlugin*> nic_chosen = describe_selection<NicPlugin>(
      "COURIER_NIC_BACKEND", env, [&](std::string_view spec) { return registry.nic_choices(spec); },
      report);
  report.candidates = registry.candidates();

  HostServices host(log, env);
  for (const GpuPlugin* plugin : usable_plugins(registry.gpu_plugins(), gpu_chosen)) {
    report.backends.push_back(
        try_backend<GpuBackend>(PluginKind::gpu, *plugin, host, env, gpu_properties));
  }
  for (const NicPlugin* plugin : usable_plugins(registry.nic_plugins(), nic_chosen)) {
    report.backends.push_back(
        try_backend<NicBackend>(PluginKind::nic, *plugin, host, env, nic_properties));
  }
  for (const BackendReport& backend : report.backends) {
    for (const KnobReport& knob : backend.knobs) {
      if (!knob.error.empty()) {
        report.errors.push_back(
            fmt::format("{}='{}' is invalid for {} backend '{}': {}", knob.name, knob.value,
                        backend.kind == PluginKind::nic ? "NIC" : "GPU", backend.name, knob.error));
      }
    }
  }

  for (const std::string& name :
       Config::unknown_variables(process_env_names(), registry.declared_knob_names())) {
    report.warnings.push_back(fmt::format(
        "{} is set, but neither Courier nor any usable plugin reads it (a typo?)", name));
  }
  return report;
}

}  // namespace courier::info
