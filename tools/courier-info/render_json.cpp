// courier-info --json: the Report as one JSON object, for scripts and CI.
#include <fmt/format.h>

#include "courier/abi/gpu_v1.h"
#include "courier/abi/nic_v1.h"
#include "json_writer.hpp"
#include "report.hpp"

namespace courier::info {

namespace {

void write_property(JsonWriter& json, const Property& property) {
  json.key(property.name);
  if (const auto* text = std::get_if<std::string>(&property.value)) {
    json.string(*text);
  } else if (const auto* number = std::get_if<uint64_t>(&property.value)) {
    json.number(*number);
  } else {
    json.begin_array();
    for (const std::string& name : std::get<std::vector<std::string>>(property.value)) {
      json.string(name);
    }
    json.end_array();
  }
}

void write_backend(JsonWriter& json, const BackendReport& backend) {
  json.begin_object();
  json.field("kind", to_string(backend.kind));
  json.field("name", backend.name);
  json.field("path", backend.path);
  json.field("abi", fmt::format("{}.{}",
                                backend.kind == PluginKind::nic ? COURIER_NIC_ABI_MAJOR
                                                                : COURIER_GPU_ABI_MAJOR,
                                backend.abi_minor));
  json.field("description", backend.description);
  json.field_bool("initialized", backend.initialized);
  json.field_or_null("error", backend.error);
  json.key("properties");
  json.begin_object();
  for (const Property& property : backend.properties) write_property(json, property);
  json.end_object();
  json.key("device_report");
  json.begin_array();
  for (const std::string& line : backend.device_report) json.string(line);
  json.end_array();
  json.key("knobs");
  json.begin_array();
  for (const KnobReport& knob : backend.knobs) {
    json.begin_object();
    json.field("name", knob.name);
    json.field("value", knob.value);
    json.field("source", knob.source);
    json.field("default", knob.default_value);
    json.field_or_null("allowed", knob.allowed);
    json.field("help", knob.help);
    json.field_or_null("error", knob.error);
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

}  // namespace

std::string render_json(const Report& report) {
  std::string out;
  JsonWriter json(out);
  json.begin_object();
  json.field("courier_version", report.version);
  json.key("abi");
  json.begin_object();
  json.field("gpu", fmt::format("{}.{}", COURIER_GPU_ABI_MAJOR, COURIER_GPU_ABI_MINOR));
  json.field("nic", fmt::format("{}.{}", COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR));
  json.end_object();

  json.key("search_dirs");
  json.begin_array();
  for (const SearchDir& dir : report.search_dirs) {
    json.begin_object();
    json.field("path", dir.path);
    json.field("origin", dir.origin);
    json.field_bool("exists", dir.exists);
    json.end_object();
  }
  json.end_array();

  json.key("candidates");
  json.begin_array();
  for (const PluginCandidate& candidate : report.candidates) {
    json.begin_object();
    json.field("kind", to_string(candidate.kind));
    json.field("name", candidate.name);
    json.field("path", candidate.path);
    json.field_or_null("abi", candidate.abi_major == 0
                                  ? std::string()
                                  : fmt::format("{}.{}", candidate.abi_major, candidate.abi_minor));
    json.field_bool("usable", candidate.usable);
    json.field_or_null("reason", candidate.reason);
    json.end_object();
  }
  json.end_array();

  json.key("selection");
  json.begin_array();
  for (const SelectionReport& selection : report.selection) {
    json.begin_object();
    json.field("variable", selection.variable);
    json.field("value", selection.spec);
    json.field_list("order", selection.order);
    json.field_or_null("error", selection.error);
    json.end_object();
  }
  json.end_array();

  json.key("backends");
  json.begin_array();
  for (const BackendReport& backend : report.backends) write_backend(json, backend);
  json.end_array();

  json.key("configuration");
  json.begin_array();
  for (const ConfigEntry& entry : report.configuration) {
    json.begin_object();
    json.field("name", entry.name);
    json.field("value", entry.value);
    json.field("source", entry.source);
    json.field("help", entry.help);
    json.end_object();
  }
  json.end_array();

  json.field_list("errors", report.errors);
  json.field_list("warnings", report.warnings);
  json.end_object();
  return out;
}

}  // namespace courier::info
