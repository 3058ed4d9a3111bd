// The registry: which files it accepts, the one-line reason for each one it
// rejects, and how COURIER_*_BACKEND selects among the usable ones.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>

#include "core/plugin_loader.hpp"
#include "core/registry.hpp"
#include "test_support.hpp"

namespace courier::test {
namespace {

const PluginCandidate* find_candidate(const Registry& registry, const std::string& path) {
  for (const PluginCandidate& candidate : registry.candidates()) {
    if (candidate.path == path) return &candidate;
  }
  return nullptr;
}

template <class Plugin>
std::vector<std::string> names_of(const std::vector<const Plugin*>& plugins) {
  std::vector<std::string> names;
  for (const Plugin* plugin : plugins) names.push_back(plugin->name);
  return names;
}

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

struct ExpectedRejection {
  const char* file;
  std::string reason;  // the whole reason, or its start when `prefix_only`
  bool prefix_only = false;
};

std::vector<ExpectedRejection> expected_rejections() {
  constexpr size_t nic_required =
      offsetof(courier_nic_plugin_v1, poll) + sizeof(courier_nic_plugin_v1::poll);
  constexpr size_t gpu_required = offsetof(courier_gpu_plugin_v1, launch_host_kernel) +
                                  sizeof(courier_gpu_plugin_v1::launch_host_kernel);
  return {
      {"libcourier-nic-abimajor2.so", "reports ABI major 2 in its struct; this Courier needs 1"},
      {"libcourier-nic-v2only.so", "exports ABI major 2 only; this Courier speaks major 1"},
      {"libcourier-nic-short.so",
       fmt::format("struct_size 16 is shorter than the {} bytes ABI 1.0 requires", nic_required)},
      {"libcourier-gpu-short.so",
       fmt::format("struct_size {} is shorter than the {} bytes ABI 1.0 requires",
                   offsetof(courier_gpu_plugin_v1, launch_host_kernel), gpu_required)},
      {"libcourier-nic-nullentry.so", "required entry 'post_write' is NULL"},
      {"libcourier-nic-nullstruct.so", "courier_nic_backend_v1() returned NULL"},
      {"libcourier-nic-misnamed.so",
       "its struct is named 'somebody-else' but the file name says 'misnamed'"},
      {"libcourier-nic-nosymbol.so", "not a Courier plugin: no courier_nic_backend_v1 symbol"},
      {"libcourier-nic-wrongkind.so",
       "is a GPU plugin (exports courier_gpu_backend_v1), not a NIC plugin"},
      {"libcourier-nic-unresolved.so", "not loadable: ", true},
      {"libcourier-nic-garbage.so",
       "not loadable: not an ELF shared object (no ELF magic at the "
       "start)"},
      {"libcourier-nic-truncated.so", "not loadable: truncated: segment ", true},
  };
}

TEST_CASE("each broken plugin is rejected with its reason, in one log line naming the file") {
  CapturedLog log(LogLevel::info);
  Registry registry(kTestPluginDir, log.logger());

  for (const ExpectedRejection& expected : expected_rejections()) {
    CAPTURE(expected.file);
    std::string path = test_plugin(expected.file);
    const PluginCandidate* candidate = find_candidate(registry, path);
    REQUIRE(candidate != nullptr);
    CHECK_FALSE(candidate->usable);
    if (expected.prefix_only) {
      CHECK(candidate->reason.starts_with(expected.reason));
    } else {
      CHECK(candidate->reason == expected.reason);
    }
    std::vector<std::string> lines = log.lines_containing(path);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find(candidate->reason) != std::string::npos);
    CHECK(lines[0].find("courier info registry") != std::string::npos);
  }
}

TEST_CASE("the loader's own words reach the reason of a file dlopen refuses") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  const PluginCandidate* unresolved =
      find_candidate(registry, test_plugin("libcourier-nic-unresolved.so"));
  REQUIRE(unresolved != nullptr);
  CHECK(unresolved->reason.find("courier_test_function_nobody_defines") != std::string::npos);
  const PluginCandidate* garbage =
      find_candidate(registry, test_plugin("libcourier-nic-garbage.so"));
  REQUIRE(garbage != nullptr);
  CHECK(garbage->reason.size() > std::string_view("not loadable: ").size());
}

TEST_CASE("a rejected candidate reports the ABI version it claims") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  const PluginCandidate* major2 =
      find_candidate(registry, test_plugin("libcourier-nic-abimajor2.so"));
  REQUIRE(major2 != nullptr);
  CHECK(major2->abi_major == 2);
  const PluginCandidate* v2only = find_candidate(registry, test_plugin("libcourier-nic-v2only.so"));
  REQUIRE(v2only != nullptr);
  CHECK(v2only->abi_major == 2);
}

TEST_CASE("rejections nobody forced stay out of a warn-level log") {
  CapturedLog log(LogLevel::warn);
  Registry registry(kTestPluginDir, log.logger());
  CHECK(log.text().empty());
}

TEST_CASE("good plugins are listed alongside the broken ones") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());

  for (const char* file :
       {"libcourier-nic-sim.so", "libcourier-nic-mock.so", "libcourier-gpu-sim.so"}) {
    CAPTURE(file);
    const PluginCandidate* candidate = find_candidate(registry, test_plugin(file));
    REQUIRE(candidate != nullptr);
    CHECK(candidate->usable);
    CHECK(candidate->reason.empty());
    CHECK(candidate->abi_major == 1);
  }
  std::vector<std::string> nic;
  for (const NicPlugin& plugin : registry.nic_plugins()) nic.push_back(plugin.name);
  CHECK(contains(nic, "sim"));
  CHECK(contains(nic, "mock"));
  CHECK(registry.gpu_plugins().size() >= 1);

  // The real plugins, from the default directory, are still found beside
  // the test ones (when they have been built).
  for (const char* file : {"libcourier-gpu-host.so", "libcourier-nic-ofi.so"}) {
    std::string path = real_plugin(file);
    if (!std::filesystem::exists(path)) continue;
    CAPTURE(path);
    const PluginCandidate* candidate = find_candidate(registry, path);
    REQUIRE(candidate != nullptr);
    CAPTURE(candidate->reason);
    CHECK(candidate->usable);
  }
}

TEST_CASE("file names: libcourier-<gpu|nic>-NAME.so") {
  auto nic = parse_plugin_file_name("libcourier-nic-ofi.so");
  REQUIRE(nic);
  CHECK(nic->kind == PluginKind::nic);
  CHECK(nic->name == "ofi");
  auto gpu = parse_plugin_file_name("libcourier-gpu-host.so");
  REQUIRE(gpu);
  CHECK(gpu->kind == PluginKind::gpu);
  CHECK(gpu->name == "host");
  CHECK_FALSE(parse_plugin_file_name("libcourier-nic-.so"));
  CHECK_FALSE(parse_plugin_file_name("libcourier.so"));
  CHECK_FALSE(parse_plugin_file_name("libcourier-nic-ofi.so.1"));
  CHECK_FALSE(parse_plugin_file_name("libcourier-dma-x.so"));
}

TEST_CASE("search directories: COURIER_BACKEND_PATH first, each directory once") {
  CapturedLog log;
  SUBCASE("the default directory named again is searched once") {
    Registry registry(kRealPluginDir, log.logger());
    CHECK(registry.default_dir() == canonical(kRealPluginDir));
    CHECK(registry.search_dirs() == std::vector<std::string>{canonical(kRealPluginDir)});
  }
  SUBCASE("path entries come first, in order; empty entries are ignored") {
    Registry registry("::" + kOverrideDir + "::" + kTestPluginDir + "/", log.logger());
    std::vector<std::string> expected = {canonical(kOverrideDir), canonical(kTestPluginDir),
                                         canonical(kRealPluginDir)};
    CHECK(registry.search_dirs() == expected);
  }
  SUBCASE("a missing directory is not an error") {
    Registry registry("/nonexistent/courier-plugins", log.logger());
    CHECK(registry.search_dirs().front() == "/nonexistent/courier-plugins");
    for (const PluginCandidate& candidate : registry.candidates()) {
      CHECK_FALSE(candidate.path.starts_with("/nonexistent/"));
    }
  }
}

TEST_CASE("a name found in two directories: the first wins, the second is shadowed") {
  CapturedLog log;
  Registry registry(kOverrideDir + ":" + kTestPluginDir, log.logger());

  const PluginCandidate* shadowed = find_candidate(registry, test_plugin("libcourier-nic-sim.so"));
  REQUIRE(shadowed != nullptr);
  CHECK_FALSE(shadowed->usable);
  CHECK(shadowed->reason == "shadowed by " + override_plugin("libcourier-nic-sim.so"));
  CHECK(log.lines_containing(shadowed->path).size() == 1);

  std::vector<const NicPlugin*> sim = registry.nic_choices("sim");
  REQUIRE(sim.size() == 1);
  CHECK(sim[0]->path == override_plugin("libcourier-nic-sim.so"));

  // The override directory's stand-in "host" also shadows the real one.
  if (std::filesystem::exists(real_plugin("libcourier-gpu-host.so"))) {
    const PluginCandidate* real_host =
        find_candidate(registry, real_plugin("libcourier-gpu-host.so"));
    REQUIRE(real_host != nullptr);
    CHECK(real_host->reason == "shadowed by " + override_plugin("libcourier-gpu-host.so"));
  }
}

TEST_CASE("no spec: every usable plugin, by name") {
  CapturedLog log;
  Registry registry(kOverrideDir + ":" + kTestPluginDir, log.logger());

  std::vector<std::string> gpu = names_of(registry.gpu_choices(""));
  REQUIRE(gpu.size() >= 2);
  CHECK(std::is_sorted(gpu.begin(), gpu.end()));
  CHECK(contains(gpu, "host"));
  CHECK(contains(gpu, "sim"));

  std::vector<std::string> nic = names_of(registry.nic_choices("  "));
  CHECK(std::is_sorted(nic.begin(), nic.end()));
  CHECK(contains(nic, "sim"));
  CHECK(contains(nic, "mock"));
  CHECK_FALSE(contains(nic, "abimajor2"));
}

TEST_CASE("a forced name selects exactly that plugin") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  std::vector<const NicPlugin*> nic = registry.nic_choices("sim");
  REQUIRE(nic.size() == 1);
  CHECK(nic[0]->name == "sim");
  CHECK(nic[0]->path == test_plugin("libcourier-nic-sim.so"));
  std::vector<const GpuPlugin*> gpu = registry.gpu_choices("sim");
  REQUIRE(gpu.size() == 1);
  CHECK(gpu[0]->path == test_plugin("libcourier-gpu-sim.so"));
}

TEST_CASE("a forced unknown name names the variable and lists what is usable and rejected") {
  CapturedLog log;
  Registry registry(kTestPluginDir, log.logger());
  std::string error = error_from([&] { registry.nic_choices("foo"); });
  CAPTURE(error);
  CHECK(error.starts_with("COURIER_NIC_BACKEND=foo: no NIC backend named 'foo' (usable: "));
  CHECK(error.find("mock, ") != std::string::npos);  // usable names, in selection order
  CHECK(error.find("sim") != std::string::npos);
  CHECK(error.find("; rejected: ") != std::string::npos);
  CHECK(error.find("abimajor2 (reports ABI major 2 in its struct; this Courier needs 1)") !=
        std::string::npos);

  std::string gpu_error = error_from([&] { registry.gpu_choices("metal"); });
  CHECK(gpu_error.starts_with("COURIER_GPU_BACKEND=metal: no GPU backend named 'metal'"));
}

TEST_CASE("a forced name that was rejected: the reason, logged at warn") {
  CapturedLog log(LogLevel::warn);
  Registry registry(kTestPluginDir, log.logger());
  REQUIRE(log.text().empty());

  std::string path = test_plugin("libcourier-nic-abimajor2.so");
  std::string error = error_from([&] { registry.nic_choices("abimajor2"); });
  CAPTURE(error);
  CHECK(error.starts_with("COURIER_NIC_BACKEND=abimajor2: NIC backend 'abimajor2' at " + path +
                          " is not usable: reports ABI major 2 in its struct"));
  std::vector<std::string> lines = log.lines_containing(path);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("courier warn registry") != std::string::npos);
  CHECK(lines[0].find("reports ABI major 2") != std::string::npos);
}

TEST_CASE("a forced path loads that file and records it") {
  CapturedLog log(LogLevel::warn);
  // The override directory is not searched here, so its file is new.
  Registry registry(kTestPluginDir, log.logger());
  size_t before = registry.candidates().size();
  std::string path = override_plugin("libcourier-nic-sim.so");

  std::vector<const NicPlugin*> chosen = registry.nic_choices(path);
  REQUIRE(chosen.size() == 1);
  CHECK(chosen[0]->name == "sim");
  CHECK(chosen[0]->path == path);
  REQUIRE(registry.candidates().size() == before + 1);
  CHECK(registry.candidates().back().path == path);
  CHECK(registry.candidates().back().usable);

  SUBCASE("asking again returns the same plugin without loading it twice") {
    std::vector<const NicPlugin*> again =
        registry.nic_choices(kOverrideDir + "/./libcourier-nic-sim.so");
    REQUIRE(again.size() == 1);
    CHECK(again[0] == chosen[0]);
    CHECK(registry.candidates().size() == before + 1);
  }
  SUBCASE("a path the scan already found returns the scanned plugin") {
    std::vector<const NicPlugin*> scanned =
        registry.nic_choices(test_plugin("libcourier-nic-mock.so"));
    REQUIRE(scanned.size() == 1);
    auto& plugins = registry.nic_plugins();
    CHECK(std::any_of(plugins.begin(), plugins.end(),
                      [&](const NicPlugin& plugin) { return &plugin == scanned[0]; }));
    CHECK(registry.candidates().size() == before + 1);
  }
  CHECK(contains(registry.declared_knob_names(), "COURIER_SIM_IMM_BYTES"));
}

TEST_CASE("a forced path that is unusable: the path and its reason") {
  CapturedLog log(LogLevel::warn);
  Registry registry(kOverrideDir, log.logger());  // the test directory is not searched

  SUBCASE("a broken plugin") {
    std::string path = test_plugin("libcourier-nic-misnamed.so");
    std::string error = error_from([&] { registry.nic_choices(path); });
    CHECK(error == "COURIER_NIC_BACKEND=" + path + ": NIC plugin " + path +
                       " is not usable: its struct is named 'somebody-else' but the file name "
                       "says 'misnamed'");
    const PluginCandidate* candidate = find_candidate(registry, path);
    REQUIRE(candidate != nullptr);
    CHECK_FALSE(candidate->usable);
    std::vector<std::string> lines = log.lines_containing(path);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("courier warn registry") != std::string::npos);
  }
  SUBCASE("a GPU plugin given as a NIC backend") {
    std::string path = test_plugin("libcourier-gpu-sim.so");
    std::string error = error_from([&] { registry.nic_choices(path); });
    CHECK(error.ends_with(": is a GPU plugin (exports courier_gpu_backend_v1), not a NIC plugin"));
  }
  SUBCASE("a file that does not exist") {
    std::string error =
        error_from([&] { registry.gpu_choices("/nonexistent/libcourier-gpu-x.so"); });
    CAPTURE(error);
    CHECK(
        error.starts_with("COURIER_GPU_BACKEND=/nonexistent/libcourier-gpu-x.so: GPU plugin "
                          "/nonexistent/libcourier-gpu-x.so is not usable: not loadable: "));
    CHECK(error.find("No such file") != std::string::npos);
  }
}

TEST_CASE("^a,b excludes names") {
  CapturedLog log(LogLevel::warn);
  Registry registry(kTestPluginDir, log.logger());
  std::vector<std::string> all = names_of(registry.nic_choices(""));
  std::vector<std::string> kept = names_of(registry.nic_choices("^sim, mock"));
  CHECK_FALSE(contains(kept, "sim"));
  CHECK_FALSE(contains(kept, "mock"));
  CHECK(kept.size() == all.size() - 2);
  CHECK(log.text().empty());

  SUBCASE("excluding a name nobody found is harmless but reported") {
    std::vector<std::string> still = names_of(registry.nic_choices("^sim,nosuch"));
    CHECK(still.size() == all.size() - 1);
    std::vector<std::string> lines = log.lines_containing("'nosuch'");
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("COURIER_NIC_BACKEND=^sim,nosuch") != std::string::npos);
  }
  SUBCASE("a GPU exclusion list") {
    CHECK_FALSE(contains(names_of(registry.gpu_choices("^sim")), "sim"));
  }
}

const NicPlugin* find_nic(const Registry& registry, std::string_view name) {
  for (const NicPlugin& plugin : registry.nic_plugins()) {
    if (plugin.name == name) return &plugin;
  }
  return nullptr;
}

std::vector<std::string> claim_drivers(const std::vector<courier_nic_claim_v1>& claims) {
  std::vector<std::string> drivers;
  for (const courier_nic_claim_v1& claim : claims) {
    drivers.emplace_back(claim.driver != nullptr ? claim.driver : "");
  }
  return drivers;
}

TEST_CASE("device claims (NIC ABI 1.3): read up to the plugin's minor, malformed ones rejected") {
  CapturedLog log;
  const std::string dir = kTestPluginDir + "/claims";
  Registry registry(dir, log.logger());

  const NicPlugin* claims = find_nic(registry, "claims");
  REQUIRE(claims != nullptr);
  const std::vector<courier_nic_claim_v1> read = nic_claims(*claims);
  REQUIRE(read.size() == 3);
  CHECK(std::string(read[0].driver) == "vendor_nic");
  CHECK(read[1].driver == nullptr);
  CHECK(read[1].pci_vendor == 0x5e1e);
  CHECK(read[1].pci_device == 0x0001);
  CHECK(read[2].flags == COURIER_NIC_CLAIM_FALLBACK);

  // Built against 1.2: loads and claims nothing, whatever follows its struct.
  const NicPlugin* minor2 = find_nic(registry, "minor2");
  REQUIRE(minor2 != nullptr);
  CHECK(minor2->abi_minor == 2);
  CHECK(nic_claims(*minor2).empty());

  // A later minor's flag: that claim is skipped, the others read.
  const NicPlugin* newer = find_nic(registry, "newer");
  REQUIRE(newer != nullptr);
  CHECK(claim_drivers(nic_claims(*newer)) == std::vector<std::string>{"newer_nic"});

  const std::vector<std::pair<std::string, std::string>> rejected = {
      {"libcourier-nic-nodevice.so",
       "device claim #1 names no device (set driver, pci_vendor, or COURIER_NIC_CLAIM_FALLBACK)"},
      {"libcourier-nic-novendor.so",
       "device claim #0 gives PCI device 1021 without its PCI vendor"},
      {"libcourier-nic-badfallback.so",
       "device claim #0 is COURIER_NIC_CLAIM_FALLBACK but names a device (a fallback serves what "
       "no claim names)"},
      {"libcourier-nic-badflags.so", "device claim #0 has unknown flags 0x80"},
      {"libcourier-nic-nulltable.so", "declares 2 device claims but its claims table is NULL"},
  };
  for (const auto& [file, reason] : rejected) {
    CAPTURE(file);
    const PluginCandidate* candidate = find_candidate(registry, canonical(dir + "/" + file));
    REQUIRE(candidate != nullptr);
    CHECK_FALSE(candidate->usable);
    CHECK(candidate->reason == reason);
  }

  // Courier's own plugins say what they drive (those this build made).
  if (const NicPlugin* ofi = find_nic(registry, "ofi")) {
    const std::vector<courier_nic_claim_v1> ofi_claims = nic_claims(*ofi);
    REQUIRE(ofi_claims.size() == 1);
    CHECK(ofi_claims[0].flags == COURIER_NIC_CLAIM_FALLBACK);
  }
  if (const NicPlugin* cx7 = find_nic(registry, "cx7")) {
    CHECK(claim_drivers(nic_claims(*cx7)) == std::vector<std::string>{"mlx5", ""});
    CHECK(nic_claims(*cx7)[1].pci_vendor == 0x15b3);
  }
}

}  // namespace
}  // namespace courier::test
