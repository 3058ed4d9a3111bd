// nic-ce through its real plugin file: its table is the shared NIC entry
// points (nic/plugin_entries.hpp), so NULL handles are refused with a reason;
// init opens the GPU or says why not. The cases of the test suite "gpu" need
// a CUDA device (tests/gpu runs them): init opens the GPU the host services
// say the core chose (or, from a core older than gpu_device, the one
// COURIER_GPU_DEVICE names), ep_close refuses an endpoint whose regions are
// still registered, knobs are checked, and a write with immediate data into
// host memory reaches the endpoint itself.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "courier/abi/nic_v1.h"

namespace {

// libcourier-nic-ce.so, dlopen'ed for the test's lifetime.
class PluginFile {
 public:
  PluginFile() {
    const std::string path = std::string(COURIER_REAL_PLUGIN_DIR) + "/libcourier-nic-ce.so";
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
  std::string error() const { return api_->last_error(nullptr); }

 private:
  void* handle_ = nullptr;
  const courier_nic_plugin_v1* api_ = nullptr;
};

// Host services over a fake environment, carrying the GPU the core chose
// (gpu_device answers device 0 unless told otherwise).
class FakeHost {
 public:
  FakeHost() {
    services_.struct_size = sizeof services_;
    services_.ctx = this;
    services_.log = [](void*, int, const char*, const char*) {};
    services_.get_env = [](void* ctx, const char* name) -> const char* {
      const auto& env = static_cast<FakeHost*>(ctx)->env_;
      const auto found = env.find(name);
      return found == env.end() ? nullptr : found->second.c_str();
    };
    services_.gpu_device = [](void* ctx, uint32_t* device) -> int {
      const std::optional<uint32_t>& chosen = static_cast<FakeHost*>(ctx)->gpu_;
      if (device == nullptr) return -EINVAL;
      if (!chosen) return -EAGAIN;
      *device = *chosen;
      return 0;
    };
  }
  FakeHost(const FakeHost&) = delete;
  FakeHost& operator=(const FakeHost&) = delete;

  void set_env(const std::string& name, const std::string& value) { env_[name] = value; }
  // What gpu_device answers: a device, or -EAGAIN (none chosen) for nullopt.
  void choose_gpu(std::optional<uint32_t> device) { gpu_ = device; }
  // The table of a core older than gpu_device (host services minor 2).
  void make_older() { services_.struct_size = offsetof(courier_host_services_v1, gpu_device); }
  const courier_host_services_v1* services() const { return &services_; }

 private:
  courier_host_services_v1 services_{};
  std::map<std::string, std::string> env_;
  std::optional<uint32_t> gpu_ = 0;
};

// init with `host`: its status, the last error and, when it succeeded, the
// device it reports (the backend is closed again).
struct InitResult {
  int status = 0;
  std::string error;
  std::string device;
};
InitResult init_with(const courier_nic_plugin_v1& api, const FakeHost& host) {
  InitResult result;
  void* backend = nullptr;
  result.status = api.init(host.services(), &backend);
  if (result.status != 0) {
    result.error = api.last_error(nullptr);
    return result;
  }
  courier_nic_props_v1 props{};
  props.struct_size = sizeof props;
  CHECK(api.query(backend, &props) == 0);
  result.device = props.device;
  api.fini(backend);
  return result;
}

// An initialised backend and one endpoint on it (GPU hosts only).
struct OpenEndpoint {
  const courier_nic_plugin_v1& api;
  void* backend = nullptr;
  void* ep = nullptr;
  courier_nic_props_v1 props{};

  OpenEndpoint(const courier_nic_plugin_v1& plugin, const FakeHost& host) : api(plugin) {
    REQUIRE_MESSAGE(api.init(host.services(), &backend) == 0, api.last_error(nullptr));
    props.struct_size = sizeof props;
    REQUIRE(api.query(backend, &props) == 0);
    courier_nic_ep_attr_v1 attr{};
    attr.struct_size = sizeof attr;
    attr.tx_depth = 16;
    attr.rx_depth = 16;
    REQUIRE_MESSAGE(api.ep_open(backend, &attr, &ep) == 0, api.last_error(nullptr));
  }
  ~OpenEndpoint() {
    if (ep) CHECK_MESSAGE(api.ep_close(ep) == 0, api.last_error(nullptr));
    api.fini(backend);
  }
  OpenEndpoint(const OpenEndpoint&) = delete;
  OpenEndpoint& operator=(const OpenEndpoint&) = delete;

  void* register_host(std::vector<unsigned char>& buffer, courier_nic_rkey_v1* rkey) const {
    void* mr = nullptr;
    REQUIRE_MESSAGE(
        api.mr_register(ep, buffer.data(), buffer.size(), COURIER_MEM_HOST, &mr, rkey) == 0,
        api.last_error(nullptr));
    return mr;
  }
};

}  // namespace

TEST_CASE("nic-ce's plugin table is built from the shared NIC entry points") {
  PluginFile plugin;
  const courier_nic_plugin_v1& api = plugin.api();
  CHECK(std::string(api.header.name) == "ce");
  CHECK(api.header.abi_major == COURIER_NIC_ABI_MAJOR);
  CHECK(api.header.struct_size == sizeof(courier_nic_plugin_v1));
  for (const auto& [entry, present] :
       std::vector<std::pair<const char*, bool>>{{"init", api.init != nullptr},
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
                                                 {"post_atomic", api.post_atomic != nullptr}}) {
    CAPTURE(entry);
    CHECK(present);
  }
  // No device of its own to report beyond the GPUs'.
  CHECK_FALSE(static_cast<bool>(api.describe));
  REQUIRE(api.num_knobs == 3);
  CHECK(std::string(api.knobs[0].name) == "COURIER_CE_BATCH");
  CHECK(std::string(api.knobs[1].name) == "COURIER_CE_LINGER_US");
  CHECK(std::string(api.knobs[2].name) == "COURIER_CE_TRACE");

  // NULL handles: refused with a reason, never dereferenced.
  size_t len = 64;
  CHECK(api.ep_close(nullptr) == -EINVAL);
  CHECK(plugin.error() == "nic-ce: ep_close: NULL endpoint");
  CHECK(api.ep_name(nullptr, nullptr, &len) == -EINVAL);
  CHECK(plugin.error() == "nic-ce: ep_name: NULL endpoint");
  CHECK(api.mr_deregister(nullptr) == -EINVAL);
  CHECK(plugin.error() == "nic-ce: mr_deregister: NULL region");
  courier_nic_props_v1 props{};
  props.struct_size = sizeof props;
  CHECK(api.query(nullptr, &props) == -EINVAL);
  CHECK(plugin.error() == "nic-ce: query: NULL backend");
  FakeHost host;
  CHECK(api.init(host.services(), nullptr) == -EINVAL);
  CHECK(plugin.error() == "nic-ce: init: NULL backend output");
}

TEST_CASE("nic-ce init opens the GPU, or fails saying there is no CUDA device") {
  PluginFile plugin;
  const courier_nic_plugin_v1& api = plugin.api();
  FakeHost host;
  void* backend = nullptr;
  const int status = api.init(host.services(), &backend);
  if (status == 0) {
    courier_nic_props_v1 props{};
    props.struct_size = sizeof props;
    CHECK(api.query(backend, &props) == 0);
    MESSAGE("a CUDA device is present: " << props.device);
    CHECK(std::string(props.device).starts_with("ce:cuda0 "));
    CHECK((props.caps & COURIER_NIC_CAP_HOST_LOCAL) != 0);
    api.fini(backend);
  } else {
    const std::string error = plugin.error();
    CAPTURE(error);
    CHECK(status == -ENODEV);
    CHECK(error.starts_with("nic-ce: no CUDA device: "));
    CHECK(error.ends_with("; nic-ce moves data with GPU copy engines"));
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("nic-ce: a knob with a bad value is refused, naming it") {
    PluginFile plugin;
    const courier_nic_plugin_v1& api = plugin.api();
    for (const auto& [knob, value, why] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"COURIER_CE_BATCH", "2", "expected 0 or 1"},
             {"COURIER_CE_TRACE", "yes", "expected 0 or 1"},
             {"COURIER_CE_LINGER_US", "1001", "expected whole microseconds from 0 to 1000"}}) {
      CAPTURE(knob);
      FakeHost host;
      host.set_env(knob, value);
      void* backend = nullptr;
      CHECK(api.init(host.services(), &backend) == -EINVAL);
      const std::string error = plugin.error();
      CHECK(error.starts_with("nic-ce: " + knob + "='" + value + "'"));
      CHECK(error.find(why) != std::string::npos);
    }
  }

  TEST_CASE("nic-ce opens the GPU the host services say the core chose, never a wrapped one") {
    PluginFile plugin;
    const courier_nic_plugin_v1& api = plugin.api();
    {
      FakeHost host;  // the core chose device 0
      const InitResult opened = init_with(api, host);
      REQUIRE_MESSAGE(opened.status == 0, opened.error);
      CHECK(opened.device.starts_with("ce:cuda0 "));
    }
    {
      // With the core's answer, COURIER_GPU_DEVICE is not read.
      FakeHost host;
      host.set_env("COURIER_GPU_DEVICE", "99");
      const InitResult opened = init_with(api, host);
      REQUIRE_MESSAGE(opened.status == 0, opened.error);
      CHECK(opened.device.starts_with("ce:cuda0 "));
    }
    {
      // No Context chose (courier-info, tests): device 0.
      FakeHost host;
      host.choose_gpu(std::nullopt);
      const InitResult opened = init_with(api, host);
      REQUIRE_MESSAGE(opened.status == 0, opened.error);
      CHECK(opened.device.starts_with("ce:cuda0 "));
    }
    {
      // A device beyond those CUDA sees: refused, naming it and the count.
      FakeHost host;
      host.choose_gpu(99);
      const InitResult opened = init_with(api, host);
      CHECK(opened.status == -ENODEV);
      CAPTURE(opened.error);
      CHECK(opened.error.starts_with("nic-ce: the core chose GPU 99 for this rank, but there "));
      CHECK(opened.error.find(" CUDA device") != std::string::npos);
    }
  }

  TEST_CASE("nic-ce with the host services of a core older than gpu_device") {
    PluginFile plugin;
    const courier_nic_plugin_v1& api = plugin.api();
    {
      FakeHost host;
      host.make_older();
      host.choose_gpu(99);  // beyond the older table: never asked
      host.set_env("COURIER_GPU_DEVICE", "0");
      const InitResult opened = init_with(api, host);
      REQUIRE_MESSAGE(opened.status == 0, opened.error);
      CHECK(opened.device.starts_with("ce:cuda0 "));
    }
    {
      FakeHost host;
      host.make_older();
      host.set_env("COURIER_GPU_DEVICE", "99");
      const InitResult opened = init_with(api, host);
      CHECK(opened.status == -EINVAL);
      CAPTURE(opened.error);
      CHECK(opened.error.starts_with("nic-ce: COURIER_GPU_DEVICE='99' is not one of the "));
      CHECK(opened.error.find(" CUDA device") != std::string::npos);
    }
  }

  TEST_CASE("nic-ce: ep_close refuses an endpoint whose regions are still registered") {
    PluginFile plugin;
    FakeHost host;
    OpenEndpoint opened(plugin.api(), host);
    const courier_nic_plugin_v1& api = opened.api;
    std::vector<unsigned char> first(256), second(4096);
    courier_nic_rkey_v1 rkey{};
    void* first_mr = opened.register_host(first, &rkey);
    void* second_mr = opened.register_host(second, &rkey);

    CHECK(api.ep_close(opened.ep) == -EBUSY);
    CHECK(plugin.error() == "nic-ce: ep_close: 2 memory regions are still registered");
    CHECK(api.mr_deregister(first_mr) == 0);
    CHECK(api.ep_close(opened.ep) == -EBUSY);
    CHECK(plugin.error() == "nic-ce: ep_close: 1 memory regions are still registered");
    CHECK(api.mr_deregister(second_mr) == 0);
    // ~OpenEndpoint closes it, now that nothing is registered.
  }

  TEST_CASE("nic-ce: a write with immediate data into host memory of the endpoint itself") {
    PluginFile plugin;
    FakeHost host;
    OpenEndpoint opened(plugin.api(), host);
    const courier_nic_plugin_v1& api = opened.api;
    std::vector<unsigned char> name(opened.props.max_ep_name);
    size_t len = name.size();
    REQUIRE(api.ep_name(opened.ep, name.data(), &len) == 0);
    REQUIRE_MESSAGE(api.ep_connect(opened.ep, 1, name.data(), name.size()) == 0, plugin.error());

    // 150 bytes: three inbox messages (64 bytes each at most), then the
    // immediate data, which must not overtake them.
    std::vector<unsigned char> source(256), target(256, 0);
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i + 1);
    courier_nic_rkey_v1 source_key{}, target_key{};
    void* source_mr = opened.register_host(source, &source_key);
    void* target_mr = opened.register_host(target, &target_key);
    courier_nic_write_v1 write{};
    write.peer = 0;
    write.flags = COURIER_NIC_WRITE_IMM;
    write.local_mr = source_mr;
    write.local_offset = 10;
    write.remote = target_key;
    write.remote_offset = 20;
    write.length = 150;
    write.imm = 0xabcd1234;
    write.cookie = 42;
    REQUIRE_MESSAGE(api.post_write(opened.ep, &write) == 0, plugin.error());

    bool sent = false, received = false;
    courier_nic_completion_v1 completions[4];
    for (int round = 0; round < 1000000 && !(sent && received); ++round) {
      const int n = api.poll(opened.ep, completions, 4);
      REQUIRE_MESSAGE(n >= 0, plugin.error());
      for (int i = 0; i < n; ++i) {
        const courier_nic_completion_v1& c = completions[i];
        CHECK(c.status == 0);
        if (c.kind == COURIER_NIC_COMP_TX) {
          CHECK(c.cookie == 42);
          sent = true;
        } else {
          REQUIRE(c.kind == COURIER_NIC_COMP_RX_IMM);
          CHECK(c.imm == 0xabcd1234);
          CHECK(c.peer == 0);
          CHECK(c.length == 150);
          // Immediate data comes after the bytes it announces.
          CHECK(target[20] == source[10]);
          CHECK(target[169] == source[159]);
          received = true;
        }
      }
    }
    CHECK(sent);
    CHECK(received);
    for (size_t i = 0; i < target.size(); ++i) {
      const unsigned char expected = i >= 20 && i < 170 ? source[i - 10] : 0;
      if (target[i] != expected) {
        CHECK_MESSAGE(target[i] == expected, "target byte " << i);
        break;
      }
    }

    // A write past the end of the target fails in order, with a reason.
    write.flags = 0;
    write.remote_offset = 200;
    write.cookie = 43;
    REQUIRE(api.post_write(opened.ep, &write) == 0);
    CHECK(plugin.error().find("is outside the remote region of 256 bytes") != std::string::npos);
    int n = 0;
    for (int round = 0; round < 1000 && n == 0; ++round) n = api.poll(opened.ep, completions, 4);
    REQUIRE(n == 1);
    CHECK(completions[0].kind == COURIER_NIC_COMP_TX);
    CHECK(completions[0].cookie == 43);
    CHECK(completions[0].status == -EINVAL);

    CHECK(api.mr_deregister(source_mr) == 0);
    CHECK(api.mr_deregister(target_mr) == 0);
  }
}
