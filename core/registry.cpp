#include "core/registry.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <map>
#include <system_error>
#include <type_traits>
#include <utility>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/plugin_library.hpp"
#include "core/plugin_loader.hpp"

namespace courier {

namespace fs = std::filesystem;

std::string_view to_string(PluginKind kind) { return kind == PluginKind::gpu ? "gpu" : "nic"; }

namespace {

constexpr std::string_view kComponent = "registry";
constexpr std::string_view kShadowedBy = "shadowed by ";

// The install's plugin directory: "courier" beside libcourier.so. Asking the
// loader where this very function lives finds it in a build tree and in any
// install prefix alike, without baking a path in at configure time.
std::string default_plugin_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&default_plugin_dir), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  std::error_code error;
  fs::path library = fs::absolute(info.dli_fname, error);
  if (error) return "";
  return (library.parent_path() / "courier").string();
}

// An absolute path without ".", ".." or symbolic links (as far as they
// exist), so that two spellings of one file compare equal.
std::string normalized(std::string_view path) {
  std::error_code error;
  fs::path absolute = fs::absolute(fs::path(path), error);
  if (error) return std::string(path);
  fs::path canonical = fs::weakly_canonical(absolute, error);
  return error ? absolute.lexically_normal().string() : canonical.string();
}

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n";
  size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  size_t last = text.find_last_not_of(kSpace);
  return text.substr(first, last - first + 1);
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = trim(text.substr(start, end - start));
    if (!part.empty()) parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

// What selection needs to know about each plugin kind.
template <class Plugin>
struct KindTraits;

template <>
struct KindTraits<NicPlugin> {
  static constexpr PluginKind kind = PluginKind::nic;
  static constexpr std::string_view variable = "COURIER_NIC_BACKEND";
  static constexpr std::string_view label = "NIC";
  static std::optional<NicPlugin> load(const std::string& path, std::string_view name,
                                       PluginCandidate& candidate) {
    return load_nic_plugin(path, name, candidate);
  }
};

template <>
struct KindTraits<GpuPlugin> {
  static constexpr PluginKind kind = PluginKind::gpu;
  static constexpr std::string_view variable = "COURIER_GPU_BACKEND";
  static constexpr std::string_view label = "GPU";
  static std::optional<GpuPlugin> load(const std::string& path, std::string_view name,
                                       PluginCandidate& candidate) {
    return load_gpu_plugin(path, name, candidate);
  }
};

// The order in which an unforced selection tries plugins: by name. What is
// preferred among those that initialize is decided from their capabilities
// (open_gpu_backend prefers a real device over CPU threads); NIC plugins are
// ranked by topology later.
template <class Plugin>
void sort_for_selection(std::vector<const Plugin*>& plugins) {
  std::stable_sort(plugins.begin(), plugins.end(),
                   [](const Plugin* a, const Plugin* b) { return a->name < b->name; });
}

}  // namespace

struct Registry::State {
  explicit State(Logger& logger) : log(logger) {}

  Logger& log;
  std::vector<std::string> dirs;
  std::string default_dir;
  std::vector<PluginCandidate> candidates;
  // Plugins found by the scan. Filled by the constructor and never changed
  // afterwards, so pointers into them stay valid.
  std::vector<NicPlugin> nic;
  std::vector<GpuPlugin> gpu;
  // Plugins loaded because a COURIER_*_BACKEND spec named their path. A deque
  // keeps earlier elements in place when more are added.
  std::deque<NicPlugin> nic_by_path;
  std::deque<GpuPlugin> gpu_by_path;

  template <class Plugin>
  std::vector<Plugin>& scanned() {
    if constexpr (std::is_same_v<Plugin, NicPlugin>) {
      return nic;
    } else {
      return gpu;
    }
  }
  template <class Plugin>
  std::deque<Plugin>& by_path() {
    if constexpr (std::is_same_v<Plugin, NicPlugin>) {
      return nic_by_path;
    } else {
      return gpu_by_path;
    }
  }

  void record(PluginCandidate candidate, bool forced) {
    if (!candidate.usable) {
      log.log(forced ? LogLevel::warn : LogLevel::info, kComponent, "{} plugin {} rejected: {}",
              to_string(candidate.kind), candidate.path, candidate.reason);
    } else {
      log.debug(kComponent, "{} plugin '{}' (ABI {}.{}) found at {}", to_string(candidate.kind),
                candidate.name, candidate.abi_major, candidate.abi_minor, candidate.path);
    }
    candidates.push_back(std::move(candidate));
  }

  void scan(const std::string& dir) {
    std::error_code error;
    if (!fs::is_directory(dir, error)) {
      log.debug(kComponent, "plugin directory {} does not exist; skipped", dir);
      return;
    }
    std::vector<std::pair<std::string, PluginFileName>> files;
    for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
      std::string file_name = it->path().filename().string();
      std::optional<PluginFileName> parsed = parse_plugin_file_name(file_name);
      std::error_code type_error;
      if (parsed && !it->is_directory(type_error)) files.emplace_back(file_name, *parsed);
    }
    if (error) log.warn(kComponent, "cannot list plugin directory {}: {}", dir, error.message());
    // Directory order is arbitrary; sorting makes every listing reproducible.
    std::sort(files.begin(), files.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [file_name, parsed] : files) {
      std::string path = (fs::path(dir) / file_name).string();
      if (const PluginCandidate* winner = find_winner(parsed.kind, parsed.name)) {
        PluginCandidate shadowed;
        shadowed.kind = parsed.kind;
        shadowed.name = parsed.name;
        shadowed.path = path;
        shadowed.reason = fmt::format("{}{}{}", kShadowedBy, winner->path,
                                      winner->usable ? "" : ", which was rejected");
        if (!winner->usable) {
          // A broken file hides a plugin that may well work: say so loudly.
          log.warn(kComponent,
                   "{} plugin {} is not used: {} shadows it (searched first) but was rejected: {}; "
                   "remove or fix that file",
                   to_string(parsed.kind), path, winner->path, winner->reason);
        }
        record(std::move(shadowed), false);
        continue;
      }
      PluginCandidate candidate;
      if (parsed.kind == PluginKind::nic) {
        if (auto plugin = load_nic_plugin(path, parsed.name, candidate)) nic.push_back(*plugin);
      } else {
        if (auto plugin = load_gpu_plugin(path, parsed.name, candidate)) gpu.push_back(*plugin);
      }
      record(std::move(candidate), false);
    }
  }

  // The first file seen for this kind and name, whose copies in later
  // directories it shadows.
  const PluginCandidate* find_winner(PluginKind kind, const std::string& name) const {
    for (const PluginCandidate& candidate : candidates) {
      if (candidate.kind == kind && candidate.name == name &&
          !std::string_view(candidate.reason).starts_with(kShadowedBy)) {
        return &candidate;
      }
    }
    return nullptr;
  }

  // "usable: a, b; rejected: c (reason), d (reason)" for one kind.
  template <class Plugin>
  std::string inventory() {
    std::vector<const Plugin*> usable;
    for (const Plugin& plugin : scanned<Plugin>()) usable.push_back(&plugin);
    sort_for_selection(usable);
    std::vector<std::string> usable_names;
    for (const Plugin* plugin : usable) usable_names.push_back(plugin->name);
    std::vector<std::string> rejected;
    for (const PluginCandidate& candidate : candidates) {
      if (candidate.kind == KindTraits<Plugin>::kind && !candidate.usable) {
        rejected.push_back(fmt::format("{} ({})", candidate.name, candidate.reason));
      }
    }
    std::string text = fmt::format(
        "usable: {}",
        usable_names.empty() ? "none" : fmt::format("{}", fmt::join(usable_names, ", ")));
    if (!rejected.empty()) text += fmt::format("; rejected: {}", fmt::join(rejected, ", "));
    return text;
  }

  template <class Plugin>
  std::vector<const Plugin*> choose(std::string_view raw_spec) {
    using Traits = KindTraits<Plugin>;
    std::string_view spec = trim(raw_spec);
    std::vector<const Plugin*> all;
    for (const Plugin& plugin : scanned<Plugin>()) all.push_back(&plugin);
    sort_for_selection(all);

    if (spec.empty()) return all;
    if (spec.find('/') != std::string_view::npos) return {&load_forced_path<Plugin>(spec)};
    if (spec.front() == '^') {
      std::vector<std::string> excluded = split(spec.substr(1), ',');
      for (const std::string& name : excluded) {
        bool known = std::any_of(candidates.begin(), candidates.end(), [&](const auto& c) {
          return c.kind == Traits::kind && c.name == name;
        });
        if (!known) {
          log.warn(kComponent, "{}={}: no {} backend named '{}' was found, so nothing is excluded",
                   Traits::variable, spec, Traits::label, name);
        }
      }
      std::erase_if(all, [&](const Plugin* plugin) {
        return std::find(excluded.begin(), excluded.end(), plugin->name) != excluded.end();
      });
      return all;
    }

    for (const Plugin* plugin : all) {
      if (plugin->name == spec) return {plugin};
    }
    if (const PluginCandidate* rejected = find_winner(Traits::kind, std::string(spec))) {
      log.warn(kComponent, "{} plugin {} rejected: {}", to_string(rejected->kind), rejected->path,
               rejected->reason);
      fail("{}={}: {} backend '{}' at {} is not usable: {} ({})", Traits::variable, spec,
           Traits::label, spec, rejected->path, rejected->reason, inventory<Plugin>());
    }
    fail("{}={}: no {} backend named '{}' ({})", Traits::variable, spec, Traits::label, spec,
         inventory<Plugin>());
  }

  template <class Plugin>
  [[noreturn]] static void fail_forced(std::string_view spec, const PluginCandidate& candidate) {
    using Traits = KindTraits<Plugin>;
    fail("{}={}: {} plugin {} is not usable: {}", Traits::variable, spec, Traits::label,
         candidate.path, candidate.reason);
  }

  // Loads the file a spec names by path, once: later calls with the same
  // file (however spelled) return the same plugin or the same error.
  template <class Plugin>
  const Plugin& load_forced_path(std::string_view spec) {
    using Traits = KindTraits<Plugin>;
    std::string path = normalized(spec);
    for (const PluginCandidate& candidate : candidates) {
      // A shadowed file was never loaded: forcing its path is how a user asks for it.
      if (candidate.kind != Traits::kind || normalized(candidate.path) != path ||
          std::string_view(candidate.reason).starts_with(kShadowedBy)) {
        continue;
      }
      if (!candidate.usable) {
        log.warn(kComponent, "{} plugin {} rejected: {}", to_string(candidate.kind), candidate.path,
                 candidate.reason);
        fail_forced<Plugin>(spec, candidate);
      }
      for (const Plugin& plugin : scanned<Plugin>()) {
        if (plugin.path == candidate.path) return plugin;
      }
      for (const Plugin& plugin : by_path<Plugin>()) {
        if (plugin.path == candidate.path) return plugin;
      }
    }

    // The file name promises a name only when it follows the plugin pattern
    // for this kind; otherwise the struct's own name is taken.
    std::optional<PluginFileName> parsed =
        parse_plugin_file_name(fs::path(path).filename().string());
    std::string expected = parsed && parsed->kind == Traits::kind ? parsed->name : "";
    PluginCandidate candidate;
    std::optional<Plugin> plugin = Traits::load(path, expected, candidate);
    if (candidate.name.empty()) candidate.name = fs::path(path).filename().string();
    record(candidate, true);
    if (!plugin) fail_forced<Plugin>(spec, candidate);
    std::deque<Plugin>& loaded = by_path<Plugin>();
    loaded.push_back(std::move(*plugin));
    return loaded.back();
  }
};

Registry::Registry(std::string_view search_path, Logger& log)
    : state_(std::make_unique<State>(log)) {
  state_->default_dir = default_plugin_dir();
  std::vector<std::string> dirs = split(search_path, ':');
  if (!state_->default_dir.empty()) dirs.push_back(state_->default_dir);
  for (const std::string& dir : dirs) {
    std::string path = normalized(dir);
    // A directory named twice (COURIER_BACKEND_PATH often names the default
    // one) is searched once, or every plugin in it would shadow itself.
    if (std::find(state_->dirs.begin(), state_->dirs.end(), path) == state_->dirs.end()) {
      state_->dirs.push_back(path);
    }
  }
  if (!state_->default_dir.empty()) state_->default_dir = normalized(state_->default_dir);
  if (state_->default_dir.empty()) {
    log.warn(kComponent,
             "cannot tell where libcourier is loaded from; only "
             "COURIER_BACKEND_PATH is searched for plugins");
  }
  for (const std::string& dir : state_->dirs) state_->scan(dir);
}

Registry::~Registry() = default;

std::vector<std::string> Registry::search_dirs() const { return state_->dirs; }

std::string Registry::default_dir() const { return state_->default_dir; }

const std::vector<PluginCandidate>& Registry::candidates() const { return state_->candidates; }

const std::vector<NicPlugin>& Registry::nic_plugins() const { return state_->nic; }

const std::vector<GpuPlugin>& Registry::gpu_plugins() const { return state_->gpu; }

std::vector<const NicPlugin*> Registry::nic_choices(std::string_view spec) {
  return state_->choose<NicPlugin>(spec);
}

std::vector<const GpuPlugin*> Registry::gpu_choices(std::string_view spec) {
  return state_->choose<GpuPlugin>(spec);
}

std::vector<std::string> Registry::declared_knob_names() const {
  std::vector<std::string> names;
  auto add = [&](const auto& plugins) {
    for (const auto& plugin : plugins) {
      for (uint32_t i = 0; i < plugin.ops->num_knobs; ++i) {
        names.emplace_back(plugin.ops->knobs[i].name);
      }
    }
  };
  add(state_->nic);
  add(state_->gpu);
  add(state_->nic_by_path);
  add(state_->gpu_by_path);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace courier
