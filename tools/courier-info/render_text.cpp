// courier-info's human output: one section per question a user asks
// ("where did it look?", "what did it find?", "what would it pick?", "does
// it work?", "what is configured?"), as aligned tables.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "courier/abi/gpu_v1.h"
#include "courier/abi/nic_v1.h"
#include "report.hpp"
#include "text_table.hpp"

namespace courier::info {

namespace {

std::string abi_version(uint16_t major, uint16_t minor) {
  return major == 0 ? "-" : fmt::format("{}.{}", major, minor);
}

std::string property_text(const Property& property) {
  struct Visitor {
    std::string operator()(const std::string& text) const { return text.empty() ? "-" : text; }
    std::string operator()(uint64_t number) const { return fmt::format("{}", number); }
    std::string operator()(const std::vector<std::string>& names) const {
      return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
    }
  };
  return std::visit(Visitor{}, property.value);
}

void section(std::string& out, std::string_view title) { out += fmt::format("\n{}\n", title); }

void render_backend(std::string& out, const BackendReport& backend) {
  out +=
      fmt::format("  {} {} (ABI {}.{}) {}\n", to_string(backend.kind), backend.name,
                  backend.kind == PluginKind::nic ? COURIER_NIC_ABI_MAJOR : COURIER_GPU_ABI_MAJOR,
                  backend.abi_minor, backend.path);
  TextTable facts({"description", backend.description.empty() ? "-" : backend.description});
  facts.add({"init", backend.initialized ? "ok" : "FAILED: " + backend.error});
  for (const Property& property : backend.properties) {
    facts.add({property.name, property_text(property)});
  }
  out += facts.render(4);
  if (!backend.device_report.empty()) {
    out += "    device report:\n";
    for (const std::string& line : backend.device_report) out += "      " + line + "\n";
  }
  if (backend.knobs.empty()) {
    out += "    knobs: none\n";
    return;
  }
  out += "    knobs:\n";
  TextTable knobs({"NAME", "VALUE", "SOURCE", "ALLOWED", "HELP"});
  for (const KnobReport& knob : backend.knobs) {
    knobs.add({knob.name, knob.value.empty() ? "\"\"" : knob.value, knob.source,
               knob.allowed.empty() ? "any" : knob.allowed, knob.help});
    if (!knob.error.empty()) knobs.add_note(1, "INVALID: " + knob.error);
  }
  out += knobs.render(6);
}

}  // namespace

std::string render_text(const Report& report) {
  std::string out = fmt::format("Courier {}\nPlugin ABI: gpu {}.{}, nic {}.{}\n", report.version,
                                COURIER_GPU_ABI_MAJOR, COURIER_GPU_ABI_MINOR, COURIER_NIC_ABI_MAJOR,
                                COURIER_NIC_ABI_MINOR);

  section(out, "Plugin directories (searched in order; the first file of a name wins):");
  TextTable dirs({"#", "DIRECTORY", "FROM"});
  for (size_t i = 0; i < report.search_dirs.size(); ++i) {
    const SearchDir& dir = report.search_dirs[i];
    dirs.add(
        {fmt::format("{}", i + 1), dir.path, dir.origin + (dir.exists ? "" : " (does not exist)")});
  }
  out += dirs.render(2);

  section(out, "Plugins found:");
  if (report.candidates.empty()) {
    out += "  none\n";
  } else {
    TextTable plugins({"KIND", "NAME", "ABI", "STATUS", "PATH"});
    for (const PluginCandidate& candidate : report.candidates) {
      plugins.add({std::string(to_string(candidate.kind)), candidate.name,
                   abi_version(candidate.abi_major, candidate.abi_minor),
                   candidate.usable ? "usable" : "rejected", candidate.path});
      if (!candidate.usable) plugins.add_note(4, "reason: " + candidate.reason);
    }
    out += plugins.render(2);
  }

  section(out, "Selection (the order backends would be tried in):");
  TextTable selection({"VARIABLE", "VALUE", "TRIES"});
  for (const SelectionReport& choice : report.selection) {
    std::string tries =
        choice.order.empty() ? "nothing" : fmt::format("{}", fmt::join(choice.order, ", "));
    selection.add({choice.variable, choice.spec.empty() ? "(unset)" : choice.spec,
                   choice.error.empty() ? tries : "ERROR"});
    if (!choice.error.empty()) selection.add_note(1, choice.error);
  }
  out += selection.render(2);

  section(out, "Backends (each usable plugin initialized and queried):");
  if (report.backends.empty()) out += "  none\n";
  for (const BackendReport& backend : report.backends) render_backend(out, backend);

  section(out, "Configuration:");
  TextTable config({"NAME", "VALUE", "SOURCE", "HELP"});
  for (const ConfigEntry& entry : report.configuration) {
    config.add({entry.name, entry.value.empty() ? "\"\"" : entry.value, entry.source, entry.help});
  }
  out += config.render(2);

  if (!report.errors.empty()) {
    section(out, "Errors:");
    for (const std::string& error : report.errors) out += fmt::format("  error: {}\n", error);
  }
  if (!report.warnings.empty()) {
    section(out, "Warnings:");
    for (const std::string& warning : report.warnings)
      out += fmt::format("  warning: {}\n", warning);
  }
  return out;
}

}  // namespace courier::info
