#include "fake_hca.hpp"

#include <endian.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace courier::fake_verbs {
namespace {

constexpr uint64_t kGuidNumberMask = 0xFFFFFF;
constexpr uint64_t kKnownGuidPrefixes[] = {0x0002c90300000000ULL, 0x000af70000000000ULL};

ibv_wc_opcode send_wc_opcode(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    default:
      return IBV_WC_SEND;
  }
}

}  // namespace

uint64_t node_guid(const Profile& profile, uint32_t number) {
  return profile.guid_prefix | (number & kGuidNumberMask);
}

std::optional<ibv_gid_entry> gid_entry(const Profile& profile, uint32_t number, uint32_t index) {
  if (index >= static_cast<uint32_t>(profile.valid_gids())) return std::nullopt;
  ibv_gid_entry entry{};
  entry.gid_index = index;
  entry.port_num = 1;
  if (index < 2) {
    // Link-local: fe80::/64 with the node GUID as interface id.
    entry.gid.global.subnet_prefix = htobe64(0xfe80000000000000ULL);
    entry.gid.global.interface_id = htobe64(node_guid(profile, number));
  } else {
    // IPv4-mapped ::ffff:10.a.b.c with the HCA number as host part.
    entry.gid.raw[10] = 0xff;
    entry.gid.raw[11] = 0xff;
    entry.gid.raw[12] = 10;
    entry.gid.raw[13] = static_cast<uint8_t>(number >> 16);
    entry.gid.raw[14] = static_cast<uint8_t>(number >> 8);
    entry.gid.raw[15] = static_cast<uint8_t>(number);
  }
  if (!profile.roce()) {
    entry.gid_type = IBV_GID_TYPE_IB;
  } else {
    entry.gid_type = index % 2 == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  }
  return entry;
}

std::optional<uint32_t> number_from_gid(const ibv_gid& gid) {
  static const uint8_t link_local[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  static const uint8_t ipv4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  uint32_t number = 0;
  if (std::memcmp(gid.raw, link_local, sizeof(link_local)) == 0) {
    const uint64_t interface_id = be64toh(gid.global.interface_id);
    bool known = false;
    for (uint64_t prefix : kKnownGuidPrefixes) {
      known = known || (interface_id & ~kGuidNumberMask) == prefix;
    }
    if (!known) return std::nullopt;
    number = static_cast<uint32_t>(interface_id & kGuidNumberMask);
  } else if (std::memcmp(gid.raw, ipv4_mapped, sizeof(ipv4_mapped)) == 0 && gid.raw[12] == 10) {
    number = (uint32_t{gid.raw[13]} << 16) | (uint32_t{gid.raw[14]} << 8) | gid.raw[15];
  } else {
    return std::nullopt;
  }
  if (number == 0 || number > kMaxHcaNumber) return std::nullopt;
  return number;
}

std::optional<uint32_t> number_from_lid(uint16_t lid) {
  if (lid == 0 || lid > kMaxHcaNumber) return std::nullopt;
  return lid;
}

Hca::Hca(const Profile& profile, BoundSocket socket)
    : profile_(profile),
      number_(socket.number),
      owner_pid_(::getpid()),
      random_(std::random_device{}() ^ (uint64_t{socket.number} << 32) ^ ::getpid()),
      next_qpn_(static_cast<uint32_t>(random_() % 0x7FFF00) + 0x100),
      engine_(*this) {
  if (::listen(socket.fd.get(), 128) != 0) {
    std::fprintf(stderr, "fake verbs: listen on the socket of HCA %u failed: %s\n", number_,
                 std::strerror(errno));
  }
  engine_.start(std::move(socket.fd));
}

Hca::~Hca() { engine_.stop(); }

uint32_t Hca::fresh_key() {
  for (;;) {
    const auto key = static_cast<uint32_t>(random_());
    if (key != 0 && issued_keys_.insert(key).second) return key;
  }
}

uint32_t Hca::fresh_qpn() {
  for (;;) {
    const uint32_t qpn = next_qpn_;
    next_qpn_ = (next_qpn_ + 1) & 0xFFFFFF;
    if (qpn > 1 && qps.find(qpn) == qps.end()) return qpn;
  }
}

void Hca::push_completion(Cq& cq, const CqEntry& entry) {
  if (cq.overrun) return;
  if (cq.entries.size() >= cq.capacity) {
    cq.overrun = true;
    std::fprintf(stderr,
                 "fake verbs: CQ %p overrun: a completion arrived with %zu (its capacity) "
                 "outstanding; real hardware raises IBV_EVENT_CQ_ERR and the CQ is unusable\n",
                 static_cast<void*>(&cq.handle.ibv), cq.capacity);
    return;
  }
  cq.entries.push_back(entry);
  if (entry.wc.status != IBV_WC_SUCCESS) {
    // ibv_poll_cq(3): in an error completion only wr_id, status, qp_num and
    // vendor_err are valid. Make the rest plainly wrong (a send looks like a
    // receive and the other way round), so code that reads them fails here.
    ibv_wc& wc = cq.entries.back().wc;
    wc.opcode = (wc.opcode & IBV_WC_RECV) ? IBV_WC_RDMA_WRITE : IBV_WC_RECV_RDMA_WITH_IMM;
    wc.byte_len = 0xdeadbeef;
    wc.imm_data = 0xdeadbeef;
    wc.wc_flags = IBV_WC_WITH_IMM;
  }
}

void Hca::complete_send(Qp& qp, const SendWr& wr, ibv_wc_status status) {
  if (status == IBV_WC_SUCCESS && !wr.signaled && !qp.sq_sig_all) {
    ++qp.unsignaled_retired;
    return;
  }
  CqEntry entry;
  entry.wc.wr_id = wr.wr_id;
  entry.wc.status = status;
  entry.wc.opcode = send_wc_opcode(wr.opcode);
  entry.wc.qp_num = qp.qpn();
  entry.wc.byte_len = entry.wc.opcode == IBV_WC_COMP_SWAP || entry.wc.opcode == IBV_WC_FETCH_ADD
                          ? 8
                          : static_cast<uint32_t>(wr.total_length());
  entry.qp_num = qp.qpn();
  entry.qp_generation = qp.generation;
  entry.send_slots = 1 + qp.unsignaled_retired;
  qp.unsignaled_retired = 0;
  push_completion(*qp.send_cq, entry);
}

void Hca::complete_recv(Qp& qp, const RecvWr& wr, const ibv_wc& wc) {
  CqEntry entry;
  entry.wc = wc;
  entry.wc.wr_id = wr.wr_id;
  entry.wc.qp_num = qp.qpn();
  entry.qp_num = qp.qpn();
  entry.qp_generation = qp.generation;
  entry.recv_slots = 1;
  push_completion(*qp.recv_cq, entry);
}

void Hca::complete_in_order(Qp& qp) {
  while (!qp.send_queue.empty() && qp.send_queue.front().result) {
    const SendWr wr = std::move(qp.send_queue.front());
    qp.send_queue.pop_front();
    if (qp.next_to_transmit > 0) --qp.next_to_transmit;
    complete_send(qp, wr, *wr.result);
    if (*wr.result != IBV_WC_SUCCESS) {
      enter_error(qp);
      return;
    }
  }
}

void Hca::enter_error(Qp& qp) {
  qp.state = IBV_QPS_ERR;
  // In the error state every outstanding WR completes, signalled or not.
  for (const SendWr& wr : qp.send_queue) complete_send(qp, wr, IBV_WC_WR_FLUSH_ERR);
  qp.send_queue.clear();
  qp.next_to_transmit = 0;
  for (const RecvWr& wr : qp.recv_queue) {
    ibv_wc wc{};
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    complete_recv(qp, wr, wc);
  }
  qp.recv_queue.clear();
}

Mr* Hca::local_mr(const Pd* pd, uint32_t lkey, uint64_t address, uint64_t bytes, unsigned needed) {
  const auto found = mr_by_lkey.find(lkey);
  if (found == mr_by_lkey.end()) return nullptr;
  Mr* mr = found->second;
  if (mr->pd != pd || (mr->access & needed) != needed) return nullptr;
  if (!mr->translate(address, bytes)) return nullptr;
  return mr;
}

}  // namespace courier::fake_verbs
