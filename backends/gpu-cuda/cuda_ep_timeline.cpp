#include "cuda_ep_timeline.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "gpu/ep/stamps.hpp"

namespace courier::cuda_gpu {

EpTimeline::~EpTimeline() {
  const std::string text = summary();
  if (!text.empty()) std::fputs(text.c_str(), stderr);
  for (auto& [label, e] : open_) free_.push_back(e);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  if (stamp_area_ != nullptr) cudaFreeHost(stamp_area_);
}

void EpTimeline::add(const std::string& label, float us) {
  if (!us_.count(label)) order_.push_back(label);
  us_[label].push_back(us);
}

void EpTimeline::enable() {
  on_ = true;
  void* area = nullptr;
  // Portable and mapped: any device's kernels write it, the host reads it.
  if (cudaHostAlloc(&area, kStampWords * 8, cudaHostAllocMapped | cudaHostAllocPortable) !=
      cudaSuccess) {
    cudaGetLastError();  // not sticky: the events go on without stamps
    return;
  }
  stamp_area_ = static_cast<uint64_t*>(area);
}

uint64_t* EpTimeline::stamps(cudaStream_t stream, const char* kernel, uint32_t blocks) {
  if (!on_ || stamp_area_ == nullptr) return nullptr;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    return nullptr;
  }
  std::lock_guard<std::mutex> guard(lock_);
  const size_t words = size_t{blocks} * device::ep::kStampPoints;
  if (stamp_used_ + words > kStampWords) return nullptr;
  uint64_t* at = stamp_area_ + stamp_used_;
  std::memset(at, 0, words * 8);  // unused since the last synced()
  stamped_.push_back({kernel, stamp_used_, blocks});
  stamp_used_ += words;
  return at;  // unified addressing: the device uses the host pointer
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
  // The stamps: per step, from the first block's start to the last block's
  // passing it; and the median block's time from its own start to the step
  // (what a block spends, apart from the blocks' staggered starts).
  for (const Stamped& k : stamped_) {
    const uint64_t* at = stamp_area_ + k.offset;
    auto at_point = [&](uint32_t b, uint32_t p) {
      return at[uint64_t{b} * device::ep::kStampPoints + p];
    };
    uint64_t start = 0, last_start = 0;
    for (uint32_t b = 0; b < k.blocks; ++b) {
      const uint64_t t = at_point(b, device::ep::kStampStart);
      if (t != 0 && (start == 0 || t < start)) start = t;
      last_start = std::max(last_start, t);
    }
    if (start != 0) add(k.kernel + "@start", static_cast<float>(last_start - start) / 1000.0f);
    std::vector<uint64_t> own;
    for (uint32_t p = 1; start != 0 && p < device::ep::kStampPoints; ++p) {
      uint64_t last = 0;
      own.clear();
      for (uint32_t b = 0; b < k.blocks; ++b) {
        const uint64_t t = at_point(b, p), began = at_point(b, device::ep::kStampStart);
        last = std::max(last, t);
        if (t != 0 && began != 0 && t >= began) own.push_back(t - began);
      }
      if (last >= start) {
        const std::string name = k.kernel + "@" + device::ep::kStampNames[p];
        add(name, static_cast<float>(last - start) / 1000.0f);
        std::nth_element(own.begin(), own.begin() + own.size() / 2, own.end());
        add(name + " (block)", static_cast<float>(own[own.size() / 2]) / 1000.0f);
      }
    }
  }
  stamped_.clear();
  stamp_used_ = 0;
  if (open_.size() < 2) return;
  std::string call;
  for (size_t i = 1; i < open_.size(); ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, open_[i - 1].second, open_[i].second) != cudaSuccess) continue;
    const std::string& label = open_[i].first;
    add(label, ms * 1000.0f);
    if (label.find('.') == std::string::npos) call += (call.empty() ? "" : "+") + label;
  }
  float ms = 0;
  if (cudaEventElapsedTime(&ms, open_.front().second, open_.back().second) == cudaSuccess) {
    add("call " + call, ms * 1000.0f);
  }
  for (auto& [label, e] : open_) free_.push_back(e);
  open_.clear();
}

std::string EpTimeline::summary() const {
  std::lock_guard<std::mutex> guard(lock_);
  if (order_.empty()) return {};
  std::string text =
      "gpu-cuda EP timeline (COURIER_CUDA_EP_TIMELINE=1), GPU time per kernel (and per step, "
      "<kernel>@<step>):\n";
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
