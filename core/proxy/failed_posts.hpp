// TX completions a transport decorator makes up for posts it accepted and
// that failed later (retries exhausted, a held-back post refused). poll()
// hands them out one at a time, so that last_error() describes exactly the
// failure it just returned.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "courier/abi/nic_v1.h"

namespace courier {

class FailedPosts {
 public:
  void add(uint64_t cookie, int status, std::string why) {
    courier_nic_completion_v1 c{};
    c.kind = COURIER_NIC_COMP_TX;
    c.cookie = cookie;
    c.status = status;
    queue_.emplace_back(c, std::move(why));
  }

  // At the start of poll(): fills out[0] and returns 1 when a failure waits.
  int take(courier_nic_completion_v1* out, uint32_t max) {
    last_.clear();
    if (queue_.empty() || max == 0) return 0;
    out[0] = queue_.front().first;
    last_ = std::move(queue_.front().second);
    queue_.pop_front();
    return 1;
  }

  // Why the failure the last take() returned failed; empty when it returned none.
  const std::string& last_error() const { return last_; }
  bool empty() const { return queue_.empty(); }

 private:
  std::deque<std::pair<courier_nic_completion_v1, std::string>> queue_;
  std::string last_;
};

}  // namespace courier
