#include "core/plugin_loader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstddef>
#include <vector>

#include "core/gpu_parts.hpp"
#include "core/plugin_library.hpp"

namespace courier {

namespace {

// An entry point the v1.0 core calls without checking it first, so a NULL
// one makes the plugin unusable.
template <class Ops>
struct RequiredEntry {
  const char* name;
  bool (*present)(const Ops& ops);
};

#define COURIER_REQUIRED_ENTRY(Ops, field)                      \
  RequiredEntry<Ops> {                                          \
#field, [](const Ops& ops) { return ops.field != nullptr; } \
  }

// What differs between the NIC and the GPU ABI. The checks in load() are the
// same for both kinds.
template <class Ops>
struct Abi;

template <>
struct Abi<courier_nic_plugin_v1> {
  using Ops = courier_nic_plugin_v1;
  using Plugin = NicPlugin;
  static constexpr PluginKind kind = PluginKind::nic;
  static constexpr const char* label = "NIC";
  static constexpr const char* symbol = COURIER_NIC_SYMBOL_V1;
  static constexpr const char* symbol_stem = "courier_nic_backend_v";  // + major
  static constexpr const char* other_label = "GPU";
  static constexpr const char* other_symbol = COURIER_GPU_SYMBOL_V1;
  static constexpr uint16_t major = COURIER_NIC_ABI_MAJOR;
  // ABI 1.0 defines every entry up to and including poll; the core may call
  // any of them, so a struct must be at least this long.
  static constexpr size_t required_size = offsetof(Ops, poll) + sizeof(Ops::poll);
  static constexpr std::array entries = {
      COURIER_REQUIRED_ENTRY(Ops, init),        COURIER_REQUIRED_ENTRY(Ops, fini),
      COURIER_REQUIRED_ENTRY(Ops, last_error),  COURIER_REQUIRED_ENTRY(Ops, query),
      COURIER_REQUIRED_ENTRY(Ops, ep_open),     COURIER_REQUIRED_ENTRY(Ops, ep_close),
      COURIER_REQUIRED_ENTRY(Ops, ep_name),     COURIER_REQUIRED_ENTRY(Ops, ep_connect),
      COURIER_REQUIRED_ENTRY(Ops, mr_register), COURIER_REQUIRED_ENTRY(Ops, mr_deregister),
      COURIER_REQUIRED_ENTRY(Ops, post_write),  COURIER_REQUIRED_ENTRY(Ops, poll),
  };
  static std::optional<std::string> check_parts(const Ops&) { return std::nullopt; }
};

template <>
struct Abi<courier_gpu_plugin_v1> {
  using Ops = courier_gpu_plugin_v1;
  using Plugin = GpuPlugin;
  static constexpr PluginKind kind = PluginKind::gpu;
  static constexpr const char* label = "GPU";
  static constexpr const char* symbol = COURIER_GPU_SYMBOL_V1;
  static constexpr const char* symbol_stem = "courier_gpu_backend_v";
  static constexpr const char* other_label = "NIC";
  static constexpr const char* other_symbol = COURIER_NIC_SYMBOL_V1;
  static constexpr uint16_t major = COURIER_GPU_ABI_MAJOR;
  // launch_host_kernel is required even without COURIER_GPU_CAP_HOST_KERNELS:
  // such backends implement it as "return -ENOTSUP".
  static constexpr size_t required_size =
      offsetof(Ops, launch_host_kernel) + sizeof(Ops::launch_host_kernel);
  static constexpr std::array entries = {
      COURIER_REQUIRED_ENTRY(Ops, init),
      COURIER_REQUIRED_ENTRY(Ops, fini),
      COURIER_REQUIRED_ENTRY(Ops, last_error),
      COURIER_REQUIRED_ENTRY(Ops, query),
      COURIER_REQUIRED_ENTRY(Ops, mem_alloc),
      COURIER_REQUIRED_ENTRY(Ops, mem_free),
      COURIER_REQUIRED_ENTRY(Ops, host_alloc_mapped),
      COURIER_REQUIRED_ENTRY(Ops, host_free_mapped),
      COURIER_REQUIRED_ENTRY(Ops, memcpy_sync),
      COURIER_REQUIRED_ENTRY(Ops, launch_host_kernel),
  };

  // GPU ABI 1.15: a plugin of that minor or later is called through its
  // parts, so its runtime part must be there with every 1.0 entry.
  static std::optional<std::string> check_parts(const Ops& ops) {
    if (ops.header.abi_minor < kGpuPartsMinor) return std::nullopt;
    using Runtime = courier_gpu_runtime_part_v1;
    constexpr size_t table_size = offsetof(Ops, runtime) + sizeof(Ops::runtime);
    if (ops.header.struct_size < table_size) {
      return fmt::format(
          "speaks GPU ABI 1.{} but its struct_size {} ends before the runtime part ({} bytes "
          "needed)",
          ops.header.abi_minor, ops.header.struct_size, table_size);
    }
    if (ops.runtime == nullptr) {
      return fmt::format("speaks GPU ABI 1.{} but its runtime part is NULL (required from 1.{})",
                         ops.header.abi_minor, kGpuPartsMinor);
    }
    constexpr size_t runtime_size =
        offsetof(Runtime, launch_host_kernel) + sizeof(Runtime::launch_host_kernel);
    if (ops.runtime->struct_size < runtime_size) {
      return fmt::format("its runtime part's struct_size {} is shorter than the {} bytes it needs",
                         ops.runtime->struct_size, runtime_size);
    }
    for (const RequiredEntry<Runtime>& required : runtime_entries) {
      if (!required.present(*ops.runtime)) {
        return fmt::format("required entry 'runtime.{}' is NULL", required.name);
      }
    }
    return std::nullopt;
  }
  static constexpr std::array runtime_entries = {
      COURIER_REQUIRED_ENTRY(courier_gpu_runtime_part_v1, mem_alloc),
      COURIER_REQUIRED_ENTRY(courier_gpu_runtime_part_v1, mem_free),
      COURIER_REQUIRED_ENTRY(courier_gpu_runtime_part_v1, host_alloc_mapped),
      COURIER_REQUIRED_ENTRY(courier_gpu_runtime_part_v1, host_free_mapped),
      COURIER_REQUIRED_ENTRY(courier_gpu_runtime_part_v1, memcpy_sync),
      COURIER_REQUIRED_ENTRY(courier_gpu_runtime_part_v1, launch_host_kernel),
  };
};

#undef COURIER_REQUIRED_ENTRY

// The claim flags this core knows (nic_v1.h, minor 3).
constexpr uint32_t kKnownClaimFlags = COURIER_NIC_CLAIM_FALLBACK;

// Whether the struct has the claims fields (NIC ABI 1.3).
bool has_claims(const courier_nic_plugin_v1& ops) {
  constexpr size_t needed =
      offsetof(courier_nic_plugin_v1, num_claims) + sizeof(courier_nic_plugin_v1::num_claims);
  return ops.header.abi_minor >= 3 && ops.header.struct_size >= needed;
}

// Why the device claims of a NIC plugin are malformed, or "" when they are
// fine (courier_nic_claim_v1's rules). A claim with flags of a later minor
// than this core's is not this core's to judge: it is skipped.
std::string claims_error(const courier_nic_plugin_v1& ops) {
  if (!has_claims(ops) || ops.num_claims == 0) return {};
  if (ops.claims == nullptr) {
    return fmt::format("declares {} device claims but its claims table is NULL", ops.num_claims);
  }
  const bool newer = ops.header.abi_minor > COURIER_NIC_ABI_MINOR;
  for (uint32_t i = 0; i < ops.num_claims; ++i) {
    const courier_nic_claim_v1& claim = ops.claims[i];
    const bool names_device = (claim.driver != nullptr && claim.driver[0] != '\0') ||
                              claim.pci_vendor != 0 || claim.pci_device != 0;
    if ((claim.flags & ~kKnownClaimFlags) != 0) {
      if (newer) continue;
      return fmt::format("device claim #{} has unknown flags 0x{:x}", i,
                         claim.flags & ~kKnownClaimFlags);
    }
    if ((claim.flags & COURIER_NIC_CLAIM_FALLBACK) != 0) {
      if (names_device) {
        return fmt::format(
            "device claim #{} is COURIER_NIC_CLAIM_FALLBACK but names a device (a fallback "
            "serves what no claim names)",
            i);
      }
      continue;
    }
    if (claim.pci_device != 0 && claim.pci_vendor == 0) {
      return fmt::format("device claim #{} gives PCI device {:04x} without its PCI vendor", i,
                         claim.pci_device);
    }
    if (!names_device) {
      return fmt::format(
          "device claim #{} names no device (set driver, pci_vendor, or "
          "COURIER_NIC_CLAIM_FALLBACK)",
          i);
    }
  }
  return {};
}

// Highest major we look for when the v1 symbol is missing. The search only
// makes the message precise ("built for a newer Courier" instead of "not a
// plugin"); any number of future majors would be handled the same way.
constexpr int kHighestProbedMajor = 9;

// Why a file without the v1 symbol is not usable, as precisely as we can tell.
template <class Ops>
std::string describe_missing_symbol(const PluginLibrary& library, PluginCandidate& candidate) {
  using A = Abi<Ops>;
  std::vector<int> majors;
  for (int major = A::major + 1; major <= kHighestProbedMajor; ++major) {
    if (library.symbol(fmt::format("{}{}", A::symbol_stem, major).c_str()) != nullptr) {
      majors.push_back(major);
    }
  }
  if (!majors.empty()) {
    candidate.abi_major = static_cast<uint16_t>(majors.back());
    return fmt::format("exports ABI major{} {} only; this Courier speaks major {}",
                       majors.size() > 1 ? "s" : "", fmt::join(majors, ", "), A::major);
  }
  if (library.symbol(A::other_symbol) != nullptr) {
    return fmt::format("is a {} plugin (exports {}), not a {} plugin", A::other_label,
                       A::other_symbol, A::label);
  }
  return fmt::format("not a Courier plugin: no {} symbol", A::symbol);
}

template <class Ops>
std::optional<typename Abi<Ops>::Plugin> load(const std::string& path,
                                              std::string_view expected_name,
                                              PluginCandidate& candidate) {
  using A = Abi<Ops>;
  candidate.kind = A::kind;
  candidate.path = path;
  candidate.name = std::string(expected_name);
  candidate.usable = false;
  candidate.reason.clear();
  auto reject = [&](std::string reason) {
    candidate.reason = std::move(reason);
    return std::nullopt;
  };

  std::string error;
  std::shared_ptr<PluginLibrary> library = PluginLibrary::open(path, error);
  if (!library) return reject("not loadable: " + error);

  void* entry = library->symbol(A::symbol);
  if (entry == nullptr) return reject(describe_missing_symbol<Ops>(*library, candidate));
  auto get_plugin = reinterpret_cast<const Ops* (*)()>(entry);
  const Ops* ops = get_plugin();
  if (ops == nullptr) return reject(fmt::format("{}() returned NULL", A::symbol));

  // The header is frozen across majors, so it is safe to read before we know
  // what the rest of the struct looks like.
  const courier_plugin_header& header = ops->header;
  candidate.abi_major = header.abi_major;
  candidate.abi_minor = header.abi_minor;
  if (header.abi_major != A::major) {
    return reject(fmt::format("reports ABI major {} in its struct; this Courier needs {}",
                              header.abi_major, A::major));
  }
  if (header.struct_size < A::required_size) {
    return reject(fmt::format("struct_size {} is shorter than the {} bytes ABI {}.0 requires",
                              header.struct_size, A::required_size, A::major));
  }
  // Only now is every field of the v1.0 struct known to exist.
  for (const RequiredEntry<Ops>& required : A::entries) {
    if (!required.present(*ops)) {
      return reject(fmt::format("required entry '{}' is NULL", required.name));
    }
  }
  if (std::optional<std::string> reason = A::check_parts(*ops)) return reject(std::move(*reason));
  if (ops->num_knobs > 0 && ops->knobs == nullptr) {
    return reject(fmt::format("declares {} knobs but its knobs table is NULL", ops->num_knobs));
  }
  for (uint32_t i = 0; i < ops->num_knobs; ++i) {
    if (ops->knobs[i].name == nullptr) return reject(fmt::format("knob #{} has no name", i));
  }
  if constexpr (A::kind == PluginKind::nic) {
    if (std::string why = claims_error(*ops); !why.empty()) return reject(std::move(why));
  }
  if (header.name == nullptr || header.name[0] == '\0') {
    return reject("its struct has no name (header.name is NULL or empty)");
  }
  if (expected_name.empty()) {
    candidate.name = header.name;
  } else if (header.name != expected_name) {
    return reject(fmt::format("its struct is named '{}' but the file name says '{}'", header.name,
                              expected_name));
  }

  candidate.usable = true;
  return typename A::Plugin{candidate.name, path, header.abi_minor, ops, std::move(library)};
}

}  // namespace

std::optional<PluginFileName> parse_plugin_file_name(std::string_view file_name) {
  constexpr std::string_view kSuffix = ".so";
  struct Prefix {
    std::string_view text;
    PluginKind kind;
  };
  constexpr Prefix kPrefixes[] = {{"libcourier-gpu-", PluginKind::gpu},
                                  {"libcourier-nic-", PluginKind::nic}};
  for (const Prefix& prefix : kPrefixes) {
    if (!file_name.starts_with(prefix.text) || !file_name.ends_with(kSuffix)) continue;
    // The prefix ends in '-' and the suffix starts with '.', so they cannot overlap.
    std::string_view name = file_name.substr(
        prefix.text.size(), file_name.size() - prefix.text.size() - kSuffix.size());
    if (name.empty()) return std::nullopt;
    return PluginFileName{prefix.kind, std::string(name)};
  }
  return std::nullopt;
}

std::optional<NicPlugin> load_nic_plugin(const std::string& path, std::string_view expected_name,
                                         PluginCandidate& candidate) {
  return load<courier_nic_plugin_v1>(path, expected_name, candidate);
}

std::optional<GpuPlugin> load_gpu_plugin(const std::string& path, std::string_view expected_name,
                                         PluginCandidate& candidate) {
  return load<courier_gpu_plugin_v1>(path, expected_name, candidate);
}

std::vector<courier_nic_claim_v1> nic_claims(const NicPlugin& plugin) {
  std::vector<courier_nic_claim_v1> claims;
  const courier_nic_plugin_v1& ops = *plugin.ops;
  if (!has_claims(ops) || ops.claims == nullptr) return claims;
  for (uint32_t i = 0; i < ops.num_claims; ++i) {
    if ((ops.claims[i].flags & ~kKnownClaimFlags) == 0) claims.push_back(ops.claims[i]);
  }
  return claims;
}

}  // namespace courier
