// Loads one plugin file and checks it against the ABI this core speaks.
//
// The registry decides *which* files to look at; this file decides whether
// one file is a usable plugin and, if not, says exactly why in one sentence.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/registry.hpp"

namespace courier {

// The kind and name a plugin file name promises: libcourier-nic-ofi.so ->
// {nic, "ofi"}. std::nullopt when the name does not follow that pattern.
struct PluginFileName {
  PluginKind kind;
  std::string name;
};
std::optional<PluginFileName> parse_plugin_file_name(std::string_view file_name);

// Loads `path` as a plugin of one kind. `expected_name` is the name the file
// name promises; the struct's header.name must equal it (empty: accept the
// struct's name, for files forced by path under another name).
//
// Always fills `candidate` (name, ABI version, usable, reason). Returns the
// plugin when it is usable; the library stays loaded only in that case.
std::optional<NicPlugin> load_nic_plugin(const std::string& path, std::string_view expected_name,
                                         PluginCandidate& candidate);
std::optional<GpuPlugin> load_gpu_plugin(const std::string& path, std::string_view expected_name,
                                         PluginCandidate& candidate);

// The devices a loaded NIC plugin claims (NIC ABI 1.3; empty before), as
// the loader checked them: claims with flag bits of a later minor than this
// core's are left out.
std::vector<courier_nic_claim_v1> nic_claims(const NicPlugin& plugin);

}  // namespace courier
