// The fake verbs device in one process: devices and profiles, loopback RC
// traffic between two QPs of one HCA, and every check the fake makes.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "test_support.hpp"

using namespace courier::fake_verbs::testing;

namespace {

constexpr int kTargetAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

// Two RC QPs of one HCA connected to each other, and buffers on both sides.
struct Loopback {
  explicit Loopback(const char* profile = "cx7", uint32_t max_send_wr = 64, int cq_entries = 256)
      : device(profile),
        initiator(device, IBV_QPT_RC, max_send_wr, cq_entries),
        target(device, IBV_QPT_RC),
        source(device.pd, 65536, IBV_ACCESS_LOCAL_WRITE),
        memory(device.pd, 65536, kTargetAccess) {
    initiator.connect(target.address());
    target.connect(initiator.address());
  }
  OpenDevice device;
  Endpoint initiator;
  Endpoint target;
  Buffer source;
  Buffer memory;
};

std::vector<std::string> device_names(const char* profiles) {
  ScopedProfiles scoped(profiles);
  int count = -1;
  ibv_device** list = ibv_get_device_list(&count);
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  CHECK(list[count] == nullptr);
  ibv_free_device_list(list);
  return names;
}

}  // namespace

TEST_CASE("FAKE_VERBS_DEVICES picks the devices; none or empty lists nothing") {
  CHECK(device_names(nullptr) == std::vector<std::string>{"mlx5_0", "bnxt_re0"});
  CHECK(device_names("none").empty());
  CHECK(device_names("").empty());
  CHECK(device_names("cx7,cx7-ib,bnxt-noodp,cx7-noatomic") ==
        std::vector<std::string>{"mlx5_0", "mlx5_1", "bnxt_re0", "mlx5_2"});
}

TEST_CASE("device, port and GID queries report the profile") {
  OpenDevice cx7("cx7");
  ibv_device_attr_ex attr{};
  REQUIRE(ibv_query_device_ex(cx7.context, nullptr, &attr) == 0);
  CHECK(attr.orig_attr.vendor_id == 0x02c9);
  CHECK(attr.orig_attr.vendor_part_id == 4129);
  CHECK(std::string(attr.orig_attr.fw_ver) == "28.39.1002");
  CHECK(attr.orig_attr.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(attr.orig_attr.max_qp_wr == 32768);
  CHECK(attr.orig_attr.max_sge == 30);
  CHECK(attr.odp_caps.general_caps == 0);
  CHECK(attr.orig_attr.node_guid == ibv_get_device_guid(cx7.context->device));
  CHECK(cx7.port.state == IBV_PORT_ACTIVE);
  CHECK(cx7.port.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(cx7.port.active_mtu == IBV_MTU_4096);
  CHECK(cx7.port.lid == 0);

  const uint32_t expected_types[] = {IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2,
                                     IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2};
  for (uint32_t index = 0; index < 4; ++index) {
    ibv_gid_entry entry{};
    REQUIRE(ibv_query_gid_ex(cx7.context, 1, index, &entry, 0) == 0);
    CHECK(entry.gid_type == expected_types[index]);
  }
  ibv_gid_entry entry{};
  CHECK(ibv_query_gid_ex(cx7.context, 1, 4, &entry, 0) == ENODATA);
  ibv_gid gid;
  std::memset(&gid, 0xff, sizeof(gid));
  CHECK(ibv_query_gid(cx7.context, 1, 4, &gid) == 0);
  CHECK(gid.global.subnet_prefix == 0);
  CHECK(gid.global.interface_id == 0);
  ibv_gid link_local{};
  REQUIRE(ibv_query_gid(cx7.context, 1, 0, &link_local) == 0);
  CHECK(link_local.raw[0] == 0xfe);
  CHECK(link_local.raw[1] == 0x80);

  OpenDevice bnxt("bnxt");
  REQUIRE(ibv_query_device_ex(bnxt.context, nullptr, &attr) == 0);
  CHECK(attr.orig_attr.vendor_id == 0x14e4);
  CHECK(attr.orig_attr.max_qp_wr == 8192);
  CHECK(attr.odp_caps.general_caps == IBV_ODP_SUPPORT);
  CHECK(attr.odp_caps.per_transport_caps.rc_odp_caps ==
        (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
         IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC));
  // Each device of the process is its own HCA with its own GUID.
  CHECK(ibv_get_device_guid(bnxt.context->device) != ibv_get_device_guid(cx7.context->device));

  OpenDevice ib("cx7-ib");
  CHECK(ib.port.link_layer == IBV_LINK_LAYER_INFINIBAND);
  CHECK(ib.port.lid != 0);
  REQUIRE(ibv_query_gid_ex(ib.context, 1, 0, &entry, 0) == 0);
  CHECK(entry.gid_type == IBV_GID_TYPE_IB);
  CHECK(ibv_query_gid_ex(ib.context, 1, 1, &entry, 0) == ENODATA);
}

TEST_CASE("RDMA write and write with immediate land in the target, consuming one receive") {
  Loopback loop;
  for (size_t i = 0; i < 4096; ++i) loop.source.data()[i] = static_cast<uint8_t>(i * 7 + 1);
  REQUIRE(post_receive(loop.target.qp, 77) == 0);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 4096, loop.memory.address(128),
                     loop.memory.mr->rkey, 1) == 0);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 4096, 0, loop.memory.address(0),
                     loop.memory.mr->rkey, 2, true, 0xdeadbeef) == 0);
  const auto sends = poll(loop.initiator.cq, 2);
  REQUIRE(sends.size() == 2);
  for (uint64_t i = 0; i < 2; ++i) {
    CHECK(sends[i].status == IBV_WC_SUCCESS);
    CHECK(sends[i].opcode == IBV_WC_RDMA_WRITE);
    CHECK(sends[i].wr_id == i + 1);
    CHECK(sends[i].qp_num == loop.initiator.qp->qp_num);
  }
  const auto received = poll(loop.target.cq, 1);
  REQUIRE(received.size() == 1);
  const ibv_wc& wc = received[0];
  CHECK(wc.status == IBV_WC_SUCCESS);
  CHECK(wc.qp_num == loop.target.qp->qp_num);
  CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(wc.wr_id == 77);
  CHECK((wc.wc_flags & IBV_WC_WITH_IMM) != 0);
  CHECK(wc.imm_data == 0xdeadbeef);
  CHECK(wc.byte_len == 0);
  CHECK(wc.src_qp == loop.initiator.qp->qp_num);
  CHECK(std::memcmp(loop.memory.data() + 128, loop.source.data(), 4096) == 0);
  CHECK(loop.memory.data()[127] == 0);
}

TEST_CASE("write with immediate reports the write's length and waits for a receive (RNR)") {
  Loopback loop;
  std::memset(loop.source.data(), 0x5a, 100);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 100, loop.memory.address(),
                     loop.memory.mr->rkey, 9, true, 42) == 0);
  // Nothing is posted yet: the write is held (rnr_retry 7 retries forever).
  REQUIRE(post_receive(loop.target.qp, 5) == 0);
  const auto sent = poll(loop.initiator.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  const auto received = poll(loop.target.cq, 1);
  REQUIRE(received.size() == 1);
  CHECK(received[0].status == IBV_WC_SUCCESS);
  CHECK(received[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(received[0].wr_id == 5);
  CHECK(received[0].byte_len == 100);
  CHECK(received[0].imm_data == 42);
  CHECK(loop.memory.data()[99] == 0x5a);
}

TEST_CASE("fetch-and-add and compare-and-swap return the original value") {
  Loopback loop;
  loop.memory.words()[1] = 40;
  loop.memory.words()[2] = 7;
  REQUIRE(post_atomic(loop.initiator.qp, loop.source, IBV_WR_ATOMIC_FETCH_AND_ADD,
                      loop.memory.address(8), loop.memory.mr->rkey, 2, 0, 1) == 0);
  auto wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  CHECK(wc[0].opcode == IBV_WC_FETCH_ADD);
  CHECK(loop.source.words()[0] == 40);
  CHECK(loop.memory.words()[1] == 42);

  REQUIRE(post_atomic(loop.initiator.qp, loop.source, IBV_WR_ATOMIC_CMP_AND_SWP,
                      loop.memory.address(16), loop.memory.mr->rkey, 7, 99, 2) == 0);
  wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].opcode == IBV_WC_COMP_SWAP);
  CHECK(loop.source.words()[0] == 7);
  CHECK(loop.memory.words()[2] == 99);

  // A failed compare leaves the memory and still returns what was there.
  REQUIRE(post_atomic(loop.initiator.qp, loop.source, IBV_WR_ATOMIC_CMP_AND_SWP,
                      loop.memory.address(16), loop.memory.mr->rkey, 7, 1, 3) == 0);
  wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  CHECK(loop.source.words()[0] == 99);
  CHECK(loop.memory.words()[2] == 99);
}

TEST_CASE("many writes then a write with immediate: all land before the immediate completes") {
  Loopback loop("cx7", 512, 1024);
  constexpr int kWrites = 300;
  for (int i = 0; i < kWrites; ++i) loop.source.words()[i] = 1000 + static_cast<uint64_t>(i);
  REQUIRE(post_receive(loop.target.qp, 1) == 0);
  for (int i = 0; i < kWrites; ++i) {
    // The last one, signalled, frees the unsignalled WRs' slots when polled.
    REQUIRE(post_write(loop.initiator.qp, loop.source, i * 8, 8, loop.memory.address(i * 8),
                       loop.memory.mr->rkey, static_cast<uint64_t>(i), i == kWrites - 1) == 0);
  }
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 0, loop.memory.address(),
                     loop.memory.mr->rkey, 1000, false, 7) == 0);
  // The target sees the immediate; every earlier write is in its memory.
  const auto received = poll(loop.target.cq, 1);
  REQUIRE(received.size() == 1);
  CHECK(received[0].status == IBV_WC_SUCCESS);
  CHECK(received[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  for (int i = 0; i < kWrites; ++i) {
    REQUIRE(loop.memory.words()[i] == 1000 + static_cast<uint64_t>(i));
  }
  const auto sent = poll(loop.initiator.cq, 1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].wr_id == kWrites - 1);
}

TEST_CASE("completions only for signalled WRs, or for all with sq_sig_all") {
  Loopback loop;
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 1, false) == 0);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 2, false) == 0);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 3, true) == 0);
  const auto wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 3);
  ibv_wc extra;
  CHECK(ibv_poll_cq(loop.initiator.cq, 1, &extra) == 0);

  OpenDevice device("cx7");
  Endpoint all(device, IBV_QPT_RC, 64, 256, true);
  Endpoint peer(device, IBV_QPT_RC);
  Buffer source(device.pd, 64, IBV_ACCESS_LOCAL_WRITE);
  Buffer memory(device.pd, 64, kTargetAccess);
  all.connect(peer.address());
  peer.connect(all.address());
  REQUIRE(post_write(all.qp, source, 0, 8, memory.address(), memory.mr->rkey, 11, false) == 0);
  REQUIRE(post_write(all.qp, source, 0, 8, memory.address(), memory.mr->rkey, 12, false) == 0);
  const auto both = poll(all.cq, 2);
  REQUIRE(both.size() == 2);
  CHECK(both[0].wr_id == 11);
  CHECK(both[1].wr_id == 12);
}

TEST_CASE(
    "remote checks: bad rkey, out of bounds, no REMOTE_WRITE -> REM_ACCESS_ERR, memory untouched") {
  OpenDevice device("cx7");
  Buffer source(device.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  Buffer memory(device.pd, 4096, kTargetAccess);
  Buffer read_only(device.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  std::memset(source.data(), 0xab, 4096);

  struct Case {
    const char* name;
    uint64_t address;
    uint32_t rkey;
    uint32_t length;
  };
  const Case cases[] = {
      {"bad rkey", memory.address(), memory.mr->rkey ^ 0x5a5a5a5a, 8},
      {"lkey used as rkey", memory.address(), memory.mr->lkey, 8},
      {"past the end", memory.address(4090), memory.mr->rkey, 8},
      {"before the start", memory.address() - 8, memory.mr->rkey, 8},
      {"MR without REMOTE_WRITE", read_only.address(), read_only.mr->rkey, 8},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Endpoint initiator(device, IBV_QPT_RC);
    Endpoint target(device, IBV_QPT_RC);
    initiator.connect(target.address());
    target.connect(initiator.address());
    REQUIRE(post_write(initiator.qp, source, 0, c.length, c.address, c.rkey, 1) == 0);
    const auto wc = poll(initiator.cq, 1);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == IBV_WC_REM_ACCESS_ERR);
  }
  for (size_t i = 0; i < 4096; ++i) {
    REQUIRE(memory.data()[i] == 0);
    REQUIRE(read_only.data()[i] == 0);
  }
}

TEST_CASE("a QP without remote write access refuses writes; misaligned atomics are invalid") {
  OpenDevice device("cx7");
  Buffer source(device.pd, 64, IBV_ACCESS_LOCAL_WRITE);
  Buffer memory(device.pd, 64, kTargetAccess);
  {
    Endpoint initiator(device, IBV_QPT_RC);
    Endpoint target(device, IBV_QPT_RC);
    initiator.connect(target.address());
    target.connect(initiator.address(), 0);
    REQUIRE(post_write(initiator.qp, source, 0, 8, memory.address(), memory.mr->rkey, 1) == 0);
    const auto wc = poll(initiator.cq, 1);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == IBV_WC_REM_ACCESS_ERR);
  }
  {
    Endpoint initiator(device, IBV_QPT_RC);
    Endpoint target(device, IBV_QPT_RC);
    initiator.connect(target.address());
    target.connect(initiator.address());
    REQUIRE(post_atomic(initiator.qp, source, IBV_WR_ATOMIC_FETCH_AND_ADD, memory.address(4),
                        memory.mr->rkey, 1, 0, 1) == 0);
    const auto wc = poll(initiator.cq, 1);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == IBV_WC_REM_INV_REQ_ERR);
  }
  CHECK(memory.words()[0] == 0);
}

TEST_CASE("bad lkey -> LOC_PROT_ERR; then every queued and later WR is flushed") {
  Loopback loop;
  ibv_sge sge{loop.source.address(), 8, loop.source.mr->lkey + 1};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = loop.memory.address();
  wr.wr.rdma.rkey = loop.memory.mr->rkey;
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(loop.initiator.qp, &wr, &bad) == 0);  // unsignalled: errors still complete
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 2, false) == 0);
  REQUIRE(post_receive(loop.initiator.qp, 3) == 0);
  auto wc = poll(loop.initiator.cq, 3);
  REQUIRE(wc.size() == 3);
  CHECK(wc[0].wr_id == 1);
  CHECK(wc[0].status == IBV_WC_LOC_PROT_ERR);
  for (int i = 1; i < 3; ++i) CHECK(wc[i].status == IBV_WC_WR_FLUSH_ERR);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(loop.initiator.qp, &attr, IBV_QP_STATE, &init) == 0);
  CHECK(attr.qp_state == IBV_QPS_ERR);
  // Posting in ERR is accepted and flushed at once.
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 4, false) == 0);
  wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 4);
  CHECK(wc[0].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(loop.memory.words()[0] == 0);
}

TEST_CASE("an atomic's result SGE must be locally writable") {
  Loopback loop;
  Buffer readable(loop.device.pd, 64, 0);
  REQUIRE(post_atomic(loop.initiator.qp, readable, IBV_WR_ATOMIC_FETCH_AND_ADD,
                      loop.memory.address(), loop.memory.mr->rkey, 1, 0, 1) == 0);
  const auto wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_LOC_PROT_ERR);
  CHECK(loop.memory.words()[0] == 0);
}

TEST_CASE("the QP state machine refuses missing attributes and wrong states") {
  OpenDevice device("cx7");
  Endpoint a(device, IBV_QPT_RC);
  Endpoint b(device, IBV_QPT_RC);
  Buffer source(device.pd, 64, IBV_ACCESS_LOCAL_WRITE);

  CHECK(post_receive(a.qp, 1) == EINVAL);  // RESET
  ibv_qp_attr attr = a.init_attr(IBV_ACCESS_REMOTE_WRITE);
  CHECK(ibv_modify_qp(a.qp, &attr, kInitMask & ~IBV_QP_ACCESS_FLAGS) == EINVAL);
  attr = a.rtr_attr(b.address());
  CHECK(ibv_modify_qp(a.qp, &attr, kRtrMask) == EINVAL);  // RESET -> RTR
  attr = a.init_attr(IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(ibv_modify_qp(a.qp, &attr, kInitMask) == 0);
  CHECK(post_receive(a.qp, 1) == 0);                         // INIT takes receives
  CHECK(post_write(a.qp, source, 0, 8, 0, 0, 1) == EINVAL);  // not RTS

  attr = a.rtr_attr(b.address());
  CHECK(ibv_modify_qp(a.qp, &attr, kRtrMask & ~IBV_QP_MIN_RNR_TIMER) == EINVAL);
  attr.ah_attr.is_global = 0;  // RoCE needs a GRH
  CHECK(ibv_modify_qp(a.qp, &attr, kRtrMask) == EINVAL);
  attr = a.rtr_attr(b.address());
  attr.ah_attr.grh.sgid_index = 4;  // empty GID entry
  CHECK(ibv_modify_qp(a.qp, &attr, kRtrMask) == EINVAL);
  attr = a.rtr_attr(b.address());
  attr.path_mtu = static_cast<ibv_mtu>(6);
  CHECK(ibv_modify_qp(a.qp, &attr, kRtrMask) == EINVAL);
  attr = a.rtr_attr(b.address());
  CHECK(ibv_modify_qp(a.qp, &attr, kRtrMask | IBV_QP_SQ_PSN) == EINVAL);  // not an RTR attribute
  REQUIRE(ibv_modify_qp(a.qp, &attr, kRtrMask) == 0);
  CHECK(post_write(a.qp, source, 0, 8, 0, 0, 1) == EINVAL);  // RTR: still no sends

  attr = a.rts_attr();
  CHECK(ibv_modify_qp(a.qp, &attr, kRtsMask & ~IBV_QP_RNR_RETRY) == EINVAL);
  REQUIRE(ibv_modify_qp(a.qp, &attr, kRtsMask) == 0);
  ibv_qp_attr queried{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(a.qp, &queried, IBV_QP_STATE, &init) == 0);
  CHECK(queried.qp_state == IBV_QPS_RTS);
  CHECK(queried.dest_qp_num == b.qp->qp_num);
  CHECK(queried.timeout == 14);
  CHECK(init.qp_type == IBV_QPT_RC);

  attr.qp_state = IBV_QPS_INIT;
  CHECK(ibv_modify_qp(a.qp, &attr, IBV_QP_STATE) == EINVAL);  // RTS -> INIT
  attr.qp_state = IBV_QPS_RESET;
  CHECK(ibv_modify_qp(a.qp, &attr, IBV_QP_STATE) == 0);
  CHECK(a.qp->state == IBV_QPS_RESET);
}

TEST_CASE("QP and CQ sizes beyond the device limits are refused") {
  OpenDevice bnxt("bnxt");
  ibv_cq* cq = ibv_create_cq(bnxt.context, 16, nullptr, nullptr, 0);
  REQUIRE(cq);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8193, 16, 1, 1, 0};  // bnxt: max_qp_wr 8192
  errno = 0;
  CHECK(ibv_create_qp(bnxt.pd, &init) == nullptr);
  CHECK(errno == EINVAL);
  init.cap = {8192, 16, 7, 1, 0};  // max_sge 6
  CHECK(ibv_create_qp(bnxt.pd, &init) == nullptr);
  init.cap = {16, 16, 1, 1, 512};
  CHECK(ibv_create_qp(bnxt.pd, &init) == nullptr);
  init.cap = {8192, 16, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(bnxt.pd, &init);
  REQUIRE(qp);
  CHECK(ibv_destroy_cq(cq) == EBUSY);
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_create_cq(bnxt.context, 0, nullptr, nullptr, 0) == nullptr);
}

TEST_CASE("the send queue holds max_send_wr WRs until completions are polled") {
  Loopback loop("cx7", 2);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 1, false) == 0);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 2, true) == 0);
  CHECK(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                   loop.memory.mr->rkey, 3, true) == ENOMEM);
  REQUIRE(poll(loop.initiator.cq, 1).size() == 1);  // frees both slots
  CHECK(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                   loop.memory.mr->rkey, 3, true) == 0);
  CHECK(poll(loop.initiator.cq, 1).size() == 1);
}

TEST_CASE("a CQ overrun makes poll_cq fail") {
  Loopback loop("cx7", 64, 2);
  for (uint64_t i = 0; i < 3; ++i) {
    REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                       loop.memory.mr->rkey, i, true) == 0);
  }
  // The third completion overruns the 2-entry CQ; wait for the failure.
  int result = 0;
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  while (result >= 0 && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc;
    result = ibv_poll_cq(loop.initiator.cq, 0, &wc);  // polls nothing, reports the overrun
    if (result >= 0) usleep(1000);
  }
  CHECK(result == -1);
}

TEST_CASE("memory registration checks access flags, ODP support and invalidates keys") {
  OpenDevice cx7("cx7");
  std::vector<uint8_t> memory(4096);
  errno = 0;
  CHECK(ibv_reg_mr(cx7.pd, memory.data(), memory.size(), IBV_ACCESS_REMOTE_WRITE) == nullptr);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(ibv_reg_mr(cx7.pd, memory.data(), memory.size(),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) == nullptr);
  CHECK(errno == EINVAL);
  ibv_mr* mr = ibv_reg_mr(cx7.pd, memory.data(), memory.size(), kTargetAccess);
  REQUIRE(mr);
  CHECK(mr->lkey != mr->rkey);
  CHECK(ibv_dealloc_pd(cx7.pd) == EBUSY);
  CHECK(ibv_dereg_mr(mr) == 0);

  OpenDevice bnxt("bnxt");
  ibv_mr* odp = ibv_reg_mr(bnxt.pd, memory.data(), memory.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  CHECK(odp != nullptr);
  if (odp) ibv_dereg_mr(odp);
  OpenDevice noodp("bnxt-noodp");
  errno = 0;
  CHECK(ibv_reg_mr(noodp.pd, memory.data(), memory.size(),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) == nullptr);
  CHECK(errno == EINVAL);
}

TEST_CASE("pinning memory the process cannot access fails with EFAULT") {
  // A PROT_NONE reservation stands for a GPU allocation's address range on a
  // host without a peer-memory driver: mapped, but not pinnable.
  OpenDevice cx7("cx7");
  const size_t bytes = 1 << 16;
  void* reserved = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(reserved != MAP_FAILED);
  errno = 0;
  CHECK(ibv_reg_mr(cx7.pd, reserved, bytes, kTargetAccess) == nullptr);
  CHECK(errno == EFAULT);
  REQUIRE(mprotect(reserved, bytes, PROT_READ | PROT_WRITE) == 0);
  ibv_mr* mr = ibv_reg_mr(cx7.pd, reserved, bytes, kTargetAccess);
  CHECK(mr != nullptr);
  if (mr) ibv_dereg_mr(mr);
  munmap(reserved, bytes);
}

TEST_CASE("a deregistered MR's rkey is refused") {
  Loopback loop;
  Buffer gone(loop.device.pd, 64, kTargetAccess);
  const uint32_t rkey = gone.mr->rkey;
  REQUIRE(ibv_dereg_mr(gone.mr) == 0);
  const uint64_t address = gone.address();
  gone.mr = nullptr;
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, address, rkey, 1) == 0);
  const auto wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_REM_ACCESS_ERR);
}

TEST_CASE("dmabuf registration through a memfd, addressed by iova") {
  Loopback loop;
  const int fd = memfd_create("fake-verbs-dmabuf", 0);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 3 * 4096) == 0);
  constexpr uint64_t kIova = 0x7700000000ULL;
  ibv_mr* mr = ibv_reg_dmabuf_mr(loop.device.pd, 4096 + 64, 4096, kIova, fd, kTargetAccess);
  REQUIRE(mr);
  std::memset(loop.source.data(), 0x3c, 256);
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 256, kIova + 16, mr->rkey, 1) == 0);
  auto wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  // Out of the registered 4096 bytes: refused.
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, kIova + 4092, mr->rkey, 2) == 0);
  wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_REM_ACCESS_ERR);

  auto* mapped = static_cast<uint8_t*>(mmap(nullptr, 3 * 4096, PROT_READ, MAP_SHARED, fd, 0));
  REQUIRE(mapped != MAP_FAILED);
  CHECK(mapped[4096 + 64 + 15] == 0);
  CHECK(mapped[4096 + 64 + 16] == 0x3c);
  CHECK(mapped[4096 + 64 + 16 + 255] == 0x3c);
  CHECK(mapped[4096 + 64 + 16 + 256] == 0);
  munmap(mapped, 3 * 4096);
  CHECK(ibv_dereg_mr(mr) == 0);
  close(fd);
}

TEST_CASE("UD send/recv: a 40-byte GRH then the payload; a wrong qkey is dropped") {
  OpenDevice device("cx7");
  Endpoint sender(device, IBV_QPT_UD);
  Endpoint receiver(device, IBV_QPT_UD);
  sender.connect({});
  receiver.connect({});
  Buffer send_buffer(device.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  Buffer receive_buffer(device.pd, 8192, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(post_receive(receiver.qp, 50, &receive_buffer, 0, 4096 + 40) == 0);

  const QpAddress to = receiver.address();
  ibv_ah_attr ah_attr{};
  ah_attr.port_num = 1;
  ah_attr.is_global = 1;
  ah_attr.grh.dgid = to.gid;
  ah_attr.grh.sgid_index = 3;
  ibv_ah* ah = ibv_create_ah(device.pd, &ah_attr);
  REQUIRE(ah);
  ah_attr.is_global = 0;
  CHECK(ibv_create_ah(device.pd, &ah_attr) == nullptr);  // RoCE needs the GRH

  auto send = [&](uint32_t qkey, uint8_t fill, uint64_t wr_id) {
    std::memset(send_buffer.data(), fill, 300);
    ibv_sge sge{send_buffer.address(), 300, send_buffer.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = to.qpn;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(sender.qp, &wr, &bad);
  };
  REQUIRE(send(0x22222222, 0x11, 1) == 0);  // wrong qkey: lost
  REQUIRE(poll(sender.cq, 1).size() == 1);
  REQUIRE(send(0x11111111, 0x77, 2) == 0);
  REQUIRE(poll(sender.cq, 1).size() == 1);
  const auto wc = poll(receiver.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  CHECK(wc[0].opcode == IBV_WC_RECV);
  CHECK(wc[0].wr_id == 50);
  CHECK(wc[0].byte_len == 300 + 40);
  CHECK(wc[0].src_qp == sender.qp->qp_num);
  CHECK((wc[0].wc_flags & IBV_WC_GRH) != 0);
  // The GRH carries the destination GID in its last 16 bytes.
  CHECK(std::memcmp(receive_buffer.data() + 24, to.gid.raw, 16) == 0);
  CHECK(receive_buffer.data()[40] == 0x77);
  CHECK(receive_buffer.data()[40 + 299] == 0x77);
  CHECK(receive_buffer.data()[40 + 300] == 0);
  CHECK(ibv_destroy_ah(ah) == 0);
}

TEST_CASE("atomics on a device without atomics are refused at post time (as mlx5)") {
  Loopback loop("cx7-noatomic");
  CHECK(post_atomic(loop.initiator.qp, loop.source, IBV_WR_ATOMIC_FETCH_AND_ADD,
                    loop.memory.address(), loop.memory.mr->rkey, 1, 0, 1) == EOPNOTSUPP);
}

TEST_CASE("InfiniBand profile: connections by LID") {
  Loopback loop("cx7-ib");
  loop.source.words()[0] = 0x1122334455667788ULL;
  REQUIRE(post_write(loop.initiator.qp, loop.source, 0, 8, loop.memory.address(),
                     loop.memory.mr->rkey, 1) == 0);
  const auto wc = poll(loop.initiator.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  CHECK(loop.memory.words()[0] == 0x1122334455667788ULL);
}

TEST_CASE("writes to an unknown QP or an absent HCA end in RETRY_EXC_ERR") {
  OpenDevice device("cx7");
  Buffer source(device.pd, 64, IBV_ACCESS_LOCAL_WRITE);
  Endpoint unknown_qp(device, IBV_QPT_RC);
  QpAddress nowhere = unknown_qp.address();
  nowhere.qpn = 0xFFFFF0;  // no such QP on this live HCA
  unknown_qp.connect(nowhere);
  REQUIRE(post_write(unknown_qp.qp, source, 0, 8, 0x1000, 1, 1) == 0);
  auto wc = poll(unknown_qp.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_RETRY_EXC_ERR);

  Endpoint absent(device, IBV_QPT_RC);
  QpAddress no_hca = absent.address();
  // ::ffff:10.0.0.0: HCA number 0, which no fake HCA ever owns.
  no_hca.gid.raw[13] = no_hca.gid.raw[14] = no_hca.gid.raw[15] = 0;
  absent.connect(no_hca);
  REQUIRE(post_write(absent.qp, source, 0, 8, 0x1000, 1, 1) == 0);
  wc = poll(absent.cq, 1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_RETRY_EXC_ERR);
}
