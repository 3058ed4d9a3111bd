// One Courier NIC endpoint over libfabric: the object behind the plugin
// ABI's ep_* / mr_* / post_write / poll entries (courier/abi/nic_v1.h).
//
// Split by responsibility like a libfabric provider:
//   ofi_ep.cpp   opening, naming, connecting, memory registration
//   ofi_rma.cpp  post_write (fi_write / fi_writedata)
//   ofi_atomic.cpp post_atomic (fi_atomic / fi_fetch_atomic / fi_compare_atomic)
//   ofi_cq.cpp   poll (completion queue -> courier_nic_completion_v1)
//
// Threading: one thread drives an endpoint at a time (the ABI's rule); the
// endpoint has no locks and shares nothing with other endpoints.
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ofi_context.hpp"
#include "ofi_fabric.hpp"
#include "ofi_info.hpp"
#include "ofi_mr.hpp"

namespace courier::ofi {

struct EndpointOptions {
  uint32_t tx_depth = 64;  // writes in flight (size of the context pool)
  uint32_t rx_depth = 64;  // immediate-data completions to buffer
  // The write watchdog: a write without any completion after this long is
  // reported as failed (-ETIMEDOUT). Some providers lose writes the target
  // rejects (shm 1.17 drops a write with a bad key and, under delivery-
  // complete, never completes it); without the watchdog the caller would
  // wait forever. 0 turns it off.
  uint32_t write_timeout_ms = 30000;
  // Open for atomics (COURIER_NIC_EP_ATOMICS): the profile must come from
  // probe_atomic_provider with atomic_ops filled in.
  bool atomics = false;
};

// CLOCK_MONOTONIC_COARSE in milliseconds: a few nanoseconds through the vDSO,
// precise enough for a watchdog.
uint64_t coarse_now_ms();

class Endpoint {
 public:
  static int open(const ProviderProfile& profile, const EndpointOptions& options,
                  std::unique_ptr<Endpoint>* out);

  int name(void* buffer, size_t* len) const;
  // Installs the peer table once: names[i * stride] is rank i's name.
  int connect(uint32_t num_peers, const void* names, size_t stride);

  int register_memory(void* addr, size_t len, uint32_t mem_kind, std::unique_ptr<MemoryRegion>* out,
                      courier_nic_rkey_v1* rkey);
  // Closes a region this endpoint registered and frees it.
  int deregister_memory(MemoryRegion* region);
  // Regions registered and not yet deregistered (they pin the domain open).
  uint32_t registered_regions() const { return registered_regions_; }

  int post_write(const courier_nic_write_v1& write);
  int post_atomic(const courier_nic_atomic_v1& atomic);
  int poll(courier_nic_completion_v1* out, uint32_t max);

 private:
  Endpoint() = default;

  // Under FI_RX_CQ_DATA: posts a receive for every free receive context.
  // Failures leave contexts free; the next poll() tries again.
  int replenish_receives();
  uint32_t translate(const fi_cq_data_entry& entry, fi_addr_t source,
                     courier_nic_completion_v1* out);
  uint32_t translate_error(courier_nic_completion_v1* out);
  // Reports one write older than the watchdog timeout (0 or 1 returned).
  uint32_t expire_writes(courier_nic_completion_v1* out, uint32_t max);
  uint32_t rank_of(fi_addr_t address) const;

  EndpointStack stack_;
  ContextPool writes_;            // one context per write or atomic in flight (tx_depth)
  ContextPool receives_;          // posted receives, only under FI_RX_CQ_DATA (rx_depth)
  std::vector<fi_addr_t> peers_;  // rank -> libfabric address
  bool peers_are_ranks_ = false;  // peers_[i] == i (FI_AV_TABLE in rank order)

  // Copied from the provider profile so the endpoint outlives the backend.
  bool source_ = false;
  bool rx_cq_data_ = false;
  bool length_in_data_ = false;      // sender rank and length ride in the CQ data's upper half
  uint32_t self_rank_ = UINT32_MAX;  // under length_in_data_: set by connect()
  uint64_t mr_mode_ = 0;
  uint32_t mem_kinds_ = COURIER_MEM_HOST;  // COURIER_MEM_* register_memory accepts
  uint64_t imm_mask_ = 0;
  uint64_t max_msg_size_ = 0;

  uint32_t write_timeout_ms_ = 0;      // 0: no watchdog
  uint32_t watchdog_interval_ms_ = 0;  // time between two scans
  uint32_t watchdog_scan_limit_ = 0;   // scans a write may survive
  uint64_t last_watchdog_scan_ms_ = 0;
  uint32_t watchdog_resume_ = 0;  // where a scan that expired a write goes on; 0: none under way
  std::string provider_name_;

  RequestedKeys requested_keys_;  // this endpoint's domain's (ofi_mr.hpp)
  uint32_t registered_regions_ = 0;

  // Atomics (endpoints opened with EndpointOptions::atomics only).
  bool atomics_ = false;
  uint32_t atomic_ops_ = 0;                 // COURIER_NIC_ATOMIC_* the provider validated
  uint32_t max_in_flight_for_atomics_ = 0;  // 0: no limit (ProviderProfile)
  // The operand and compare value of each atomic in flight, two words per
  // write context (indexed like writes_). libfabric reads them from memory
  // that must be registered under FI_MR_LOCAL, and may read them after the
  // post returns, so they live here until the completion.
  std::vector<uint64_t> operands_;
  std::unique_ptr<MemoryRegion> operands_mr_;  // after operands_ and stack_: closed first
};

}  // namespace courier::ofi
