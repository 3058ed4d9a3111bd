// An endpoint's completion queue: what poll() hands to the core.
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstdint>
#include <deque>

namespace courier::skeleton {

// TX completions (a write finished, well or not) and RX_IMM completions (a
// peer's write with immediate data landed here), in the order they happened.
// A NIC has this queue in hardware (verbs: the CQ) and the backend only reads
// it; the skeleton fills its own.
class CompletionQueue {
 public:
  // At most `rx_capacity` RX_IMM completions wait here (the endpoint's
  // rx_depth); beyond that the target stops reading its streams, and the
  // initiators wait, as a NIC without receive buffers makes them wait.
  explicit CompletionQueue(uint32_t rx_capacity) : rx_capacity_(rx_capacity) {}

  void push_tx(uint32_t peer, uint64_t cookie, int status) {
    queue_.push_back({COURIER_NIC_COMP_TX, status, peer, 0, cookie, 0, 0});
  }
  void push_rx_imm(uint32_t peer, uint32_t imm, uint64_t length) {
    queue_.push_back({COURIER_NIC_COMP_RX_IMM, COURIER_OK, peer, 0, 0, imm, length});
    ++rx_waiting_;
  }
  bool rx_full() const { return rx_waiting_ >= rx_capacity_; }

  // Moves up to `max` completions into `out`; returns how many, and in
  // *tx_taken how many of them were TX completions.
  uint32_t pop(courier_nic_completion_v1* out, uint32_t max, uint32_t* tx_taken) {
    uint32_t taken = 0;
    *tx_taken = 0;
    while (taken < max && !queue_.empty()) {
      const courier_nic_completion_v1& next = queue_.front();
      if (next.kind == COURIER_NIC_COMP_TX) {
        ++*tx_taken;
      } else {
        --rx_waiting_;
      }
      out[taken++] = next;
      queue_.pop_front();
    }
    return taken;
  }

 private:
  std::deque<courier_nic_completion_v1> queue_;
  uint32_t rx_capacity_;
  uint32_t rx_waiting_ = 0;
};

}  // namespace courier::skeleton
