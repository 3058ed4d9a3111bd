// Completion queues, address handles and queue pairs, each owning its verbs
// object, with the queue-pair state machine spelled out once:
//   RC: RESET -> INIT (port, access) -> RTR (peer's address, QPN, PSN)
//       -> RTS (timeouts, retries, our PSN)
//   UD: RESET -> INIT (port, qkey) -> RTR -> RTS (PSN); used only for the
//       connection handshake (verbs_endpoint_connect.cpp).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "verbs_address.hpp"

namespace courier::verbs {

class Device;

class CompletionQueue {
 public:
  static int create(const Device& device, int entries, std::unique_ptr<CompletionQueue>* out);
  ~CompletionQueue();
  ibv_cq* get() const { return cq_; }

 private:
  CompletionQueue() = default;
  ibv_cq* cq_ = nullptr;
};

class AddressHandle {
 public:
  static int create(const Device& device, const ibv_ah_attr& attr,
                    std::unique_ptr<AddressHandle>* out);
  ~AddressHandle();
  ibv_ah* get() const { return ah_; }

 private:
  AddressHandle() = default;
  ibv_ah* ah_ = nullptr;
};

// Transport timing of RC queue pairs (COURIER_IB_TIMEOUT, COURIER_IB_RETRY_CNT,
// COURIER_IB_TC, COURIER_IB_SL).
struct QueuePairTuning {
  uint8_t timeout = 20;  // local ACK timeout: 4.096 us * 2^timeout (~4.3 s)
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;       // 7: retry forever while the receiver has no buffer
  uint8_t min_rnr_timer = 12;  // 0.64 ms
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
};

class QueuePair {
 public:
  // send_depth / recv_depth: work requests the queues hold.
  static int create_rc(const Device& device, ibv_cq* send_cq, ibv_cq* recv_cq, uint32_t send_depth,
                       uint32_t recv_depth, std::unique_ptr<QueuePair>* out);
  static int create_ud(const Device& device, ibv_cq* cq, uint32_t depth,
                       std::unique_ptr<QueuePair>* out);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  ibv_qp* get() const { return qp_; }
  uint32_t qpn() const { return qp_->qp_num; }
  uint32_t send_depth() const { return send_depth_; }

  // RC: RESET -> INIT -> RTR -> RTS towards `remote_qpn` of `remote`.
  // `dest_rd_atomic`: atomics the peer may have in flight here (RTR);
  // `rd_atomic`: atomics we may have in flight there (RTS).
  int connect_rc(const EndpointAddress& local, const EndpointAddress& remote, uint32_t remote_qpn,
                 uint32_t remote_psn, uint32_t local_psn, uint8_t dest_rd_atomic, uint8_t rd_atomic,
                 const QueuePairTuning& tuning);
  // UD: RESET -> INIT -> RTR -> RTS with `qkey`.
  int activate_ud(uint8_t port, uint32_t qkey);

 private:
  QueuePair() = default;
  int modify(ibv_qp_attr* attr, int mask, const char* transition);
  ibv_qp* qp_ = nullptr;
  uint32_t send_depth_ = 0;
};

}  // namespace courier::verbs
