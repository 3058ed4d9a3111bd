// What the libfabric plugins promise, through their real plugin files:
// nic-efa over a test stand-in (shm, tcp) reports what EFA gives (4 bytes of
// immediate data, no ordered writes, no transport atomics) and says it is a
// stand-in; its default provider fails with a reason where there is no EFA;
// nic-ofi keeps its own knob values and claims.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "courier/abi/nic_v1.h"

namespace {

const std::string kPluginDir = COURIER_REAL_PLUGIN_DIR;

// A plugin file, dlopen'ed for the test's lifetime.
class PluginFile {
 public:
  explicit PluginFile(const std::string& name) {
    const std::string path = kPluginDir + "/libcourier-nic-" + name + ".so";
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(handle_ != nullptr, "dlopen " << path << ": " << dlerror());
    auto entry = reinterpret_cast<courier_nic_backend_v1_fn>(dlsym(handle_, COURIER_NIC_SYMBOL_V1));
    REQUIRE_MESSAGE(static_cast<bool>(entry), path << " exports no " << COURIER_NIC_SYMBOL_V1);
    api_ = entry();
    REQUIRE(api_ != nullptr);
  }
  ~PluginFile() {
    if (handle_) dlclose(handle_);
  }
  PluginFile(const PluginFile&) = delete;
  PluginFile& operator=(const PluginFile&) = delete;

  const courier_nic_plugin_v1& api() const { return *api_; }

 private:
  void* handle_ = nullptr;
  const courier_nic_plugin_v1* api_ = nullptr;
};

// Host services with a fake environment and a log the test reads.
class FakeHost {
 public:
  FakeHost() {
    services_.struct_size = sizeof services_;
    services_.ctx = this;
    services_.log = [](void* ctx, int level, const char* backend, const char* message) {
      static_cast<FakeHost*>(ctx)->lines_.push_back(
          {level, std::string(backend) + ": " + std::string(message)});
    };
    services_.get_env = [](void* ctx, const char* name) -> const char* {
      const auto& env = static_cast<FakeHost*>(ctx)->env_;
      const auto found = env.find(name);
      return found == env.end() ? nullptr : found->second.c_str();
    };
    services_.alloc = [](void*, size_t size, size_t alignment) -> void* {
      const size_t align = alignment ? alignment : alignof(std::max_align_t);
      return std::aligned_alloc(align, (size + align - 1) / align * align);
    };
    services_.free = [](void*, void* pointer) { std::free(pointer); };
  }
  FakeHost(const FakeHost&) = delete;
  FakeHost& operator=(const FakeHost&) = delete;

  void set_env(const std::string& name, const std::string& value) { env_[name] = value; }
  const courier_host_services_v1* services() const { return &services_; }
  // The lines logged at `level` that contain `needle`.
  int count(int level, const std::string& needle) const {
    int found = 0;
    for (const auto& [line_level, text] : lines_) {
      if (line_level == level && text.find(needle) != std::string::npos) ++found;
    }
    return found;
  }

 private:
  courier_host_services_v1 services_{};
  std::map<std::string, std::string> env_;
  std::vector<std::pair<int, std::string>> lines_;
};

// An initialised backend, closed at scope exit.
struct Instance {
  const courier_nic_plugin_v1& api;
  void* backend = nullptr;
  int status = 0;
  courier_nic_props_v1 props{};

  Instance(const courier_nic_plugin_v1& plugin, const FakeHost& host) : api(plugin) {
    status = api.init(host.services(), &backend);
    if (status != 0) return;
    props.struct_size = sizeof props;
    REQUIRE(api.query(backend, &props) == 0);
  }
  ~Instance() {
    if (status == 0) api.fini(backend);
  }
  std::string error() const { return api.last_error(backend); }
};

struct Endpoint {
  const courier_nic_plugin_v1& api;
  void* ep = nullptr;
  int status = 0;

  Endpoint(const Instance& instance, uint32_t flags = 0) : api(instance.api) {
    courier_nic_ep_attr_v1 attr{};
    attr.struct_size = sizeof attr;
    attr.tx_depth = 16;
    attr.rx_depth = 16;
    attr.flags = flags;
    status = api.ep_open(instance.backend, &attr, &ep);
  }
  ~Endpoint() {
    if (status == 0) api.ep_close(ep);
  }
};

}  // namespace

TEST_CASE("nic-efa over a test stand-in claims exactly what EFA gives") {
  PluginFile efa("efa");
  const courier_nic_plugin_v1& api = efa.api();
  CHECK(std::string(api.header.name) == "efa");
  // No transport atomics: the ABI says so with a missing entry.
  CHECK_FALSE(static_cast<bool>(api.post_atomic));

  for (const auto& [provider, device_provider] :
       {std::pair<std::string, std::string>{"shm", "shm"}, {"tcp", "tcp;ofi_rxm"}}) {
    CAPTURE(provider);
    FakeHost host;
    host.set_env("COURIER_EFA_PROVIDER", provider);
    Instance efa_backend(api, host);
    REQUIRE_MESSAGE(efa_backend.status == 0, efa_backend.error());
    const courier_nic_props_v1& props = efa_backend.props;

    // shm carries 8 bytes of CQ data; nic-efa reports EFA's 4 everywhere.
    CHECK(props.imm_bytes == 4);
    CHECK((props.caps & COURIER_NIC_CAP_WRITE_IMM) != 0);
    CHECK((props.caps & COURIER_NIC_CAP_IMM_SOURCE) != 0);
    // shm and tcp would grant write-after-write ordering; EFA's SRD does not.
    CHECK((props.caps & COURIER_NIC_CAP_ORDERED_WRITES) == 0);
    CHECK((props.caps_with_atomics & COURIER_NIC_CAP_ORDERED_WRITES) == 0);
    CHECK(props.atomic_ops == 0);
    CHECK(props.atomic_native == 0);
    CHECK((props.mem_kinds & COURIER_MEM_HOST) != 0);
    CHECK(std::string(props.device) ==
          device_provider + " (COURIER_EFA_PROVIDER: test stand-in, not EFA)");
    CHECK(host.count(COURIER_LOG_WARN, "test stand-in, not on EFA hardware") == 1);

    Endpoint plain(efa_backend);
    CHECK_MESSAGE(plain.status == 0, efa_backend.error());
    Endpoint atomic(efa_backend, COURIER_NIC_EP_ATOMICS);
    CHECK(atomic.status == -EOPNOTSUPP);
  }
}

TEST_CASE("nic-efa cuts immediate data to 4 bytes on the wire, as EFA does") {
  // Two endpoints of one process over shm: the upper half of an 8-byte
  // immediate must not arrive, although shm could carry it.
  PluginFile efa("efa");
  const courier_nic_plugin_v1& api = efa.api();
  FakeHost host;
  host.set_env("COURIER_EFA_PROVIDER", "shm");
  Instance backend(api, host);
  REQUIRE_MESSAGE(backend.status == 0, backend.error());
  Endpoint sender(backend), receiver(backend);
  REQUIRE(sender.status == 0);
  REQUIRE(receiver.status == 0);

  const uint32_t stride = backend.props.max_ep_name;
  std::vector<unsigned char> names(2 * size_t{stride});
  for (int rank = 0; rank < 2; ++rank) {
    size_t len = stride;
    REQUIRE(api.ep_name(rank == 0 ? sender.ep : receiver.ep, names.data() + rank * stride, &len) ==
            0);
  }
  REQUIRE(api.ep_connect(sender.ep, 2, names.data(), stride) == 0);
  REQUIRE(api.ep_connect(receiver.ep, 2, names.data(), stride) == 0);

  std::vector<unsigned char> source(64, 0xab), target(64, 0);
  void* source_mr = nullptr;
  void* target_mr = nullptr;
  courier_nic_rkey_v1 source_key{}, target_key{};
  REQUIRE(api.mr_register(sender.ep, source.data(), source.size(), COURIER_MEM_HOST, &source_mr,
                          &source_key) == 0);
  REQUIRE(api.mr_register(receiver.ep, target.data(), target.size(), COURIER_MEM_HOST, &target_mr,
                          &target_key) == 0);

  courier_nic_write_v1 write{};
  write.peer = 1;
  write.flags = COURIER_NIC_WRITE_IMM;
  write.local_mr = source_mr;
  write.length = 16;
  write.remote = target_key;
  write.imm = 0x1122334455667788ull;
  write.cookie = 7;
  // Bounded loops, not timed ones: shm moves data as both sides poll.
  int rc = -EAGAIN;
  for (int attempt = 0; attempt < 1000000 && rc == -EAGAIN; ++attempt) {
    rc = api.post_write(sender.ep, &write);
    if (rc == -EAGAIN) api.poll(receiver.ep, nullptr, 0);
  }
  REQUIRE(rc == 0);
  bool sent = false, received = false;
  courier_nic_completion_v1 completion{};
  for (int round = 0; round < 10000000 && !(sent && received); ++round) {
    if (api.poll(sender.ep, &completion, 1) == 1) {
      CHECK(completion.kind == COURIER_NIC_COMP_TX);
      CHECK(completion.status == 0);
      sent = true;
    }
    if (api.poll(receiver.ep, &completion, 1) == 1) {
      CHECK(completion.kind == COURIER_NIC_COMP_RX_IMM);
      CHECK(completion.status == 0);
      CHECK(completion.imm == 0x55667788u);
      CHECK(completion.peer == 0);
      CHECK(completion.length == 16);
      received = true;
    }
  }
  CHECK(sent);
  CHECK(received);
  CHECK(target[0] == 0xab);
  CHECK(target[16] == 0);
  CHECK(api.mr_deregister(source_mr) == 0);
  CHECK(api.mr_deregister(target_mr) == 0);
}

TEST_CASE("nic-efa's default provider is efa; without it init names the provider and the knob") {
  PluginFile efa("efa");
  FakeHost host;  // COURIER_EFA_PROVIDER unset: efa
  Instance backend(efa.api(), host);
  if (backend.status == 0) {
    // A machine with an EFA device: then it is the real thing.
    MESSAGE("an EFA device is present: " << backend.props.device);
    CHECK(std::string(backend.props.device).find("stand-in") == std::string::npos);
    CHECK(host.count(COURIER_LOG_WARN, "stand-in") == 0);
  } else {
    const std::string error = backend.error();
    CAPTURE(error);
    CHECK(backend.status == -ENODATA);
    CHECK(error.starts_with("libfabric provider 'efa' not found: no EFA device"));
    CHECK(error.ends_with("(COURIER_EFA_PROVIDER=efa)"));
  }
}

TEST_CASE("COURIER_EFA_DEVICE picks the libfabric domain; an unknown one is refused by name") {
  // Over the tcp stand-in the domains are network interfaces; every host has lo.
  PluginFile efa("efa");
  FakeHost host;
  host.set_env("COURIER_EFA_PROVIDER", "tcp");
  host.set_env("COURIER_EFA_DEVICE", "lo");
  {
    Instance backend(efa.api(), host);
    REQUIRE_MESSAGE(backend.status == 0, backend.error());
    CHECK(host.count(COURIER_LOG_INFO, "(domain lo)") == 1);
  }
  host.set_env("COURIER_EFA_DEVICE", "no-such-nic0");
  Instance refused(efa.api(), host);
  CHECK(refused.status == -ENODEV);
  const std::string error = refused.error();
  CAPTURE(error);
  CHECK(
      error.starts_with("COURIER_EFA_DEVICE=no-such-nic0: no device no-such-nic0 among the "
                        "provider's domains ("));
  CHECK(error.find("lo") != std::string::npos);
}

TEST_CASE("the provider knobs accept only their own backend's values") {
  PluginFile efa("efa"), ofi("ofi");
  {
    FakeHost host;
    host.set_env("COURIER_EFA_PROVIDER", "net");
    Instance backend(efa.api(), host);
    CHECK(backend.status == -EINVAL);
    CHECK(backend.error() ==
          "COURIER_EFA_PROVIDER='net' is not valid: allowed values are efa|shm|tcp");
  }
  {
    // efa is an alias nic/ofi knows, but not one of nic-ofi's values.
    FakeHost host;
    host.set_env("COURIER_OFI_PROVIDER", "efa");
    Instance backend(ofi.api(), host);
    CHECK(backend.status == -EINVAL);
    CHECK(backend.error() == "COURIER_OFI_PROVIDER='efa' is not valid: allowed values are shm|tcp");
  }
}

TEST_CASE("nic-ofi keeps its own claims over shared code") {
  PluginFile ofi("ofi");
  const courier_nic_plugin_v1& api = ofi.api();
  CHECK(static_cast<bool>(api.post_atomic));
  FakeHost host;  // COURIER_OFI_PROVIDER unset: shm
  Instance backend(api, host);
  REQUIRE_MESSAGE(backend.status == 0, backend.error());
  CHECK(std::string(backend.props.device) == "shm");
  CHECK(backend.props.imm_bytes == 8);
  CHECK((backend.props.caps & COURIER_NIC_CAP_ORDERED_WRITES) != 0);
  CHECK(host.count(COURIER_LOG_WARN, "stand-in") == 0);
}

TEST_CASE("describe: the size first, then the report, truncated to the caller's buffer") {
  for (const std::string name : {"ofi", "efa"}) {
    CAPTURE(name);
    PluginFile plugin(name);
    const courier_nic_plugin_v1& api = plugin.api();
    REQUIRE(api.header.abi_minor >= 2);
    REQUIRE(static_cast<bool>(api.describe));
    FakeHost host;
    host.set_env(name == "ofi" ? "COURIER_OFI_PROVIDER" : "COURIER_EFA_PROVIDER", "tcp");
    Instance backend(api, host);
    REQUIRE_MESSAGE(backend.status == 0, backend.error());

    size_t needed = 0;
    REQUIRE(api.describe(backend.backend, nullptr, &needed) == 0);
    REQUIRE(needed > 1);
    std::string report(needed, 'x');
    size_t length = needed;
    REQUIRE(api.describe(backend.backend, report.data(), &length) == 0);
    CHECK(length == needed);
    CHECK(report.back() == '\0');
    report.pop_back();
    CHECK(report.find('\0') == std::string::npos);
    CHECK(report.starts_with("provider: tcp;ofi_rxm (provider version "));
    CHECK(report.find("\nimmediate data for Courier: 4 bytes (the write's length travels in "
                      "the upper 32 bits)\n") != std::string::npos);
    CHECK(report.find(name == "ofi"
                          ? "\natomics: add_u64 fetch_add_u64 cas_u64"
                          : "\natomics: none offered by this backend") != std::string::npos);
    CHECK(report.ends_with("\nsettings: write watchdog 30 s\n"));

    char small[10];
    length = sizeof small;
    REQUIRE(api.describe(backend.backend, small, &length) == 0);
    CHECK(length == needed);  // what the whole report needs, whatever was copied
    CHECK(std::string(small) == report.substr(0, sizeof small - 1));
    CHECK(api.describe(nullptr, nullptr, &length) == -EINVAL);
    CHECK(std::string(api.last_error(nullptr)).find("describe: NULL backend") != std::string::npos);
  }
}

TEST_CASE("COURIER_OFI_IFACE puts nic-ofi's tcp endpoints on that interface, atomic ones too") {
  // Every host has lo; tcp lists one libfabric domain per interface.
  PluginFile ofi("ofi");
  FakeHost host;
  host.set_env("COURIER_OFI_PROVIDER", "tcp");
  host.set_env("COURIER_OFI_IFACE", "lo");
  Instance backend(ofi.api(), host);
  REQUIRE_MESSAGE(backend.status == 0, backend.error());
  CHECK(std::string(backend.props.device) == "tcp;ofi_rxm lo");
  CHECK(host.count(COURIER_LOG_INFO, "ofi: provider tcp;ofi_rxm (domain lo)") == 1);
  CHECK(host.count(COURIER_LOG_INFO, "atomic endpoints: provider tcp;ofi_rxm (domain lo)") == 1);
  CHECK(backend.props.atomic_ops != 0);
}

TEST_CASE("COURIER_OFI_IFACE naming no interface of this host stops init, whatever the provider") {
  PluginFile ofi("ofi");
  for (const std::string provider : {"tcp", "shm"}) {
    CAPTURE(provider);
    FakeHost host;
    host.set_env("COURIER_OFI_PROVIDER", provider);
    host.set_env("COURIER_OFI_IFACE", "no-such-if0");
    Instance backend(ofi.api(), host);
    CHECK(backend.status == -ENODEV);
    const std::string error = backend.error();
    CAPTURE(error);
    CHECK(error.starts_with(
        "COURIER_OFI_IFACE='no-such-if0' is not valid: no network interface of that name ("));
    CHECK(error.find("lo") != std::string::npos);  // the interfaces there are
  }
}

TEST_CASE("COURIER_OFI_IFACE has no effect over shm, and says so") {
  PluginFile ofi("ofi");
  FakeHost host;  // COURIER_OFI_PROVIDER unset: shm
  host.set_env("COURIER_OFI_IFACE", "lo");
  Instance backend(ofi.api(), host);
  REQUIRE_MESSAGE(backend.status == 0, backend.error());
  CHECK(std::string(backend.props.device) == "shm");
  CHECK(host.count(COURIER_LOG_INFO, "COURIER_OFI_IFACE=lo has no effect over shm") == 1);
}

TEST_CASE("nic-ofi declares COURIER_OFI_IFACE, so courier-info lists it") {
  PluginFile ofi("ofi");
  const courier_nic_plugin_v1& api = ofi.api();
  bool found = false;
  for (uint32_t i = 0; i < api.num_knobs; ++i) {
    if (std::string(api.knobs[i].name) == "COURIER_OFI_IFACE") {
      found = true;
      CHECK(std::string(api.knobs[i].default_value).empty());
      CHECK(api.knobs[i].allowed == nullptr);  // any name: checked at init
    }
  }
  CHECK(found);
}
