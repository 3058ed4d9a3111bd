// Completion queues, queue pairs and address handles: creation limits, the
// QP state machine as ibv_modify_qp(3) and the IB spec define it, and the
// post/poll operations the inline verbs reach through the ops table.
#include <unistd.h>

#include <cstring>

#include "fake_hca.hpp"
#include "fake_log.hpp"
#include "fake_verbs_api.hpp"

namespace courier::fake_verbs {
namespace {

const char* state_name(ibv_qp_state state) {
  switch (state) {
    case IBV_QPS_RESET:
      return "RESET";
    case IBV_QPS_INIT:
      return "INIT";
    case IBV_QPS_RTR:
      return "RTR";
    case IBV_QPS_RTS:
      return "RTS";
    case IBV_QPS_SQD:
      return "SQD";
    case IBV_QPS_SQE:
      return "SQE";
    case IBV_QPS_ERR:
      return "ERR";
    default:
      return "UNKNOWN";
  }
}

bool owned_here(const Context& context) { return context.hca->owner_pid() == ::getpid(); }

// Resolves an address vector against the local port: RoCE needs a GRH with
// a valid source GID index and a destination GID, InfiniBand a LID.
int check_address(const Hca& hca, const ibv_ah_attr& ah, Destination& destination,
                  const char* verb) {
  const Profile& profile = hca.profile();
  if (ah.port_num != 1)
    return refuse(EINVAL, verb, "ah_attr.port_num %u (the port is 1)", ah.port_num);
  destination = Destination{};
  destination.global = ah.is_global;
  destination.dlid = ah.dlid;
  if (ah.is_global) {
    if (ah.grh.sgid_index >= profile.valid_gids()) {
      return refuse(EINVAL, verb, "grh.sgid_index %u is not a valid local GID (%d valid)",
                    ah.grh.sgid_index, profile.valid_gids());
    }
    destination.sgid_index = ah.grh.sgid_index;
    destination.dgid = ah.grh.dgid;
  }
  if (profile.roce()) {
    if (!ah.is_global) return refuse(EINVAL, verb, "a RoCE port needs is_global = 1 (a GRH)");
    static const ibv_gid zero{};
    if (std::memcmp(&ah.grh.dgid, &zero, sizeof(zero)) == 0) {
      return refuse(EINVAL, verb, "grh.dgid is the zero GID");
    }
    destination.hca_number = number_from_gid(ah.grh.dgid);
  } else {
    if (ah.dlid == 0) return refuse(EINVAL, verb, "an InfiniBand port needs dlid != 0");
    destination.hca_number = number_from_lid(ah.dlid);
  }
  return 0;
}

struct Transition {
  int required;
  int optional;
};

// The attributes a transition needs and may take (IB spec table 10-5,
// ibv_modify_qp(3)); nothing for a transition that does not exist.
std::optional<Transition> transition(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to) {
  const bool rc = type == IBV_QPT_RC;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return Transition{0, 0};
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    return Transition{IBV_QP_PKEY_INDEX | IBV_QP_PORT | (rc ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY),
                      0};
  }
  if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    return Transition{0,
                      IBV_QP_PKEY_INDEX | IBV_QP_PORT | (rc ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY)};
  }
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    if (!rc) return Transition{0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
    return Transition{IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                      IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
  }
  if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    if (!rc) return Transition{IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY};
    return Transition{IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC,
                      IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                          IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE};
  }
  if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
    if (!rc) return Transition{0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
    return Transition{0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
                             IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE};
  }
  return std::nullopt;
}

// Checks the values of the attributes in `mask`; 0 or EINVAL.
int check_values(const Hca& hca, const Qp& qp, const ibv_qp_attr& attr, int mask,
                 Destination& destination) {
  const char* verb = "ibv_modify_qp";
  const Profile& profile = hca.profile();
  if (mask & (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE)) {
    return refuse(EINVAL, verb, "alternate paths / path migration are not modelled");
  }
  if ((mask & IBV_QP_CUR_STATE) && attr.cur_qp_state != qp.state) {
    return refuse(EINVAL, verb, "cur_qp_state %s but QP %u is in %s", state_name(attr.cur_qp_state),
                  qp.qpn(), state_name(qp.state));
  }
  if ((mask & IBV_QP_PORT) && attr.port_num != 1) {
    return refuse(EINVAL, verb, "port_num %u (the device has port 1 only)", attr.port_num);
  }
  const int pkeys = profile.roce() ? 1 : 128;
  if ((mask & IBV_QP_PKEY_INDEX) && attr.pkey_index >= pkeys) {
    return refuse(EINVAL, verb, "pkey_index %u beyond the P_Key table (%d)", attr.pkey_index,
                  pkeys);
  }
  const unsigned qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (attr.qp_access_flags & ~qp_access)) {
    return refuse(EINVAL, verb, "qp_access_flags 0x%x has bits a QP does not take",
                  attr.qp_access_flags);
  }
  if (mask & IBV_QP_AV) {
    if (int error = check_address(hca, attr.ah_attr, destination, verb)) return error;
  }
  if ((mask & IBV_QP_PATH_MTU) && (attr.path_mtu < IBV_MTU_256 || attr.path_mtu > IBV_MTU_4096)) {
    return refuse(EINVAL, verb, "path_mtu %d above the port's active MTU (4096)", attr.path_mtu);
  }
  if ((mask & IBV_QP_DEST_QPN) && attr.dest_qp_num > 0xFFFFFF) {
    return refuse(EINVAL, verb, "dest_qp_num 0x%x is not 24 bits", attr.dest_qp_num);
  }
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > profile.max_qp_rd_atom) {
    return refuse(EINVAL, verb, "max_dest_rd_atomic %u above max_qp_rd_atom %d",
                  attr.max_dest_rd_atomic, profile.max_qp_rd_atom);
  }
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > profile.max_qp_rd_atom) {
    return refuse(EINVAL, verb, "max_rd_atomic %u above max_qp_init_rd_atom %d", attr.max_rd_atomic,
                  profile.max_qp_rd_atom);
  }
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr.min_rnr_timer > 31) {
    return refuse(EINVAL, verb, "min_rnr_timer %u is not 5 bits", attr.min_rnr_timer);
  }
  if ((mask & IBV_QP_TIMEOUT) && attr.timeout > 31) {
    return refuse(EINVAL, verb, "timeout %u is not 5 bits", attr.timeout);
  }
  if ((mask & IBV_QP_RETRY_CNT) && attr.retry_cnt > 7) {
    return refuse(EINVAL, verb, "retry_cnt %u above 7", attr.retry_cnt);
  }
  if ((mask & IBV_QP_RNR_RETRY) && attr.rnr_retry > 7) {
    return refuse(EINVAL, verb, "rnr_retry %u above 7", attr.rnr_retry);
  }
  return 0;
}

void apply_attributes(Qp& qp, const ibv_qp_attr& attr, int mask, const Destination& destination) {
  if (mask & IBV_QP_PKEY_INDEX) qp.attr.pkey_index = attr.pkey_index;
  if (mask & IBV_QP_PORT) qp.attr.port_num = attr.port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) qp.attr.qp_access_flags = attr.qp_access_flags;
  if (mask & IBV_QP_QKEY) qp.attr.qkey = attr.qkey;
  if (mask & IBV_QP_AV) {
    qp.attr.ah_attr = attr.ah_attr;
    qp.destination = destination;
  }
  if (mask & IBV_QP_PATH_MTU) qp.attr.path_mtu = attr.path_mtu;
  if (mask & IBV_QP_DEST_QPN) qp.attr.dest_qp_num = attr.dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) {
    qp.attr.rq_psn = attr.rq_psn & 0xFFFFFF;
    qp.expected_psn = qp.attr.rq_psn;
  }
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) qp.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) qp.attr.min_rnr_timer = attr.min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) qp.attr.timeout = attr.timeout;
  if (mask & IBV_QP_RETRY_CNT) qp.attr.retry_cnt = attr.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp.attr.rnr_retry = attr.rnr_retry;
  if (mask & IBV_QP_SQ_PSN) {
    qp.attr.sq_psn = attr.sq_psn & 0xFFFFFF;
    qp.next_psn = qp.attr.sq_psn;
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp.attr.max_rd_atomic = attr.max_rd_atomic;
}

// RESET: the QP forgets its queues and attributes; no completions.
void reset_queue_pair(Qp& qp) {
  ++qp.generation;
  qp.attr = ibv_qp_attr{};
  qp.destination = Destination{};
  qp.send_queue.clear();
  qp.recv_queue.clear();
  qp.next_to_transmit = 0;
  qp.next_psn = 0;
  qp.expected_psn = 0;
  qp.resume_at = {};
  qp.send_slots_used = 0;
  qp.recv_slots_used = 0;
  qp.unsignaled_retired = 0;
}

// Removes a QP's completions from a CQ (as providers do when a QP is
// destroyed).
void purge_completions(Cq& cq, uint32_t qpn) {
  std::erase_if(cq.entries, [qpn](const CqEntry& entry) { return entry.qp_num == qpn; });
}

void destroy_queue_pair_locked(Hca& hca, Qp& qp) {
  purge_completions(*qp.send_cq, qp.qpn());
  purge_completions(*qp.recv_cq, qp.qpn());
  --qp.send_cq->users;
  --qp.recv_cq->users;
  --qp.pd->users;
  pthread_cond_destroy(&qp.handle.ibv.cond);
  pthread_mutex_destroy(&qp.handle.ibv.mutex);
  hca.qps.erase(qp.qpn());
}

bool opcode_allowed(ibv_qp_type type, ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return type == IBV_QPT_RC;
    default:
      return false;
  }
}

// Checks one send WR and turns it into the queue's form; 0 or the errno
// post_send returns.
int prepare_send(Hca& hca, Qp& qp, const ibv_send_wr& wr, SendWr& out) {
  const char* verb = "ibv_post_send";
  if (!opcode_allowed(qp.type, wr.opcode)) {
    return refuse(EINVAL, verb,
                  "opcode %d on a %s QP is not modelled (RDMA read, send with "
                  "invalidate, memory windows, TSO are not)",
                  wr.opcode, qp.type == IBV_QPT_RC ? "RC" : "UD");
  }
  const bool atomic =
      wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  if (atomic && hca.profile().atomic_cap == IBV_ATOMIC_NONE) {
    // As mlx5's post_send on a device without atomics.
    return refuse(EOPNOTSUPP, verb, "atomic operations are not supported by profile %s",
                  hca.profile().name.c_str());
  }
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > qp.cap.max_send_sge) {
    return refuse(EINVAL, verb, "num_sge %d above the QP's max_send_sge %u", wr.num_sge,
                  qp.cap.max_send_sge);
  }
  const unsigned known_flags =
      IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_FENCE | IBV_SEND_SOLICITED;
  if (wr.send_flags & ~known_flags) {
    return refuse(EINVAL, verb, "send_flags 0x%x are not modelled", wr.send_flags & ~known_flags);
  }
  out.wr_id = wr.wr_id;
  out.opcode = wr.opcode;
  out.signaled = wr.send_flags & IBV_SEND_SIGNALED;
  out.sges.assign(wr.sg_list, wr.sg_list + wr.num_sge);
  if ((wr.send_flags & IBV_SEND_INLINE) && !atomic) {
    uint64_t total = 0;
    for (const ibv_sge& sge : out.sges) total += sge.length;
    if (total > qp.cap.max_inline_data) {
      // mlx5 answers ENOMEM for inline data beyond the QP's limit.
      return refuse(ENOMEM, verb, "%llu inline bytes above the QP's max_inline_data %u",
                    static_cast<unsigned long long>(total), qp.cap.max_inline_data);
    }
    std::vector<std::byte> data;
    data.reserve(total);
    for (const ibv_sge& sge : out.sges) {
      const auto* source = reinterpret_cast<const std::byte*>(static_cast<uintptr_t>(sge.addr));
      data.insert(data.end(), source, source + sge.length);
    }
    out.inline_data = std::move(data);
  }
  if (qp.type == IBV_QPT_UD) {
    if (!wr.wr.ud.ah) return refuse(EINVAL, verb, "a UD send needs wr.ud.ah");
    out.ud_destination = ah_of(wr.wr.ud.ah)->destination;
    out.ud_remote_qpn = wr.wr.ud.remote_qpn;
    // A remote Q_Key with the high bit set means "use the QP's own Q_Key".
    out.ud_remote_qkey = (wr.wr.ud.remote_qkey & 0x80000000u) ? qp.attr.qkey : wr.wr.ud.remote_qkey;
  } else if (atomic) {
    out.remote_addr = wr.wr.atomic.remote_addr;
    out.rkey = wr.wr.atomic.rkey;
    out.compare_add = wr.wr.atomic.compare_add;
    out.swap = wr.wr.atomic.swap;
  } else if (wr.opcode == IBV_WR_RDMA_WRITE || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    out.remote_addr = wr.wr.rdma.remote_addr;
    out.rkey = wr.wr.rdma.rkey;
  }
  out.imm = wr.imm_data;
  out.serial = qp.next_serial++;
  return 0;
}

}  // namespace

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp& qp = *qp_of(ibqp);
  if (!owned_here(*qp.context)) {
    *bad_wr = wr;
    return refuse(EINVAL, "ibv_post_send", "QP of a context opened before fork()");
  }
  Hca& hca = *qp.context->hca;
  {
    std::lock_guard lock(hca.mutex);
    for (ibv_send_wr* current = wr; current; current = current->next) {
      if (qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_ERR) {
        *bad_wr = current;
        return refuse(EINVAL, "ibv_post_send", "QP %u is in %s (post_send needs RTS)", qp.qpn(),
                      state_name(qp.state));
      }
      if (qp.send_slots_used >= qp.cap.max_send_wr) {
        *bad_wr = current;
        return ENOMEM;  // the send queue is full: a normal condition, no message
      }
      SendWr prepared;
      if (int error = prepare_send(hca, qp, *current, prepared)) {
        *bad_wr = current;
        return error;
      }
      ++qp.send_slots_used;
      if (qp.state == IBV_QPS_ERR) {
        hca.complete_send(qp, prepared, IBV_WC_WR_FLUSH_ERR);
      } else {
        qp.send_queue.push_back(std::move(prepared));
      }
    }
  }
  hca.ring();
  return 0;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp& qp = *qp_of(ibqp);
  if (!owned_here(*qp.context)) {
    *bad_wr = wr;
    return refuse(EINVAL, "ibv_post_recv", "QP of a context opened before fork()");
  }
  Hca& hca = *qp.context->hca;
  std::lock_guard lock(hca.mutex);
  for (ibv_recv_wr* current = wr; current; current = current->next) {
    if (qp.state == IBV_QPS_RESET) {
      *bad_wr = current;
      return refuse(EINVAL, "ibv_post_recv", "QP %u is in RESET", qp.qpn());
    }
    if (current->num_sge < 0 || static_cast<uint32_t>(current->num_sge) > qp.cap.max_recv_sge) {
      *bad_wr = current;
      return refuse(EINVAL, "ibv_post_recv", "num_sge %d above the QP's max_recv_sge %u",
                    current->num_sge, qp.cap.max_recv_sge);
    }
    if (qp.recv_slots_used >= qp.cap.max_recv_wr) {
      *bad_wr = current;
      return ENOMEM;
    }
    RecvWr recv;
    recv.wr_id = current->wr_id;
    recv.sges.assign(current->sg_list, current->sg_list + current->num_sge);
    ++qp.recv_slots_used;
    if (qp.state == IBV_QPS_ERR) {
      ibv_wc wc{};
      wc.status = IBV_WC_WR_FLUSH_ERR;
      wc.opcode = IBV_WC_RECV;
      hca.complete_recv(qp, recv, wc);
    } else {
      qp.recv_queue.push_back(std::move(recv));
    }
  }
  return 0;
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq& cq = *cq_of(ibcq);
  if (!owned_here(*cq.context)) {
    return -refuse(EINVAL, "ibv_poll_cq", "CQ of a context opened before fork()");
  }
  Hca& hca = *cq.context->hca;
  std::lock_guard lock(hca.mutex);
  if (cq.overrun) return -1;  // reported on stderr when it happened
  if (num_entries < 0) return -refuse(EINVAL, "ibv_poll_cq", "num_entries %d", num_entries);
  int polled = 0;
  while (polled < num_entries && !cq.entries.empty()) {
    const CqEntry entry = cq.entries.front();
    cq.entries.pop_front();
    wc[polled++] = entry.wc;
    const auto found = hca.qps.find(entry.qp_num);
    if (found == hca.qps.end() || found->second->generation != entry.qp_generation) continue;
    Qp& qp = *found->second;
    qp.send_slots_used -= std::min(qp.send_slots_used, entry.send_slots);
    qp.recv_slots_used -= std::min(qp.recv_slots_used, entry.recv_slots);
  }
  return polled;
}

int req_notify_cq(ibv_cq*, int) {
  return refuse(ENOSYS, "ibv_req_notify_cq", "completion events are not modelled; poll the CQ");
}

void destroy_context_objects(Hca& hca, Context& context) {
  for (auto it = hca.qps.begin(); it != hca.qps.end();) {
    Qp& qp = *(it++)->second;
    if (qp.context == &context) destroy_queue_pair_locked(hca, qp);
  }
  std::erase_if(hca.ahs, [&](auto& entry) {
    if (entry.second->pd->context != &context) return false;
    --entry.second->pd->users;
    return true;
  });
  for (auto it = hca.mrs.begin(); it != hca.mrs.end();) {
    Mr& mr = *(it++)->second;
    if (mr.pd->context == &context) release_mr_locked(hca, mr);
  }
  std::erase_if(hca.cqs, [&](auto& entry) { return entry.second->context == &context; });
  std::erase_if(hca.pds, [&](auto& entry) { return entry.second->context == &context; });
}

}  // namespace courier::fake_verbs

using namespace courier::fake_verbs;

extern "C" {

ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  const char* verb = "ibv_create_cq";
  Context* context = context_of(ctx);
  if (!context || !owned_here(*context)) {
    refuse_errno(EINVAL, verb, "not a live context of the fake device");
    return nullptr;
  }
  Hca& hca = *context->hca;
  if (channel) {
    refuse_errno(EINVAL, verb, "completion channels are not modelled");
    return nullptr;
  }
  if (cqe < 1 || cqe > hca.profile().max_cqe) {
    refuse_errno(EINVAL, verb, "cqe %d outside 1..%d", cqe, hca.profile().max_cqe);
    return nullptr;
  }
  if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) {
    refuse_errno(EINVAL, verb, "comp_vector %d (the device has %d)", comp_vector,
                 ctx->num_comp_vectors);
    return nullptr;
  }
  auto cq = std::make_unique<Cq>();
  cq->handle.impl = cq.get();
  cq->context = context;
  cq->capacity = static_cast<size_t>(cqe);
  ibv_cq& ibv = cq->handle.ibv;
  ibv.context = ctx;
  ibv.cq_context = cq_context;
  ibv.cqe = cqe;
  pthread_mutex_init(&ibv.mutex, nullptr);
  pthread_cond_init(&ibv.cond, nullptr);
  std::lock_guard lock(hca.mutex);
  Cq* raw = cq.get();
  hca.cqs[raw] = std::move(cq);
  return &raw->handle.ibv;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  Cq* cq = cq_of(ibcq);
  Hca& hca = *cq->context->hca;
  std::lock_guard lock(hca.mutex);
  if (cq->users > 0) return refuse(EBUSY, "ibv_destroy_cq", "%d QPs still use the CQ", cq->users);
  pthread_cond_destroy(&ibcq->cond);
  pthread_mutex_destroy(&ibcq->mutex);
  hca.cqs.erase(cq);
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* ibpd, ibv_qp_init_attr* init) {
  const char* verb = "ibv_create_qp";
  Pd* pd = pd_of(ibpd);
  if (!owned_here(*pd->context)) {
    refuse_errno(EINVAL, verb, "PD of a context opened before fork()");
    return nullptr;
  }
  Hca& hca = *pd->context->hca;
  const Profile& profile = hca.profile();
  if (init->qp_type != IBV_QPT_RC && init->qp_type != IBV_QPT_UD) {
    refuse_errno(EINVAL, verb, "qp_type %d is not modelled (RC and UD are)", init->qp_type);
    return nullptr;
  }
  if (init->srq) {
    refuse_errno(EINVAL, verb, "shared receive queues are not modelled");
    return nullptr;
  }
  if (!init->send_cq || !init->recv_cq || cq_of(init->send_cq)->context != pd->context ||
      cq_of(init->recv_cq)->context != pd->context) {
    refuse_errno(EINVAL, verb, "send_cq and recv_cq must be CQs of the PD's context");
    return nullptr;
  }
  const ibv_qp_cap& cap = init->cap;
  const auto max_wr = static_cast<uint32_t>(profile.max_qp_wr);
  const auto max_sge = static_cast<uint32_t>(profile.max_sge);
  if (cap.max_send_wr > max_wr || cap.max_recv_wr > max_wr || cap.max_send_sge > max_sge ||
      cap.max_recv_sge > max_sge || cap.max_inline_data > profile.max_inline_data) {
    refuse_errno(EINVAL, verb,
                 "cap (send_wr %u, recv_wr %u, send_sge %u, recv_sge %u, inline %u) above the "
                 "device's (wr %u, sge %u, inline %u)",
                 cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
                 cap.max_inline_data, max_wr, max_sge, profile.max_inline_data);
    return nullptr;
  }
  std::lock_guard lock(hca.mutex);
  if (hca.qps.size() >= static_cast<size_t>(profile.max_qp)) {
    refuse_errno(ENOMEM, verb, "max_qp %d reached", profile.max_qp);
    return nullptr;
  }
  auto qp = std::make_unique<Qp>();
  qp->handle.impl = qp.get();
  qp->context = pd->context;
  qp->pd = pd;
  qp->send_cq = cq_of(init->send_cq);
  qp->recv_cq = cq_of(init->recv_cq);
  qp->type = init->qp_type;
  qp->cap = cap;
  qp->sq_sig_all = init->sq_sig_all != 0;
  ibv_qp& ibv = qp->handle.ibv;
  ibv.context = ibpd->context;
  ibv.qp_context = init->qp_context;
  ibv.pd = ibpd;
  ibv.send_cq = init->send_cq;
  ibv.recv_cq = init->recv_cq;
  ibv.qp_num = hca.fresh_qpn();
  ibv.handle = ibv.qp_num;
  ibv.state = IBV_QPS_RESET;
  ibv.qp_type = init->qp_type;
  pthread_mutex_init(&ibv.mutex, nullptr);
  pthread_cond_init(&ibv.cond, nullptr);
  ++pd->users;
  ++qp->send_cq->users;
  ++qp->recv_cq->users;
  Qp* raw = qp.get();
  hca.qps[ibv.qp_num] = std::move(qp);
  return &raw->handle.ibv;
}

int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  const char* verb = "ibv_modify_qp";
  Qp& qp = *qp_of(ibqp);
  if (!owned_here(*qp.context)) return refuse(EINVAL, verb, "QP of a context opened before fork()");
  Hca& hca = *qp.context->hca;
  {
    std::lock_guard lock(hca.mutex);
    const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : qp.state;
    const auto allowed = transition(qp.type, qp.state, next);
    if (!allowed) {
      return refuse(EINVAL, verb, "QP %u cannot go from %s to %s", qp.qpn(), state_name(qp.state),
                    state_name(next));
    }
    const int missing = allowed->required & ~mask;
    if (missing) {
      return refuse(EINVAL, verb, "QP %u %s->%s lacks required attributes (mask 0x%x)", qp.qpn(),
                    state_name(qp.state), state_name(next), missing);
    }
    const int extra = mask & ~(allowed->required | allowed->optional | IBV_QP_STATE);
    if (extra) {
      return refuse(EINVAL, verb, "QP %u %s->%s does not take attributes (mask 0x%x)", qp.qpn(),
                    state_name(qp.state), state_name(next), extra);
    }
    Destination destination;
    if (int error = check_values(hca, qp, *attr, mask, destination)) return error;
    if (next == IBV_QPS_RESET) {
      reset_queue_pair(qp);
    } else {
      apply_attributes(qp, *attr, mask, destination);
    }
    qp.state = next;
    ibqp->state = next;
    if (next == IBV_QPS_ERR) hca.enter_error(qp);
  }
  hca.ring();
  return 0;
}

int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  Qp& qp = *qp_of(ibqp);
  Hca& hca = *qp.context->hca;
  std::lock_guard lock(hca.mutex);
  *attr = qp.attr;
  attr->qp_state = qp.state;
  attr->cur_qp_state = qp.state;
  attr->cap = qp.cap;
  if (init) {
    *init = ibv_qp_init_attr{};
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->cap = qp.cap;
    init->qp_type = qp.type;
    init->sq_sig_all = qp.sq_sig_all;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
  Qp& qp = *qp_of(ibqp);
  Hca& hca = *qp.context->hca;
  std::lock_guard lock(hca.mutex);
  destroy_queue_pair_locked(hca, qp);
  return 0;
}

ibv_ah* ibv_create_ah(ibv_pd* ibpd, ibv_ah_attr* attr) {
  Pd* pd = pd_of(ibpd);
  if (!owned_here(*pd->context)) {
    refuse_errno(EINVAL, "ibv_create_ah", "PD of a context opened before fork()");
    return nullptr;
  }
  Hca& hca = *pd->context->hca;
  auto ah = std::make_unique<Ah>();
  if (int error = check_address(hca, *attr, ah->destination, "ibv_create_ah")) {
    errno = error;
    return nullptr;
  }
  ah->handle.impl = ah.get();
  ah->pd = pd;
  ah->handle.ibv.context = ibpd->context;
  ah->handle.ibv.pd = ibpd;
  std::lock_guard lock(hca.mutex);
  ++pd->users;
  Ah* raw = ah.get();
  hca.ahs[raw] = std::move(ah);
  return &raw->handle.ibv;
}

int ibv_destroy_ah(ibv_ah* ibah) {
  Ah* ah = ah_of(ibah);
  Hca& hca = *ah->pd->context->hca;
  std::lock_guard lock(hca.mutex);
  --ah->pd->users;
  hca.ahs.erase(ah);
  return 0;
}

}  // extern "C"
