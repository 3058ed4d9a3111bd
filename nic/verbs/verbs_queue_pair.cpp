#include "verbs_queue_pair.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "verbs_device.hpp"
#include "verbs_error.hpp"

namespace courier::verbs {

int CompletionQueue::create(const Device& device, int entries,
                            std::unique_ptr<CompletionQueue>* out) {
  if (entries > device.info().max_cqe) {
    return set_error(-EINVAL, "a completion queue of %d entries exceeds %s's max_cqe %d", entries,
                     device.info().name.c_str(), device.info().max_cqe);
  }
  std::unique_ptr<CompletionQueue> cq(new (std::nothrow) CompletionQueue);
  if (!cq) return set_error(-ENOMEM, "completion queue: out of memory");
  errno = 0;
  cq->cq_ = ibv_create_cq(device.context(), entries, nullptr, nullptr, 0);
  if (!cq->cq_) {
    const int code = errno ? errno : ENOMEM;
    return set_error(-code, "ibv_create_cq(%d entries) on %s failed: %s", entries,
                     device.info().name.c_str(), std::strerror(code));
  }
  *out = std::move(cq);
  return 0;
}

CompletionQueue::~CompletionQueue() {
  if (cq_) ibv_destroy_cq(cq_);
}

int AddressHandle::create(const Device& device, const ibv_ah_attr& attr,
                          std::unique_ptr<AddressHandle>* out) {
  std::unique_ptr<AddressHandle> ah(new (std::nothrow) AddressHandle);
  if (!ah) return set_error(-ENOMEM, "address handle: out of memory");
  ibv_ah_attr copy = attr;
  errno = 0;
  ah->ah_ = ibv_create_ah(device.pd(), &copy);
  if (!ah->ah_) {
    const int code = errno ? errno : EINVAL;
    return set_error(-code, "ibv_create_ah on %s failed: %s", device.info().name.c_str(),
                     std::strerror(code));
  }
  *out = std::move(ah);
  return 0;
}

AddressHandle::~AddressHandle() {
  if (ah_) ibv_destroy_ah(ah_);
}

int QueuePair::create_rc(const Device& device, ibv_cq* send_cq, ibv_cq* recv_cq,
                         uint32_t send_depth, uint32_t recv_depth,
                         std::unique_ptr<QueuePair>* out) {
  std::unique_ptr<QueuePair> qp(new (std::nothrow) QueuePair);
  if (!qp) return set_error(-ENOMEM, "queue pair: out of memory");
  ibv_qp_init_attr init{};
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = send_depth;
  init.cap.max_recv_wr = recv_depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.sq_sig_all = 0;  // every work request Courier posts asks for its completion itself
  errno = 0;
  qp->qp_ = ibv_create_qp(device.pd(), &init);
  if (!qp->qp_) {
    const int code = errno ? errno : ENOMEM;
    return set_error(-code, "ibv_create_qp(RC, %u send / %u receive WRs) on %s failed: %s",
                     send_depth, recv_depth, device.info().name.c_str(), std::strerror(code));
  }
  qp->send_depth_ = send_depth;
  *out = std::move(qp);
  return 0;
}

int QueuePair::create_ud(const Device& device, ibv_cq* cq, uint32_t depth,
                         std::unique_ptr<QueuePair>* out) {
  std::unique_ptr<QueuePair> qp(new (std::nothrow) QueuePair);
  if (!qp) return set_error(-ENOMEM, "queue pair: out of memory");
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.sq_sig_all = 1;
  errno = 0;
  qp->qp_ = ibv_create_qp(device.pd(), &init);
  if (!qp->qp_) {
    const int code = errno ? errno : ENOMEM;
    return set_error(-code, "ibv_create_qp(UD, %u WRs) on %s failed: %s", depth,
                     device.info().name.c_str(), std::strerror(code));
  }
  qp->send_depth_ = depth;
  *out = std::move(qp);
  return 0;
}

QueuePair::~QueuePair() {
  if (qp_) ibv_destroy_qp(qp_);
}

int QueuePair::modify(ibv_qp_attr* attr, int mask, const char* transition) {
  const int rc = ibv_modify_qp(qp_, attr, mask);
  if (rc != 0) {
    return set_error(-(rc > 0 ? rc : (errno ? errno : EINVAL)), "queue pair 0x%x %s: %s", qpn(),
                     transition, describe_verbs_error("ibv_modify_qp", rc).c_str());
  }
  return 0;
}

int QueuePair::connect_rc(const EndpointAddress& local, const EndpointAddress& remote,
                          uint32_t remote_qpn, uint32_t remote_psn, uint32_t local_psn,
                          uint8_t dest_rd_atomic, uint8_t rd_atomic,
                          const QueuePairTuning& tuning) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = local.port;
  attr.qp_access_flags =
      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  int rc = modify(&attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                  "RESET->INIT");
  if (rc != 0) return rc;

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  // Both ends must agree on the path MTU: the smaller of the two ports'.
  attr.path_mtu = static_cast<ibv_mtu>(std::min(local.mtu, remote.mtu));
  attr.dest_qp_num = remote_qpn;
  attr.rq_psn = remote_psn;
  attr.max_dest_rd_atomic = dest_rd_atomic;
  attr.min_rnr_timer = tuning.min_rnr_timer;
  attr.ah_attr = make_ah_attr(local, remote, tuning.traffic_class, tuning.service_level);
  rc = modify(&attr,
              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
              "INIT->RTR");
  if (rc != 0) return rc;

  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = tuning.timeout;
  attr.retry_cnt = tuning.retry_cnt;
  attr.rnr_retry = tuning.rnr_retry;
  attr.sq_psn = local_psn;
  attr.max_rd_atomic = rd_atomic;
  return modify(&attr,
                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                "RTR->RTS");
}

int QueuePair::activate_ud(uint8_t port, uint32_t qkey) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  attr.qkey = qkey;
  int rc = modify(&attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
                  "RESET->INIT (UD)");
  if (rc != 0) return rc;
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  rc = modify(&attr, IBV_QP_STATE, "INIT->RTR (UD)");
  if (rc != 0) return rc;
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  return modify(&attr, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTR->RTS (UD)");
}

}  // namespace courier::verbs
