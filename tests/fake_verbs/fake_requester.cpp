// The requester half of the protocol: send WRs leave in post order, at most
// kWindow in flight per QP; a retryable NAK (receiver not ready, target QP
// not ready) rewinds to the NAKed WR (go-back-N: the responder drops what
// followed it) and retransmits after a delay.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "fake_protocol.hpp"

namespace courier::fake_verbs {
namespace {

constexpr size_t kWindow = 64;
constexpr auto kRedialDelay = std::chrono::milliseconds(10);
constexpr auto kNotReadyDelay = std::chrono::milliseconds(2);
constexpr auto kMinRnrDelay = std::chrono::milliseconds(1);
// A live peer that stops answering (a PSN it does not expect, a QP that is
// not connected to this one): longer than the retry bound, so a slow shared
// machine never fails a healthy stream.
constexpr auto kAckTimeout = std::chrono::seconds(4);
constexpr uint32_t kPsnMask = 0xFFFFFF;
constexpr uint32_t kUdMtu = 4096;

// How long an unreachable HCA or an unknown / not-ready QP is retried: the
// IB local ACK timeout (4.096 us << timeout) times retry_cnt + 1 attempts,
// kept between 200 ms and about a second.
Clock::duration retry_bound(const Qp& qp) {
  const int exponent = qp.attr.timeout == 0 ? 31 : std::min<int>(qp.attr.timeout, 31);
  const double per_attempt_us = 4.096 * static_cast<double>(uint64_t{1} << exponent);
  const double total_us = per_attempt_us * (qp.attr.retry_cnt + 1);
  const auto bound = std::chrono::microseconds(static_cast<int64_t>(std::min(total_us, 1e6)));
  return std::max<Clock::duration>(bound, std::chrono::milliseconds(200));
}

void earliest(std::optional<Clock::time_point>& wake, Clock::time_point candidate) {
  if (!wake || candidate < *wake) wake = candidate;
}

// The payload of a write or send: the inline copy or the gathered SGEs.
// Nothing if an SGE does not name a live MR of the QP's PD covering it.
std::optional<std::vector<std::byte>> gather(Hca& hca, const Qp& qp, const SendWr& wr) {
  if (wr.inline_data) return *wr.inline_data;
  std::vector<std::byte> payload;
  payload.reserve(wr.total_length());
  for (const ibv_sge& sge : wr.sges) {
    Mr* mr = hca.local_mr(qp.pd, sge.lkey, sge.addr, sge.length, 0);
    if (!mr) return std::nullopt;
    const std::byte* source = mr->translate(sge.addr, sge.length);
    payload.insert(payload.end(), source, source + sge.length);
  }
  return payload;
}

FrameHeader request_header(Hca& hca, const Qp& qp, const SendWr& wr,
                           const Destination& destination) {
  FrameHeader header{};
  header.kind = FrameKind::Request;
  header.opcode = static_cast<uint16_t>(wr.opcode);
  header.source_hca = hca.number();
  header.source_qpn = qp.qpn();
  header.serial = wr.serial;
  header.generation = qp.generation;
  header.remote_addr = wr.remote_addr;
  header.length = wr.total_length();
  header.compare_add = wr.compare_add;
  header.swap = wr.swap;
  header.rkey = wr.rkey;
  header.imm = wr.imm;
  header.has_imm = wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr.opcode == IBV_WR_SEND_WITH_IMM;
  header.link_layer = hca.profile().link_layer;
  header.global = destination.global;
  header.source_lid = hca.lid();
  if (auto sgid = gid_entry(hca.profile(), hca.number(), destination.sgid_index)) {
    std::memcpy(header.sgid, sgid->gid.raw, sizeof(header.sgid));
  }
  std::memcpy(header.dgid, destination.dgid.raw, sizeof(header.dgid));
  return header;
}

bool is_atomic(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// FAKE_VERBS_UD_LOSS=P (0 to 1): the share of UD datagrams the fabric loses,
// so tests can prove that protocols over UD survive loss. Read once.
double datagram_loss() {
  static const double loss = [] {
    const char* value = std::getenv("FAKE_VERBS_UD_LOSS");
    const double p = value ? std::strtod(value, nullptr) : 0.0;
    return p > 0.0 && p <= 1.0 ? p : 0.0;
  }();
  return loss;
}

bool lose_datagram() {
  const double loss = datagram_loss();
  if (loss == 0.0) return false;
  // One generator per engine thread; seeded per process and thread.
  thread_local std::minstd_rand random(
      static_cast<uint32_t>(::getpid()) * 2654435761u ^
      static_cast<uint32_t>(std::hash<std::thread::id>{}(std::this_thread::get_id())));
  return std::uniform_real_distribution<double>(0.0, 1.0)(random) < loss;
}

// UD sends complete once they are on the wire; an unreachable or busy
// destination silently loses the datagram, as UD does (and FAKE_VERBS_UD_LOSS
// makes the fabric lose some on purpose).
void pump_datagrams(Hca& hca, Qp& qp, Links& links) {
  while (qp.state == IBV_QPS_RTS && !qp.send_queue.empty()) {
    SendWr& wr = qp.send_queue.front();
    std::optional<std::vector<std::byte>> payload = gather(hca, qp, wr);
    if (!payload) {
      wr.result = IBV_WC_LOC_PROT_ERR;
    } else if (payload->size() > kUdMtu) {
      wr.result = IBV_WC_LOC_LEN_ERR;
    } else {
      const Destination& destination = wr.ud_destination;
      bool refused = false;
      Connection* connection =
          destination.hca_number ? links.connection_to(*destination.hca_number, refused) : nullptr;
      if (connection && !lose_datagram()) {
        FrameHeader header = request_header(hca, qp, wr, destination);
        header.datagram = 1;
        header.target_qpn = wr.ud_remote_qpn;
        header.qkey = wr.ud_remote_qkey;
        connection->send(header, payload->data(), payload->size());
      }
      wr.result = IBV_WC_SUCCESS;
    }
    hca.complete_in_order(qp);
  }
}

// Fails the oldest unanswered WR once its ACK is overdue; returns the time
// to look again.
std::optional<Clock::time_point> check_ack_timeout(Hca& hca, Qp& qp, Clock::time_point now) {
  for (SendWr& wr : qp.send_queue) {
    if (!wr.transmitted || wr.result) continue;
    if (now < wr.ack_deadline) return wr.ack_deadline;
    wr.result = IBV_WC_RETRY_EXC_ERR;
    hca.complete_in_order(qp);
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<Clock::time_point> pump_connected(Hca& hca, Qp& qp, Links& links,
                                                Clock::time_point now) {
  std::optional<Clock::time_point> wake = check_ack_timeout(hca, qp, now);
  if (qp.state != IBV_QPS_RTS) return wake;
  if (now < qp.resume_at) {
    earliest(wake, qp.resume_at);
    return wake;
  }
  while (qp.next_to_transmit < qp.send_queue.size() && qp.next_to_transmit < kWindow) {
    SendWr& wr = qp.send_queue[qp.next_to_transmit];
    if (wr.result) break;  // a local error waits for the WRs before it
    bool refused = false;
    Connection* connection = qp.destination.hca_number
                                 ? links.connection_to(*qp.destination.hca_number, refused)
                                 : nullptr;
    if (!connection) {
      if (!wr.retry_deadline) wr.retry_deadline = now + retry_bound(qp);
      if (now >= *wr.retry_deadline) {
        wr.result = IBV_WC_RETRY_EXC_ERR;
        hca.complete_in_order(qp);
        return wake;
      }
      qp.resume_at = now + kRedialDelay;
      earliest(wake, qp.resume_at);
      return wake;
    }
    std::vector<std::byte> payload;
    if (is_atomic(wr.opcode)) {
      // The original value lands in the SGE: it must be locally writable.
      const ibv_sge* sge = wr.sges.empty() ? nullptr : &wr.sges.front();
      if (sge && !hca.local_mr(qp.pd, sge->lkey, sge->addr, sge->length, IBV_ACCESS_LOCAL_WRITE)) {
        wr.result = IBV_WC_LOC_PROT_ERR;
        hca.complete_in_order(qp);
        return wake;
      }
    } else {
      std::optional<std::vector<std::byte>> gathered = gather(hca, qp, wr);
      if (!gathered) {
        wr.result = IBV_WC_LOC_PROT_ERR;
        hca.complete_in_order(qp);
        return wake;
      }
      payload = std::move(*gathered);
    }
    if (!wr.psn) {
      wr.psn = qp.next_psn;
      qp.next_psn = (qp.next_psn + 1) & kPsnMask;
    }
    FrameHeader header = request_header(hca, qp, wr, qp.destination);
    header.target_qpn = qp.attr.dest_qp_num;
    header.psn = *wr.psn;
    connection->send(header, payload.data(), payload.size());
    wr.transmitted = true;
    wr.connection_id = connection->id();
    wr.ack_deadline = now + kAckTimeout;
    earliest(wake, wr.ack_deadline);
    ++qp.next_to_transmit;
  }
  return wake;
}

// Go back to WR `index`: it and everything after it go out again.
void rewind(Qp& qp, size_t index) {
  for (size_t i = index; i < qp.send_queue.size(); ++i) qp.send_queue[i].transmitted = false;
  qp.next_to_transmit = std::min(qp.next_to_transmit, index);
}

}  // namespace

std::optional<Clock::time_point> pump_send_queues(Hca& hca, Links& links, Clock::time_point now) {
  std::optional<Clock::time_point> wake;
  for (auto& [qpn, qp] : hca.qps) {
    if (qp->send_queue.empty()) continue;
    if (qp->type == IBV_QPT_UD) {
      pump_datagrams(hca, *qp, links);
    } else if (auto when = pump_connected(hca, *qp, links, now)) {
      earliest(wake, *when);
    }
  }
  return wake;
}

void on_response(Hca& hca, const FrameHeader& response, Clock::time_point now) {
  const auto found = hca.qps.find(response.target_qpn);
  if (found == hca.qps.end()) return;
  Qp& qp = *found->second;
  if (qp.generation != response.generation || qp.state != IBV_QPS_RTS) return;
  size_t index = 0;
  while (index < qp.send_queue.size() && qp.send_queue[index].serial != response.serial) ++index;
  if (index == qp.send_queue.size()) return;
  SendWr& wr = qp.send_queue[index];
  if (!wr.transmitted || wr.result) return;

  switch (response.status) {
    case ResponseStatus::Ack:
      wr.result = IBV_WC_SUCCESS;
      if (is_atomic(wr.opcode)) {
        const ibv_sge& sge = wr.sges.front();
        Mr* mr = hca.local_mr(qp.pd, sge.lkey, sge.addr, 8, IBV_ACCESS_LOCAL_WRITE);
        if (mr) {
          std::memcpy(mr->translate(sge.addr, 8), &response.atomic_original, 8);
        } else {
          wr.result = IBV_WC_LOC_PROT_ERR;  // the MR went away while the atomic was out
        }
      }
      break;
    case ResponseStatus::RemoteAccessError:
      wr.result = IBV_WC_REM_ACCESS_ERR;
      break;
    case ResponseStatus::RemoteInvalidRequest:
      wr.result = IBV_WC_REM_INV_REQ_ERR;
      break;
    case ResponseStatus::ReceiverNotReady:
      // rnr_retry 7 means retry forever.
      if (qp.attr.rnr_retry != 7 && ++wr.rnr_naks > qp.attr.rnr_retry) {
        wr.result = IBV_WC_RNR_RETRY_EXC_ERR;
        break;
      }
      rewind(qp, index);
      qp.resume_at = now + std::max<Clock::duration>(
                               std::chrono::microseconds(response.rnr_delay_us), kMinRnrDelay);
      return;
    case ResponseStatus::QpNotReady:
      if (!wr.retry_deadline) wr.retry_deadline = now + retry_bound(qp);
      if (now >= *wr.retry_deadline) {
        wr.result = IBV_WC_RETRY_EXC_ERR;
        break;
      }
      rewind(qp, index);
      qp.resume_at = now + kNotReadyDelay;
      return;
  }
  hca.complete_in_order(qp);
}

void on_connection_lost(Hca& hca, uint64_t connection_id) {
  for (auto& [qpn, qp] : hca.qps) {
    for (SendWr& wr : qp->send_queue) {
      if (!wr.transmitted || wr.result) continue;
      if (wr.connection_id == connection_id) {
        wr.result = IBV_WC_RETRY_EXC_ERR;
        hca.complete_in_order(*qp);
      }
      break;  // only the oldest unanswered WR can be the one that fails
    }
  }
}

}  // namespace courier::fake_verbs
