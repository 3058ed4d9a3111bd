// Everything courier-info shows, gathered once. The text and JSON renderers
// print the same Report, so the two outputs cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/registry.hpp"

namespace courier::info {

struct SearchDir {
  std::string path;
  std::string origin;  // "COURIER_BACKEND_PATH" or "default"
  bool exists = false;
};

// One property of an initialized backend. Lists are capability or memory
// kind names; numbers stay numbers in JSON.
struct Property {
  std::string name;
  std::variant<std::string, uint64_t, std::vector<std::string>> value;
};

// A knob a plugin declares, with the value it will see.
struct KnobReport {
  std::string name;
  std::string value;   // effective: the environment's, else the default
  std::string source;  // "environment" or "default"
  std::string default_value;
  std::string allowed;  // "a|b|c", or "" for free-form
  std::string help;
  std::string error;  // why the environment's value is refused, or ""
};

// A usable plugin after courier-info tried to initialize it.
struct BackendReport {
  PluginKind kind = PluginKind::nic;
  std::string name;
  std::string path;
  uint16_t abi_minor = 0;
  std::string description;
  bool initialized = false;
  std::string error;  // why init failed (empty when it worked)
  std::vector<Property> properties;
  // The backend's own device report (NIC ABI 1.2 describe), one line each.
  std::vector<std::string> device_report;
  std::vector<KnobReport> knobs;
};

// What COURIER_*_BACKEND selects: the order plugins would be tried in.
struct SelectionReport {
  std::string variable;
  std::string spec;
  std::vector<std::string> order;
  std::string error;
};

struct Report {
  std::string version;
  std::vector<SearchDir> search_dirs;
  std::vector<PluginCandidate> candidates;
  std::vector<SelectionReport> selection;
  std::vector<BackendReport> backends;
  std::vector<ConfigEntry> configuration;
  std::vector<std::string> errors;    // bad values: one clear line each
  std::vector<std::string> warnings;  // unknown COURIER_* variables
};

// Loads the configuration and every plugin, initializes each usable one and
// records what happened. Never throws for a bad value: that becomes an error
// line and the rest is still gathered.
Report gather_report(Logger& log);

std::string render_text(const Report& report);
std::string render_json(const Report& report);

}  // namespace courier::info
