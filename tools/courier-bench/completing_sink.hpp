// A transport that completes every write the moment it is posted, so a FIFO
// benchmark measures the FIFO and the proxy alone. An optional `on_write`
// sees each write first (for checking what arrived).
#pragma once

#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/proxy/proxy_transport.hpp"

namespace courier::bench {

class CompletingSink final : public ProxyTransport {
 public:
  using OnWrite = std::function<void(const WriteRequest&)>;
  explicit CompletingSink(uint32_t capacity, OnWrite on_write = {})
      : done_(capacity), on_write_(std::move(on_write)) {}
  uint32_t caps() const override {
    return COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_ORDERED_WRITES;
  }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string*) override {
    if (count_ == done_.size()) return -EAGAIN;
    if (on_write_) on_write_(write);
    done_[count_++] = cookie;
    return COURIER_OK;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    uint32_t n = 0;
    while (n < max && taken_ < count_) {
      out[n] = {};
      out[n].kind = COURIER_NIC_COMP_TX;
      out[n].cookie = done_[taken_++];
      ++n;
    }
    if (taken_ == count_) taken_ = count_ = 0;
    return static_cast<int>(n);
  }
  std::string last_error() const override { return ""; }

 private:
  std::vector<uint64_t> done_;
  size_t count_ = 0;
  size_t taken_ = 0;
  OnWrite on_write_;
};

}  // namespace courier::bench
