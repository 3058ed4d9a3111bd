// Conformance, single process: the plugin struct, init/query, knobs,
// endpoints and memory registration.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nic_harness.hpp"

namespace courier::conformance {
namespace {

constexpr uint32_t kKnownCaps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM |
                                COURIER_NIC_CAP_ORDERED_WRITES | COURIER_NIC_CAP_DELIVERY_COMPLETE |
                                COURIER_NIC_CAP_IMM_SOURCE | COURIER_NIC_CAP_LOOPBACK |
                                COURIER_NIC_CAP_PASSIVE_TARGET | COURIER_NIC_CAP_HOST_LOCAL |
                                COURIER_NIC_CAP_CHEAP_REGISTRATION;

std::string caps_text(uint32_t caps) {
  const std::pair<uint32_t, const char*> names[] = {
      {COURIER_NIC_CAP_RMA_WRITE, "rma_write"},
      {COURIER_NIC_CAP_WRITE_IMM, "write_imm"},
      {COURIER_NIC_CAP_ORDERED_WRITES, "ordered_writes"},
      {COURIER_NIC_CAP_DELIVERY_COMPLETE, "delivery_complete"},
      {COURIER_NIC_CAP_IMM_SOURCE, "imm_source"},
      {COURIER_NIC_CAP_LOOPBACK, "loopback"},
      {COURIER_NIC_CAP_PASSIVE_TARGET, "passive_target"},
      {COURIER_NIC_CAP_HOST_LOCAL, "host_local"},
      {COURIER_NIC_CAP_CHEAP_REGISTRATION, "cheap_registration"},
  };
  std::string text;
  for (const auto& [bit, name] : names) {
    if (caps & bit) text += std::string(text.empty() ? "" : ",") + name;
  }
  return text;
}

// An initialised backend, closed at scope exit.
struct BackendInstance {
  TestHost host;
  void* backend = nullptr;
  int status = 0;

  BackendInstance() { status = plugin().init(host.services(), &backend); }
  ~BackendInstance() {
    if (status == 0) plugin().fini(backend);
  }
};

struct EndpointInstance {
  void* ep = nullptr;
  int status = 0;

  explicit EndpointInstance(void* backend, uint32_t tx_depth = 64) {
    courier_nic_ep_attr_v1 attr{};
    attr.struct_size = sizeof attr;
    attr.tx_depth = tx_depth;
    attr.rx_depth = 64;
    status = plugin().ep_open(backend, &attr, &ep);
  }
  ~EndpointInstance() {
    if (status == 0) plugin().ep_close(ep);
  }
};

}  // namespace

TEST_CASE("plugin: header, description and every entry point") {
  const courier_nic_plugin_v1& api = plugin();
  INFO("plugin file: " << plugin_path());
  CHECK(api.header.abi_major == COURIER_NIC_ABI_MAJOR);
  CHECK(api.header.struct_size >= sizeof(courier_nic_plugin_v1));
  REQUIRE(api.header.name != nullptr);
  REQUIRE(api.header.name[0] != '\0');
  // The registry finds backends by file name: libcourier-nic-<name>.so.
  const std::string expected_file = std::string("libcourier-nic-") + api.header.name + ".so";
  const std::string& path = plugin_path();
  CHECK_MESSAGE(path.size() >= expected_file.size(), path);
  CHECK_MESSAGE(
      path.compare(path.size() - expected_file.size(), expected_file.size(), expected_file) == 0,
      "file " << path << " does not match the header name " << api.header.name);
  CHECK(api.description != nullptr);
  const std::pair<const char*, bool> entries[] = {
      {"init", api.init != nullptr},
      {"fini", api.fini != nullptr},
      {"last_error", api.last_error != nullptr},
      {"query", api.query != nullptr},
      {"ep_open", api.ep_open != nullptr},
      {"ep_close", api.ep_close != nullptr},
      {"ep_name", api.ep_name != nullptr},
      {"ep_connect", api.ep_connect != nullptr},
      {"mr_register", api.mr_register != nullptr},
      {"mr_deregister", api.mr_deregister != nullptr},
      {"post_write", api.post_write != nullptr},
      {"poll", api.poll != nullptr},
  };
  for (const auto& [name, present] : entries) CHECK_MESSAGE(present, name << " is NULL");
  CHECK(api.last_error(nullptr) != nullptr);
}

TEST_CASE("plugin: knobs are named, documented and have valid defaults") {
  const courier_nic_plugin_v1& api = plugin();
  if (api.num_knobs == 0) {
    MESSAGE("SKIP: the backend declares no knobs");
    return;
  }
  REQUIRE(api.knobs != nullptr);
  for (uint32_t i = 0; i < api.num_knobs; ++i) {
    const courier_knob_v1& knob = api.knobs[i];
    REQUIRE(knob.name != nullptr);
    INFO("knob " << knob.name);
    CHECK(std::strncmp(knob.name, "COURIER_", 8) == 0);
    CHECK(knob.help != nullptr);
    if (knob.allowed && knob.default_value) {
      const std::string spec = knob.allowed;
      if (size_t dots = spec.find(".."); dots != std::string::npos) {
        // "min..max": the default is an integer within the range.
        const long long min = std::stoll(spec.substr(0, dots));
        const long long max = std::stoll(spec.substr(dots + 2));
        const long long value = std::stoll(knob.default_value);
        CHECK_MESSAGE((value >= min && value <= max),
                      "default '" << knob.default_value << "' is outside '" << spec << "'");
      } else {
        const std::string allowed = "|" + spec + "|";
        CHECK_MESSAGE(
            allowed.find(std::string("|") + knob.default_value + "|") != std::string::npos,
            "default '" << knob.default_value << "' is not in '" << spec << "'");
      }
    }
  }
}

TEST_CASE("init: an invalid enumerated knob value fails and names the variable") {
  const courier_nic_plugin_v1& api = plugin();
  bool tested = false;
  for (uint32_t i = 0; i < api.num_knobs; ++i) {
    const courier_knob_v1& knob = api.knobs[i];
    if (!knob.allowed) continue;
    tested = true;
    INFO("knob " << knob.name);
    TestHost host;
    host.set_env(knob.name, "conformance-invalid-value");
    void* backend = nullptr;
    const int rc = api.init(host.services(), &backend);
    CHECK(rc < 0);
    if (rc == 0) {
      api.fini(backend);
      continue;
    }
    const std::string error = backend_error();
    CHECK_MESSAGE(error.find(knob.name) != std::string::npos, "last_error: " << error);
  }
  if (!tested) MESSAGE("SKIP: the backend has no enumerated knobs");
}

TEST_CASE("init/query: properties are consistent") {
  BackendInstance instance;
  REQUIRE_MESSAGE(instance.status == 0, "init failed: " << backend_error());
  const courier_nic_plugin_v1& api = plugin();

  courier_nic_props_v1 props{};
  props.struct_size = sizeof props;
  REQUIRE_MESSAGE(api.query(instance.backend, &props) == 0, backend_error(instance.backend));
  CHECK(props.struct_size == sizeof props);  // the caller's size is kept

  MESSAGE("backend " << std::string(api.header.name) << " on device '" << props.device
                     << "': caps [" << caps_text(props.caps) << "], imm_bytes " << props.imm_bytes
                     << ", max_msg_size " << props.max_msg_size << ", max_ep_name "
                     << props.max_ep_name << ", latency " << props.latency_ns << " ns, bandwidth "
                     << props.bandwidth_mbps << " Mbit/s");

  CHECK((props.caps & ~kKnownCaps) == 0);
  CHECK((props.caps & COURIER_NIC_CAP_RMA_WRITE) != 0);
  if (props.caps & COURIER_NIC_CAP_WRITE_IMM) {
    CHECK(props.imm_bytes >= 1);
    CHECK(props.imm_bytes <= 8);
  } else {
    CHECK(props.imm_bytes == 0);
    CHECK((props.caps & COURIER_NIC_CAP_IMM_SOURCE) == 0);
  }
  CHECK((props.atomic_native & ~props.atomic_ops) == 0);
  CHECK((props.mem_kinds & COURIER_MEM_HOST) != 0);
  CHECK(props.max_msg_size > 0);
  CHECK(props.max_ep_name > 0);
  CHECK(std::memchr(props.device, '\0', sizeof props.device) != nullptr);
  CHECK(props.device[0] != '\0');
  CHECK(std::memchr(props.pci_address, '\0', sizeof props.pci_address) != nullptr);

  // A second instance works alongside the first.
  BackendInstance second;
  CHECK_MESSAGE(second.status == 0, backend_error());
}

TEST_CASE("endpoints: open, name and close") {
  BackendInstance instance;
  REQUIRE_MESSAGE(instance.status == 0, "init failed: " << backend_error());
  const courier_nic_plugin_v1& api = plugin();
  courier_nic_props_v1 props{};
  props.struct_size = sizeof props;
  REQUIRE(api.query(instance.backend, &props) == 0);

  EndpointInstance first(instance.backend);
  EndpointInstance second(instance.backend);
  REQUIRE_MESSAGE(first.status == 0, backend_error(instance.backend));
  REQUIRE_MESSAGE(second.status == 0, backend_error(instance.backend));

  std::vector<char> name1(props.max_ep_name), name2(props.max_ep_name);
  size_t len1 = name1.size(), len2 = name2.size();
  REQUIRE_MESSAGE(api.ep_name(first.ep, name1.data(), &len1) == 0, backend_error());
  REQUIRE_MESSAGE(api.ep_name(second.ep, name2.data(), &len2) == 0, backend_error());
  CHECK(len1 > 0);
  CHECK(len1 <= props.max_ep_name);
  CHECK(len2 <= props.max_ep_name);
  CHECK_MESSAGE((len1 != len2 || std::memcmp(name1.data(), name2.data(), len1) != 0),
                "two endpoints got the same name");

  // A buffer too small for the name is an error, not an overflow.
  char tiny[1] = {};
  size_t tiny_len = 0;
  CHECK(api.ep_name(first.ep, tiny, &tiny_len) < 0);
  CHECK_FALSE(backend_error().empty());
}

TEST_CASE("memory registration: register, distinct keys, deregister, register again") {
  BackendInstance instance;
  REQUIRE_MESSAGE(instance.status == 0, "init failed: " << backend_error());
  EndpointInstance endpoint(instance.backend);
  REQUIRE_MESSAGE(endpoint.status == 0, backend_error(instance.backend));
  const courier_nic_plugin_v1& api = plugin();

  const size_t sizes[] = {4096, 65536, size_t{1} << 20};
  std::vector<std::vector<std::byte>> buffers;
  std::vector<void*> regions;
  std::set<std::pair<uint64_t, uint64_t>> keys;
  for (size_t size : sizes) {
    buffers.emplace_back(size);
    void* mr = nullptr;
    courier_nic_rkey_v1 rkey{};
    REQUIRE_MESSAGE(api.mr_register(endpoint.ep, buffers.back().data(), size, COURIER_MEM_HOST, &mr,
                                    &rkey) == 0,
                    backend_error());
    CHECK(mr != nullptr);
    regions.push_back(mr);
    keys.insert({rkey.key, rkey.base});
  }
  CHECK_MESSAGE(keys.size() == regions.size(), "two regions got the same remote key");

  // A second registration of memory that is already registered.
  void* overlap = nullptr;
  courier_nic_rkey_v1 overlap_key{};
  CHECK(api.mr_register(endpoint.ep, buffers[1].data() + 4096, 4096, COURIER_MEM_HOST, &overlap,
                        &overlap_key) == 0);
  if (overlap) CHECK(api.mr_deregister(overlap) == 0);

  for (void* mr : regions) CHECK_MESSAGE(api.mr_deregister(mr) == 0, backend_error());

  void* again = nullptr;
  courier_nic_rkey_v1 again_key{};
  REQUIRE(api.mr_register(endpoint.ep, buffers[0].data(), sizes[0], COURIER_MEM_HOST, &again,
                          &again_key) == 0);
  CHECK(api.mr_deregister(again) == 0);
}

}  // namespace courier::conformance
