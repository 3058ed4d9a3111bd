#include "host_ep_timeline.hpp"

#include <algorithm>
#include <cstdio>

namespace courier::host_gpu {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void EpTimeline::record(const std::string& kernel, uint64_t total_ns, uint64_t waited_ns) {
  if (!on_) return;
  std::lock_guard<std::mutex> guard(lock_);
  auto [it, added] = samples_.try_emplace(kernel);
  if (added) order_.push_back(kernel);
  it->second.total_us.push_back(static_cast<double>(total_ns) / 1e3);
  it->second.waited_us.push_back(static_cast<double>(waited_ns) / 1e3);
}

std::string EpTimeline::summary() const {
  std::lock_guard<std::mutex> guard(lock_);
  if (order_.empty()) return {};
  std::string text =
      "gpu-host EP timeline (COURIER_HOST_EP_TIMELINE=1), wall time per kernel and the part "
      "spent waiting for peers' signals and this rank's own WRITEs:\n";
  for (const std::string& kernel : order_) {
    const Samples& s = samples_.at(kernel);
    std::vector<double> worked(s.total_us.size());
    for (size_t i = 0; i < worked.size(); ++i) worked[i] = s.total_us[i] - s.waited_us[i];
    char line[256];
    std::snprintf(line, sizeof line,
                  "  %-24s %6zu calls  median %9.1f us  waiting %9.1f us  working %9.1f us\n",
                  kernel.c_str(), s.total_us.size(), median(s.total_us), median(s.waited_us),
                  median(worked));
    text += line;
  }
  return text;
}

}  // namespace courier::host_gpu
