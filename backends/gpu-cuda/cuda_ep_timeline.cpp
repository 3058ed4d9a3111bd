#include "cuda_ep_timeline.hpp"

#include <algorithm>
#include <cstdio>

namespace courier::cuda_gpu {

EpTimeline::~EpTimeline() {
  const std::string text = summary();
  if (!text.empty()) std::fputs(text.c_str(), stderr);
  for (auto& [label, e] : open_) free_.push_back(e);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EpTimeline::event() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  return cudaEventCreate(&e) == cudaSuccess ? e : nullptr;
}

void EpTimeline::begin(cudaStream_t stream) {
  if (!on_) return;
  std::lock_guard<std::mutex> guard(lock_);
  if (!open_.empty()) return;
  cudaEvent_t e = event();
  if (e == nullptr || cudaEventRecord(e, stream) != cudaSuccess) return;
  open_.emplace_back("", e);
}

void EpTimeline::mark(cudaStream_t stream, const std::string& label) {
  if (!on_) return;
  std::lock_guard<std::mutex> guard(lock_);
  if (open_.empty()) return;
  cudaEvent_t e = event();
  if (e == nullptr || cudaEventRecord(e, stream) != cudaSuccess) return;
  open_.emplace_back(label, e);
}

void EpTimeline::synced() {
  if (!on_) return;
  std::lock_guard<std::mutex> guard(lock_);
  if (open_.size() < 2) return;
  std::string call;
  for (size_t i = 1; i < open_.size(); ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, open_[i - 1].second, open_[i].second) != cudaSuccess) continue;
    const std::string& label = open_[i].first;
    if (!us_.count(label)) order_.push_back(label);
    us_[label].push_back(ms * 1000.0f);
    if (label.find('.') == std::string::npos) call += (call.empty() ? "" : "+") + label;
  }
  float ms = 0;
  if (cudaEventElapsedTime(&ms, open_.front().second, open_.back().second) == cudaSuccess) {
    const std::string label = "call " + call;
    if (!us_.count(label)) order_.push_back(label);
    us_[label].push_back(ms * 1000.0f);
  }
  for (auto& [label, e] : open_) free_.push_back(e);
  open_.clear();
}

std::string EpTimeline::summary() const {
  std::lock_guard<std::mutex> guard(lock_);
  if (order_.empty()) return {};
  std::string text = "gpu-cuda EP timeline (COURIER_CUDA_EP_TIMELINE=1), GPU time per kernel:\n";
  for (const std::string& label : order_) {
    std::vector<float> v = us_.at(label);
    std::sort(v.begin(), v.end());
    char line[256];
    std::snprintf(line, sizeof line, "  %-40s %6zu calls  median %9.1f us  min %9.1f us\n",
                  label.c_str(), v.size(), static_cast<double>(v[v.size() / 2]),
                  static_cast<double>(v.front()));
    text += line;
  }
  return text;
}

}  // namespace courier::cuda_gpu
