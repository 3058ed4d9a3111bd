// The responder half of the protocol: checks every request as a real HCA
// does (QP state, peer, PSN, QP access flags, rkey, range, MR rights, atomic
// size and alignment) before memory is touched, applies it, and answers ACK
// or NAK. A NAKed request leaves the expected PSN where it was, so the
// requests that followed it are dropped until it is retransmitted.
#include <endian.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>

#include "fake_dma.hpp"
#include "fake_protocol.hpp"

namespace courier::fake_verbs {
namespace {

constexpr uint32_t kPsnMask = 0xFFFFFF;
constexpr size_t kGrhBytes = 40;

// IB encoded minimal RNR NAK timer (min_rnr_timer) in microseconds.
uint32_t rnr_delay_us(uint8_t code) {
  static const uint32_t table[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                     160,    240,   320,   480,    640,    960,    1280,   1920,
                                     2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                     40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return table[code & 31];
}

void respond(Connection& reply, const FrameHeader& request, ResponseStatus status,
             uint64_t atomic_original = 0, uint32_t rnr_delay = 0) {
  FrameHeader response{};
  response.kind = FrameKind::Response;
  response.target_qpn = request.source_qpn;
  response.serial = request.serial;
  response.generation = request.generation;
  response.status = status;
  response.atomic_original = atomic_original;
  response.rnr_delay_us = rnr_delay;
  reply.send(response, nullptr, 0);
}

// The MR rkey names on the QP's PD, if it covers the range with `needed`.
std::byte* remote_memory(Hca& hca, const Qp& qp, uint32_t rkey, uint64_t address, uint64_t bytes,
                         unsigned needed) {
  const auto found = hca.mr_by_rkey.find(rkey);
  if (found == hca.mr_by_rkey.end()) return nullptr;
  const Mr& mr = *found->second;
  if (mr.pd != qp.pd || (mr.access & needed) != needed) return nullptr;
  return mr.translate(address, bytes);
}

enum class Scatter { Done, ProtectionError, LengthError };

// Writes `pieces` (in order) into the receive WR's SGEs.
Scatter scatter(Hca& hca, const Qp& qp, const RecvWr& recv,
                std::initializer_list<std::pair<const std::byte*, size_t>> pieces) {
  uint64_t total = 0;
  for (const auto& piece : pieces) total += piece.second;
  uint64_t capacity = 0;
  for (const ibv_sge& sge : recv.sges) {
    if (!hca.local_mr(qp.pd, sge.lkey, sge.addr, sge.length, IBV_ACCESS_LOCAL_WRITE)) {
      return Scatter::ProtectionError;
    }
    capacity += sge.length;
  }
  if (total > capacity) return Scatter::LengthError;
  auto sge = recv.sges.begin();
  uint64_t sge_offset = 0;
  for (const auto& [data, size] : pieces) {
    size_t done = 0;
    while (done < size) {
      const size_t chunk = std::min<uint64_t>(size - done, sge->length - sge_offset);
      Mr* mr = hca.local_mr(qp.pd, sge->lkey, sge->addr, sge->length, IBV_ACCESS_LOCAL_WRITE);
      dma_copy(mr->translate(sge->addr + sge_offset, chunk), data + done, chunk);
      done += chunk;
      sge_offset += chunk;
      if (sge_offset == sge->length) {
        ++sge;
        sge_offset = 0;
      }
    }
  }
  return Scatter::Done;
}

// The 40-byte GRH a UD receive starts with (IB layout, also used for RoCE).
std::array<std::byte, kGrhBytes> make_grh(const FrameHeader& request, size_t payload) {
  std::array<std::byte, kGrhBytes> grh{};
  if (!request.global) return grh;  // no GRH was sent: the 40 bytes are undefined; zero here
  const uint32_t version_class_flow = htobe32(6u << 28);
  const uint16_t payload_length = htobe16(static_cast<uint16_t>(payload));
  std::memcpy(grh.data(), &version_class_flow, 4);
  std::memcpy(grh.data() + 4, &payload_length, 2);
  grh[6] = std::byte{0x1b};  // next header: IB transport
  grh[7] = std::byte{64};    // hop limit
  std::memcpy(grh.data() + 8, request.sgid, 16);
  std::memcpy(grh.data() + 24, request.dgid, 16);
  return grh;
}

void receive_datagram(Hca& hca, Qp& qp, const Frame& request) {
  const FrameHeader& header = request.header;
  // UD drops what it cannot take: wrong QP state, qkey, or no receive posted.
  if (qp.state != IBV_QPS_RTR && qp.state != IBV_QPS_RTS) return;
  if (header.qkey != qp.attr.qkey || qp.recv_queue.empty()) return;
  const RecvWr recv = std::move(qp.recv_queue.front());
  qp.recv_queue.pop_front();
  const auto grh = make_grh(header, request.payload.size());
  ibv_wc wc{};
  wc.opcode = IBV_WC_RECV;
  wc.byte_len = static_cast<uint32_t>(kGrhBytes + request.payload.size());
  wc.src_qp = header.source_qpn;
  wc.wc_flags = (header.global ? IBV_WC_GRH : 0) | (header.has_imm ? IBV_WC_WITH_IMM : 0);
  wc.imm_data = header.has_imm ? header.imm : 0;
  wc.slid = header.source_lid;
  switch (scatter(hca, qp, recv,
                  {{grh.data(), grh.size()}, {request.payload.data(), request.payload.size()}})) {
    case Scatter::Done:
      wc.status = IBV_WC_SUCCESS;
      hca.complete_recv(qp, recv, wc);
      return;
    case Scatter::ProtectionError:
      wc.status = IBV_WC_LOC_PROT_ERR;
      break;
    case Scatter::LengthError:
      wc.status = IBV_WC_LOC_LEN_ERR;
      break;
  }
  hca.complete_recv(qp, recv, wc);
  hca.enter_error(qp);
}

// Applies an 8-byte atomic; returns the original value.
uint64_t apply_atomic(std::byte* target, const FrameHeader& header) {
  DmaScope dma;
  const bool swap = header.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
  if (reinterpret_cast<uintptr_t>(target) % 8 != 0) {
    // The iova is aligned but its host mapping is not (a dmabuf or iova MR
    // at an odd offset): no CPU atomic exists for that; the HCA lock keeps
    // the fake's own accesses atomic.
    uint64_t value = 0;
    std::memcpy(&value, target, 8);
    const uint64_t updated =
        swap ? (value == header.compare_add ? header.swap : value) : value + header.compare_add;
    std::memcpy(target, &updated, 8);
    return value;
  }
  auto* word = reinterpret_cast<uint64_t*>(target);
  if (!swap) return __atomic_fetch_add(word, header.compare_add, __ATOMIC_SEQ_CST);
  uint64_t expected = header.compare_add;
  __atomic_compare_exchange_n(word, &expected, header.swap, false, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
  return expected;  // the value found, whether or not it matched
}

// Handles one RC request; returns the answer (nothing: drop silently).
std::optional<ResponseStatus> serve_connected(Hca& hca, Qp& qp, const Frame& request,
                                              uint64_t& atomic_original, uint32_t& rnr_delay) {
  const FrameHeader& header = request.header;
  if (qp.state != IBV_QPS_RTR && qp.state != IBV_QPS_RTS) return ResponseStatus::QpNotReady;
  // Packets from anyone but the connected peer, or out of sequence, are
  // dropped: the requester then times out.
  if (header.source_hca != qp.destination.hca_number || header.source_qpn != qp.attr.dest_qp_num) {
    return std::nullopt;
  }
  if (header.psn != qp.expected_psn) return std::nullopt;

  const auto opcode = static_cast<ibv_wr_opcode>(header.opcode);
  const unsigned qp_access = qp.attr.qp_access_flags;
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: {
      if (!(qp_access & IBV_ACCESS_REMOTE_WRITE)) return ResponseStatus::RemoteAccessError;
      std::byte* target = nullptr;
      if (header.length > 0) {  // a zero-length write checks no rkey
        target = remote_memory(hca, qp, header.rkey, header.remote_addr, header.length,
                               IBV_ACCESS_REMOTE_WRITE);
        if (!target) return ResponseStatus::RemoteAccessError;
      }
      if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM && qp.recv_queue.empty()) {
        rnr_delay = rnr_delay_us(qp.attr.min_rnr_timer);
        return ResponseStatus::ReceiverNotReady;
      }
      if (target) dma_copy(target, request.payload.data(), request.payload.size());
      if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        const RecvWr recv = std::move(qp.recv_queue.front());
        qp.recv_queue.pop_front();
        ibv_wc wc{};
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        wc.byte_len = static_cast<uint32_t>(header.length);
        wc.imm_data = header.imm;
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.src_qp = header.source_qpn;
        wc.slid = header.source_lid;
        hca.complete_recv(qp, recv, wc);
      }
      break;
    }
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: {
      if (qp.recv_queue.empty()) {
        rnr_delay = rnr_delay_us(qp.attr.min_rnr_timer);
        return ResponseStatus::ReceiverNotReady;
      }
      const RecvWr recv = std::move(qp.recv_queue.front());
      qp.recv_queue.pop_front();
      ibv_wc wc{};
      wc.opcode = IBV_WC_RECV;
      wc.byte_len = static_cast<uint32_t>(request.payload.size());
      wc.imm_data = header.has_imm ? header.imm : 0;
      wc.wc_flags = header.has_imm ? IBV_WC_WITH_IMM : 0;
      wc.src_qp = header.source_qpn;
      wc.slid = header.source_lid;
      const Scatter result =
          scatter(hca, qp, recv, {{request.payload.data(), request.payload.size()}});
      if (result != Scatter::Done) {
        wc.status = result == Scatter::LengthError ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR;
        hca.complete_recv(qp, recv, wc);
        hca.enter_error(qp);
        return ResponseStatus::RemoteInvalidRequest;
      }
      wc.status = IBV_WC_SUCCESS;
      hca.complete_recv(qp, recv, wc);
      break;
    }
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP: {
      if (hca.profile().atomic_cap == IBV_ATOMIC_NONE) return ResponseStatus::RemoteInvalidRequest;
      if (!(qp_access & IBV_ACCESS_REMOTE_ATOMIC)) return ResponseStatus::RemoteAccessError;
      if (header.length != 8 || header.remote_addr % 8 != 0) {
        return ResponseStatus::RemoteInvalidRequest;
      }
      std::byte* target =
          remote_memory(hca, qp, header.rkey, header.remote_addr, 8, IBV_ACCESS_REMOTE_ATOMIC);
      if (!target) return ResponseStatus::RemoteAccessError;
      atomic_original = apply_atomic(target, header);
      break;
    }
    default:
      return ResponseStatus::RemoteInvalidRequest;
  }
  qp.expected_psn = (qp.expected_psn + 1) & kPsnMask;
  return ResponseStatus::Ack;
}

}  // namespace

void on_request(Hca& hca, const Frame& request, Connection& reply) {
  const FrameHeader& header = request.header;
  const auto found = hca.qps.find(header.target_qpn);
  Qp* qp = found == hca.qps.end() ? nullptr : found->second.get();
  // Different link layers never reach each other.
  if (header.link_layer != hca.profile().link_layer) return;
  if (header.datagram) {
    if (qp && qp->type == IBV_QPT_UD) receive_datagram(hca, *qp, request);
    return;
  }
  if (!qp || qp->type != IBV_QPT_RC) {
    respond(reply, header, ResponseStatus::QpNotReady);
    return;
  }
  uint64_t atomic_original = 0;
  uint32_t rnr_delay = 0;
  if (auto status = serve_connected(hca, *qp, request, atomic_original, rnr_delay)) {
    respond(reply, header, *status, atomic_original, rnr_delay);
  }
}

}  // namespace courier::fake_verbs
