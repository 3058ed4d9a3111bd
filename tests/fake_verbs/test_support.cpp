#include "test_support.hpp"

#include <doctest/doctest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace courier::fake_verbs::testing {

ScopedProfiles::ScopedProfiles(const char* value) {
  if (const char* old = std::getenv("FAKE_VERBS_DEVICES")) previous_ = old;
  if (value) {
    ::setenv("FAKE_VERBS_DEVICES", value, 1);
  } else {
    ::unsetenv("FAKE_VERBS_DEVICES");
  }
}

ScopedProfiles::~ScopedProfiles() {
  if (previous_) {
    ::setenv("FAKE_VERBS_DEVICES", previous_->c_str(), 1);
  } else {
    ::unsetenv("FAKE_VERBS_DEVICES");
  }
}

OpenDevice::OpenDevice(const char* profile) {
  ScopedProfiles profiles(profile);
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list || count < 1) {
    ibv_free_device_list(list);
    throw std::runtime_error(std::string("no fake device for profile ") + profile);
  }
  context = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!context) throw std::runtime_error("ibv_open_device failed");
  pd = ibv_alloc_pd(context);
  if (!pd) throw std::runtime_error("ibv_alloc_pd failed");
  if (ibv_query_port(context, 1, &port) != 0) throw std::runtime_error("ibv_query_port failed");
}

OpenDevice::~OpenDevice() {
  if (pd) ibv_dealloc_pd(pd);
  if (context) ibv_close_device(context);
}

Buffer::Buffer(ibv_pd* pd, size_t bytes, int access) : size_(bytes) {
  data_ = static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  std::memset(data_, 0, bytes);
  mr = ibv_reg_mr(pd, data_, bytes, access);
  if (!mr) throw std::runtime_error("ibv_reg_mr failed");
}

Buffer::~Buffer() {
  if (mr) ibv_dereg_mr(mr);
  std::free(data_);
}

Endpoint::Endpoint(OpenDevice& opened, ibv_qp_type type, uint32_t max_send_wr, int cq_entries,
                   bool sq_sig_all)
    : device(opened) {
  cq = ibv_create_cq(device.context, cq_entries, nullptr, nullptr, 0);
  if (!cq) throw std::runtime_error("ibv_create_cq failed");
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = type;
  init.sq_sig_all = sq_sig_all;
  init.cap.max_send_wr = max_send_wr;
  init.cap.max_recv_wr = 64;
  init.cap.max_send_sge = 2;
  init.cap.max_recv_sge = 2;
  init.cap.max_inline_data = 64;
  qp = ibv_create_qp(device.pd, &init);
  if (!qp) throw std::runtime_error("ibv_create_qp failed");
}

Endpoint::~Endpoint() {
  if (qp) ibv_destroy_qp(qp);
  if (cq) ibv_destroy_cq(cq);
}

QpAddress Endpoint::address() const {
  QpAddress address;
  address.qpn = qp->qp_num;
  address.lid = device.port.lid;
  // RoCE v2 GID (index 3: IPv4-mapped) on Ethernet, the only GID on IB.
  const int index = device.port.link_layer == IBV_LINK_LAYER_ETHERNET ? 3 : 0;
  ibv_query_gid(device.context, 1, index, &address.gid);
  return address;
}

ibv_qp_attr Endpoint::init_attr(int access) const {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = access;
  attr.qkey = 0x11111111;
  return attr;
}

ibv_qp_attr Endpoint::rtr_attr(const QpAddress& remote) const {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = 0x123;
  attr.max_dest_rd_atomic = 16;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = 1;
  if (device.port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = 3;
    attr.ah_attr.grh.hop_limit = 64;
  } else {
    attr.ah_attr.dlid = remote.lid;
  }
  return attr;
}

ibv_qp_attr Endpoint::rts_attr() const {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = 0x123;
  attr.max_rd_atomic = 16;
  return attr;
}

void Endpoint::connect(const QpAddress& remote, int access) {
  const bool rc = qp->qp_type == IBV_QPT_RC;
  ibv_qp_attr init = init_attr(access);
  const int init_mask =
      rc ? kInitMask : (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  if (ibv_modify_qp(qp, &init, init_mask) != 0) throw std::runtime_error("to INIT failed");
  ibv_qp_attr rtr = rtr_attr(remote);
  if (ibv_modify_qp(qp, &rtr, rc ? kRtrMask : IBV_QP_STATE) != 0) {
    throw std::runtime_error("to RTR failed");
  }
  ibv_qp_attr rts = rts_attr();
  if (ibv_modify_qp(qp, &rts, rc ? kRtsMask : (IBV_QP_STATE | IBV_QP_SQ_PSN)) != 0) {
    throw std::runtime_error("to RTS failed");
  }
}

int post_write(ibv_qp* qp, const Buffer& source, size_t offset, uint32_t length,
               uint64_t remote_addr, uint32_t rkey, uint64_t wr_id, bool signaled,
               std::optional<uint32_t> imm) {
  ibv_sge sge{source.address(offset), length, source.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = length ? 1 : 0;
  wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.imm_data = imm.value_or(0);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int post_atomic(ibv_qp* qp, const Buffer& result, ibv_wr_opcode opcode, uint64_t remote_addr,
                uint32_t rkey, uint64_t compare_add, uint64_t swap, uint64_t wr_id) {
  ibv_sge sge{result.address(), 8, result.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int post_receive(ibv_qp* qp, uint64_t wr_id, const Buffer* buffer, size_t offset, uint32_t length) {
  ibv_sge sge{};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  if (buffer) {
    sge = ibv_sge{buffer->address(offset), length, buffer->mr->lkey};
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

std::vector<ibv_wc> poll(ibv_cq* cq, size_t count) {
  std::vector<ibv_wc> completions;
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  while (completions.size() < count && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[16];
    const int got =
        ibv_poll_cq(cq, static_cast<int>(std::min<size_t>(16, count - completions.size())), wc);
    if (got < 0) break;
    completions.insert(completions.end(), wc, wc + got);
    if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return completions;
}

}  // namespace courier::fake_verbs::testing
