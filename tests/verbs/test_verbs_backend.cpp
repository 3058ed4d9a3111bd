// nic/verbs against the fake verbs device, in one process: device choice and
// its refusals, knobs, GID selection, the endpoint name, memory registration
// paths (on-demand, pinned, dmabuf, peer memory), atomics capability, and
// the data path over loopback and between two endpoints, including error
// completions. The fake device is chosen with FAKE_VERBS_DEVICES.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "nic/verbs/verbs_address.hpp"
#include "nic/verbs/verbs_backend.hpp"
#include "nic/verbs/verbs_error.hpp"

namespace courier::verbs {
namespace {

const BackendTraits kConnectX = {
    .name = "cx7",
    .family = {.label = "NVIDIA/Mellanox ConnectX", .vendor_ids = {0x02c9}},
    .prefer_odp = false,
    .inflight_bytes_default = "0",
    .latency_ns = 2000,
    .bandwidth_mbps = 50000,
};
const BackendTraits kBroadcom = {
    .name = "bnxt",
    .family = {.label = "Broadcom NetXtreme (bnxt_re)", .vendor_ids = {0x14e4}},
    .prefer_odp = true,
    .inflight_bytes_default = "1048576",
    .latency_ns = 2500,
    .bandwidth_mbps = 50000,
};

// Host services with per-test knob values and an optional dmabuf exporter.
struct Host {
  std::map<std::string, std::string> env;
  std::vector<std::string> warnings;
  int dmabuf_result = -EOPNOTSUPP;
  int dmabuf_fd = -1;
  courier_host_services_v1 table{};

  Host() {
    table.struct_size = sizeof table;
    table.ctx = this;
    table.log = [](void* ctx, int level, const char*, const char* message) {
      if (level <= COURIER_LOG_WARN) static_cast<Host*>(ctx)->warnings.emplace_back(message);
    };
    table.get_env = [](void* ctx, const char* name) -> const char* {
      auto& env = static_cast<Host*>(ctx)->env;
      auto found = env.find(name);
      return found == env.end() ? nullptr : found->second.c_str();
    };
    table.alloc = [](void*, size_t size, size_t) { return std::malloc(size); };
    table.free = [](void*, void* p) { std::free(p); };
    table.dmabuf_export = [](void* ctx, const void*, size_t, int* fd, uint64_t* offset) {
      Host* host = static_cast<Host*>(ctx);
      if (host->dmabuf_result != 0) return host->dmabuf_result;
      *fd = dup(host->dmabuf_fd);
      *offset = 0;
      return 0;
    };
  }
};

// Sets FAKE_VERBS_DEVICES for the scope of one test.
struct FakeDevices {
  explicit FakeDevices(const char* profiles) { setenv("FAKE_VERBS_DEVICES", profiles, 1); }
  ~FakeDevices() { unsetenv("FAKE_VERBS_DEVICES"); }
};

std::unique_ptr<Backend> open_backend(const BackendTraits& traits, Host& host) {
  std::unique_ptr<Backend> backend;
  const int rc = Backend::create(traits, &host.table, &backend);
  INFO("init: " << last_error());
  REQUIRE(rc == 0);
  return backend;
}

courier_nic_props_v1 props_of(const Backend& backend) {
  courier_nic_props_v1 props{};
  props.struct_size = sizeof props;
  REQUIRE(backend.query(&props) == 0);
  return props;
}

std::unique_ptr<Endpoint> open_endpoint(const Backend& backend, uint32_t flags = 0) {
  courier_nic_ep_attr_v1 attr{sizeof attr, 64, 64, flags};
  std::unique_ptr<Endpoint> ep;
  const int rc = backend.open_endpoint(attr, &ep);
  INFO("ep_open: " << last_error());
  REQUIRE(rc == 0);
  return ep;
}

std::vector<std::byte> name_of(const Endpoint& ep) {
  std::vector<std::byte> name(kNameBytes);
  size_t length = name.size();
  REQUIRE(ep.name(name.data(), &length) == 0);
  return name;
}

// Takes completions until one with `cookie` (TX) or any RX_IMM (cookie ~0).
courier_nic_completion_v1 wait_for(Endpoint& ep, uint32_t kind, uint64_t cookie = 0) {
  for (int spins = 0; spins < 2000000; ++spins) {
    courier_nic_completion_v1 c{};
    const int got = ep.poll(&c, 1);
    REQUIRE(got >= 0);
    if (got == 1 && c.kind == kind && (kind != COURIER_NIC_COMP_TX || c.cookie == cookie)) return c;
    if (got == 0) std::this_thread::yield();
  }
  FAIL("no completion arrived");
  return {};
}

TEST_CASE("devices: none, the wrong family, a named device, knobs") {
  Host host;
  std::unique_ptr<Backend> backend;
  {
    FakeDevices devices("none");
    CHECK(Backend::create(kConnectX, &host.table, &backend) == -ENODEV);
    CHECK(last_error().find("no RDMA device found") != std::string::npos);
  }
  {
    FakeDevices devices("bnxt");
    CHECK(Backend::create(kConnectX, &host.table, &backend) == -ENODEV);
    INFO(last_error());
    CHECK(last_error().find("no NVIDIA/Mellanox ConnectX device") != std::string::npos);
    CHECK(last_error().find("bnxt_re0") != std::string::npos);
  }
  {
    FakeDevices devices("cx7,cx7");
    host.env["COURIER_IB_DEVICE"] = "mlx5_7";
    CHECK(Backend::create(kConnectX, &host.table, &backend) == -ENODEV);
    INFO(last_error());
    CHECK(last_error().find("COURIER_IB_DEVICE=mlx5_7") != std::string::npos);
    CHECK(last_error().find("mlx5_1") != std::string::npos);
    host.env["COURIER_IB_DEVICE"] = "mlx5_1";
    backend = open_backend(kConnectX, host);
    CHECK(std::string(props_of(*backend).device) == "mlx5_1");
    host.env.erase("COURIER_IB_DEVICE");
  }
  {
    // The core derives COURIER_PAIRED_NICS from topology; the knob wins over it.
    FakeDevices devices("cx7,cx7");
    host.env["COURIER_PAIRED_NICS"] = "mlx5_9,mlx5_1,mlx5_0";
    CHECK(std::string(props_of(*open_backend(kConnectX, host)).device) == "mlx5_1");
    host.env["COURIER_IB_DEVICE"] = "mlx5_0";
    CHECK(std::string(props_of(*open_backend(kConnectX, host)).device) == "mlx5_0");
    host.env.erase("COURIER_IB_DEVICE");
    host.env["COURIER_PAIRED_NICS"] = "bnxt_re0";  // not of this family: the first one
    CHECK(std::string(props_of(*open_backend(kConnectX, host)).device) == "mlx5_0");
    host.env.erase("COURIER_PAIRED_NICS");
  }
  {
    FakeDevices devices("cx7");
    host.env["COURIER_IB_TC"] = "300";
    CHECK(Backend::create(kConnectX, &host.table, &backend) == -EINVAL);
    CHECK(last_error().find("COURIER_IB_TC='300'") != std::string::npos);
    host.env.erase("COURIER_IB_TC");
    host.env["COURIER_IB_GID_INDEX"] = "9";
    CHECK(Backend::create(kConnectX, &host.table, &backend) == -EINVAL);
    CHECK(last_error().find("COURIER_IB_GID_INDEX=9") != std::string::npos);
  }
}

TEST_CASE("GID selection: a routable RoCE v2 GID by default, the knob's otherwise") {
  PortInfo roce;
  roce.number = 1;
  roce.link_layer = IBV_LINK_LAYER_ETHERNET;
  for (uint32_t i = 0; i < 4; ++i) {
    GidEntry entry;
    entry.index = i;
    entry.gid.raw[15] = static_cast<uint8_t>(i + 1);
    entry.type = i % 2 ? GidType::roce_v2 : GidType::roce_v1;
    roce.gids.push_back(entry);
  }
  uint8_t index = 0;
  ibv_gid gid{};
  std::string warning;
  REQUIRE(select_gid(roce, nullptr, &index, &gid, &warning) == 0);
  CHECK(index == 1);
  CHECK(warning.empty());
  REQUIRE(select_gid(roce, "3", &index, &gid, &warning) == 0);
  CHECK(index == 3);
  CHECK(gid.raw[15] == 4);
  REQUIRE(select_gid(roce, "2", &index, &gid, &warning) == 0);
  CHECK(index == 2);
  CHECK(warning.find("RoCE v1") != std::string::npos);
  CHECK(select_gid(roce, "abc", &index, &gid, &warning) == -EINVAL);
  CHECK(last_error().find("COURIER_IB_GID_INDEX='abc'") != std::string::npos);
  roce.gids.erase(roce.gids.begin() + 1);
  roce.gids.erase(roce.gids.begin() + 2);
  warning.clear();
  REQUIRE(select_gid(roce, "auto", &index, &gid, &warning) == 0);
  CHECK(index == 0);
  CHECK(warning.find("no RoCE v2 GID") != std::string::npos);

  // Real RoCE tables: link-local fe80:: and IPv4-mapped ::ffff:a.b.c.d, each
  // as v1 and v2. The IPv4-mapped v2 one routes; the link-local one does not.
  PortInfo table;
  table.number = 1;
  table.link_layer = IBV_LINK_LAYER_ETHERNET;
  for (uint32_t i = 0; i < 4; ++i) {
    GidEntry entry;
    entry.index = i;
    if (i < 2) {
      entry.gid.raw[0] = 0xfe;
      entry.gid.raw[1] = 0x80;
    } else {
      entry.gid.raw[10] = entry.gid.raw[11] = 0xff;
      entry.gid.raw[12] = 10;
    }
    entry.gid.raw[15] = 7;
    entry.type = i % 2 ? GidType::roce_v2 : GidType::roce_v1;
    table.gids.push_back(entry);
  }
  warning.clear();
  REQUIRE(select_gid(table, nullptr, &index, &gid, &warning) == 0);
  CHECK(index == 3);
  CHECK(warning.empty());
  table.gids.resize(2);  // no IP address yet: only the link-local pair
  REQUIRE(select_gid(table, nullptr, &index, &gid, &warning) == 0);
  CHECK(index == 1);
  CHECK(warning.find("link-local") != std::string::npos);

  PortInfo ib;
  ib.number = 1;
  ib.link_layer = IBV_LINK_LAYER_INFINIBAND;
  ib.lid = 7;
  REQUIRE(select_gid(ib, nullptr, &index, &gid, &warning) == 0);
  CHECK(index == kNoGid);
}

TEST_CASE("endpoint names: round trip, and a foreign name is refused naming the rank") {
  EndpointAddress a;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  a.port = 1;
  a.lid = 0;
  a.gid_index = 3;
  a.mtu = IBV_MTU_4096;
  a.ud_qpn = 0x1234;
  a.qkey = 0x99;
  a.endpoint_id = 0x0102030405060708ull;
  a.gid.raw[0] = 0xfe;
  std::byte wire[kNameBytes];
  encode_name(a, wire);
  EndpointAddress b;
  REQUIRE(decode_name(wire, sizeof wire, 5, &b) == 0);
  CHECK(b.ud_qpn == a.ud_qpn);
  CHECK(b.endpoint_id == a.endpoint_id);
  CHECK(b.gid_index == 3);
  CHECK(std::memcmp(b.gid.raw, a.gid.raw, 16) == 0);
  wire[0] = std::byte{0};
  CHECK(decode_name(wire, sizeof wire, 5, &b) == -EINVAL);
  CHECK(last_error().find("rank 5") != std::string::npos);
}

TEST_CASE("capabilities: atomics follow the device, ODP follows the device and the backend") {
  Host host;
  {
    FakeDevices devices("cx7");
    const courier_nic_props_v1 props = props_of(*open_backend(kConnectX, host));
    CHECK(props.atomic_ops == (COURIER_NIC_ATOMIC_ADD_U64 | COURIER_NIC_ATOMIC_FETCH_ADD_U64 |
                               COURIER_NIC_ATOMIC_CAS_U64));
    CHECK(props.atomic_native == props.atomic_ops);
    CHECK(props.imm_bytes == 4);
    CHECK((props.caps & COURIER_NIC_CAP_ORDERED_WRITES) != 0);
    CHECK((props.mem_kinds & COURIER_MEM_ODP) == 0);
  }
  {
    FakeDevices devices("cx7-noatomic");
    host.warnings.clear();
    const courier_nic_props_v1 props = props_of(*open_backend(kConnectX, host));
    CHECK(props.atomic_ops == 0);
    REQUIRE(!host.warnings.empty());
    CHECK(host.warnings[0].find("no atomic capability") != std::string::npos);
  }
  {
    FakeDevices devices("bnxt");
    std::unique_ptr<Backend> backend = open_backend(kBroadcom, host);
    CHECK((props_of(*backend).mem_kinds & COURIER_MEM_ODP) != 0);
    std::unique_ptr<Endpoint> ep = open_endpoint(*backend);
    std::vector<std::byte> memory(1 << 16);
    std::unique_ptr<MemoryRegion> mr;
    courier_nic_rkey_v1 rkey{};
    REQUIRE(ep->register_memory(memory.data(), memory.size(), COURIER_MEM_HOST, &mr, &rkey) == 0);
    CHECK(mr->how() == Registration::on_demand);
    REQUIRE(ep->deregister_memory(mr.release()) == 0);
  }
  {
    FakeDevices devices("bnxt-noodp");
    std::unique_ptr<Backend> backend = open_backend(kBroadcom, host);
    CHECK((props_of(*backend).mem_kinds & COURIER_MEM_ODP) == 0);
    std::unique_ptr<Endpoint> ep = open_endpoint(*backend);
    std::vector<std::byte> memory(1 << 16);
    std::unique_ptr<MemoryRegion> mr;
    courier_nic_rkey_v1 rkey{};
    REQUIRE(ep->register_memory(memory.data(), memory.size(), COURIER_MEM_HOST, &mr, &rkey) == 0);
    CHECK(mr->how() == Registration::pinned);
    REQUIRE(ep->deregister_memory(mr.release()) == 0);
  }
}

TEST_CASE("GPU memory: dmabuf when the core exports one, peer memory otherwise") {
  FakeDevices devices("cx7");
  Host host;
  std::unique_ptr<Backend> backend = open_backend(kConnectX, host);
  std::unique_ptr<Endpoint> ep = open_endpoint(*backend);
  // A memfd stands in for the GPU allocation's dmabuf: both are mappable fds.
  const size_t bytes = 1 << 16;
  host.dmabuf_fd = memfd_create("courier-test-dmabuf", 0);
  REQUIRE(host.dmabuf_fd >= 0);
  REQUIRE(ftruncate(host.dmabuf_fd, bytes) == 0);
  void* view = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, host.dmabuf_fd, 0);
  REQUIRE(view != MAP_FAILED);

  host.dmabuf_result = 0;
  std::unique_ptr<MemoryRegion> mr;
  courier_nic_rkey_v1 rkey{};
  int rc = ep->register_memory(view, bytes, COURIER_MEM_CUDA, &mr, &rkey);
  INFO(last_error());
  REQUIRE(rc == 0);
  CHECK(mr->how() == Registration::dmabuf);
  CHECK(rkey.base == reinterpret_cast<uintptr_t>(view));
  REQUIRE(ep->deregister_memory(mr.release()) == 0);

  host.dmabuf_result = -EOPNOTSUPP;
  host.warnings.clear();
  REQUIRE(ep->register_memory(view, bytes, COURIER_MEM_CUDA, &mr, &rkey) == 0);
  CHECK(mr->how() == Registration::peer_memory);
  REQUIRE(!host.warnings.empty());
  CHECK(host.warnings.back().find("peer memory") != std::string::npos);
  REQUIRE(ep->deregister_memory(mr.release()) == 0);
  munmap(view, bytes);
  close(host.dmabuf_fd);
}

TEST_CASE("connect: a peer that never answers fails naming it; no second attempt") {
  FakeDevices devices("cx7");
  Host host;
  host.env["COURIER_IB_CONNECT_TIMEOUT_S"] = "1";
  std::unique_ptr<Backend> backend = open_backend(kConnectX, host);
  std::unique_ptr<Endpoint> a = open_endpoint(*backend);
  std::unique_ptr<Endpoint> silent = open_endpoint(*backend);  // never connects
  std::vector<std::byte> names = name_of(*a);
  const std::vector<std::byte> second = name_of(*silent);
  names.insert(names.end(), second.begin(), second.end());
  CHECK(a->connect(2, names.data(), kNameBytes) == -ETIMEDOUT);
  CHECK(last_error().find("from 1 rank(s): 1") != std::string::npos);
  CHECK(a->connect(2, names.data(), kNameBytes) == -EINVAL);
  CHECK(last_error().find("an earlier connect of this endpoint failed") != std::string::npos);
}

TEST_CASE("data path: two endpoints connect, write, write with immediate, atomics, errors") {
  FakeDevices devices("cx7");
  Host host;
  std::unique_ptr<Backend> backend = open_backend(kConnectX, host);
  std::unique_ptr<Endpoint> a = open_endpoint(*backend, COURIER_NIC_EP_ATOMICS);
  std::unique_ptr<Endpoint> b = open_endpoint(*backend, COURIER_NIC_EP_ATOMICS);
  std::vector<std::byte> names = name_of(*a);
  const std::vector<std::byte> second = name_of(*b);
  names.insert(names.end(), second.begin(), second.end());
  // connect() is collective: both sides run their handshakes at once.
  int rc_b = -1;
  std::string error_b;
  std::thread other([&] {
    rc_b = b->connect(2, names.data(), kNameBytes);
    error_b = last_error();
  });
  const int rc_a = a->connect(2, names.data(), kNameBytes);
  const std::string error_a = last_error();
  other.join();
  INFO(error_a << " / " << error_b);
  REQUIRE(rc_a == 0);
  REQUIRE(rc_b == 0);
  CHECK(a->connect(2, names.data(), kNameBytes) == -EALREADY);

  std::vector<uint64_t> memory_a(512, 0), memory_b(512, 0);
  std::unique_ptr<MemoryRegion> mr_a, mr_b;
  courier_nic_rkey_v1 key_a{}, key_b{};
  REQUIRE(a->register_memory(memory_a.data(), 4096, COURIER_MEM_HOST, &mr_a, &key_a) == 0);
  REQUIRE(b->register_memory(memory_b.data(), 4096, COURIER_MEM_HOST, &mr_b, &key_b) == 0);

  // Rank 0 (a) writes 64 bytes into rank 1 (b), then signals with immediate data.
  for (int i = 0; i < 8; ++i) memory_a[i] = 0x1111000000000000ull + i;
  courier_nic_write_v1 w{};
  w.peer = 1;
  w.local_mr = mr_a.get();
  w.length = 64;
  w.remote = key_b;
  w.remote_offset = 128;
  w.cookie = 1;
  REQUIRE(a->post_write(w) == 0);
  CHECK(wait_for(*a, COURIER_NIC_COMP_TX, 1).status == 0);
  CHECK(memory_b[16] == 0x1111000000000000ull);
  CHECK(memory_b[23] == 0x1111000000000007ull);
  w.flags = COURIER_NIC_WRITE_IMM;
  w.imm = 0xdeadbeefcafeull;  // 32 bits travel
  w.cookie = 2;
  REQUIRE(a->post_write(w) == 0);
  CHECK(wait_for(*a, COURIER_NIC_COMP_TX, 2).status == 0);
  const courier_nic_completion_v1 rx = wait_for(*b, COURIER_NIC_COMP_RX_IMM);
  CHECK(rx.status == 0);
  CHECK(rx.peer == 0);
  CHECK(rx.imm == 0xbeefcafeull);
  CHECK(rx.length == 64);

  // Atomics: fetch-add and compare-and-swap land in b's memory; old values in a's.
  memory_b[300] = 40;
  courier_nic_atomic_v1 at{};
  at.peer = 1;
  at.op = COURIER_NIC_ATOMIC_FETCH_ADD_U64;
  at.remote = key_b;
  at.remote_offset = 300 * 8;
  at.operand = 2;
  at.result_mr = mr_a.get();
  at.result_offset = 400 * 8;
  at.cookie = 3;
  REQUIRE(a->post_atomic(at) == 0);
  CHECK(wait_for(*a, COURIER_NIC_COMP_TX, 3).status == 0);
  CHECK(memory_a[400] == 40);
  CHECK(memory_b[300] == 42);
  at.op = COURIER_NIC_ATOMIC_CAS_U64;
  at.compare = 42;
  at.operand = 7;
  at.cookie = 4;
  REQUIRE(a->post_atomic(at) == 0);
  CHECK(wait_for(*a, COURIER_NIC_COMP_TX, 4).status == 0);
  CHECK(memory_a[400] == 42);
  CHECK(memory_b[300] == 7);
  at.remote_offset = 3;
  CHECK(a->post_atomic(at) == -EINVAL);  // misaligned: refused before posting
  at.remote_offset = 296 * 8;
  at.remote.base += 4;  // a window starting off alignment: the address counts
  CHECK(a->post_atomic(at) == -EINVAL);
  at.remote = key_b;

  // Loopback: b writes to itself.
  courier_nic_write_v1 self{};
  self.peer = 1;
  self.local_mr = mr_b.get();
  self.length = 8;
  self.remote = key_b;
  self.remote_offset = 8 * 500;
  self.cookie = 5;
  memory_b[0] = 77;
  REQUIRE(b->post_write(self) == 0);
  CHECK(wait_for(*b, COURIER_NIC_COMP_TX, 5).status == 0);
  CHECK(memory_b[500] == 77);

  // A bad remote key: an error completion naming the rank, the operation and
  // the verbs status; the connection is then failed and says why.
  w.flags = 0;
  w.remote.key ^= 0x5a5a;
  w.cookie = 6;
  const uint64_t before = memory_b[16];
  REQUIRE(a->post_write(w) == 0);
  const courier_nic_completion_v1 bad = wait_for(*a, COURIER_NIC_COMP_TX, 6);
  CHECK(bad.status == -EACCES);
  INFO(last_error());
  CHECK(last_error().find("RDMA write to rank 1") != std::string::npos);
  CHECK(last_error().find("IBV_WC_REM_ACCESS_ERR") != std::string::npos);
  CHECK(memory_b[16] == before);
  w.remote = key_b;
  CHECK(a->post_write(w) == -ECONNABORTED);
  CHECK(last_error().find("failed earlier") != std::string::npos);

  REQUIRE(a->deregister_memory(mr_a.release()) == 0);
  REQUIRE(b->deregister_memory(mr_b.release()) == 0);
}

}  // namespace
}  // namespace courier::verbs
