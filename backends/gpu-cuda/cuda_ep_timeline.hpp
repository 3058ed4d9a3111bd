// COURIER_CUDA_EP_TIMELINE=1: where an EP call's GPU time goes. Every EP
// kernel (and the wait kernel before it) is followed by a CUDA event on the
// EP stream; when the host waits for the stream (ep_sync), the time between
// consecutive events is added to the later event's label, and the whole
// call (first kernel to last) to the call's. The direct path's kernels also
// record the device clock in each block at their steps (gpu/ep/stamps.hpp):
// "<kernel>@<step>" is the time from the first block's start to the last
// block's passing that step. The backend prints the medians to stderr when
// it is unloaded. Off (the default), nothing is recorded.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace courier::cuda_gpu {

class EpTimeline {
 public:
  EpTimeline() = default;
  ~EpTimeline();
  EpTimeline(const EpTimeline&) = delete;
  EpTimeline& operator=(const EpTimeline&) = delete;

  // At initialization, before any EP call: also maps the stamp area (no
  // stamps, only events, when that fails).
  void enable();
  bool on() const { return on_; }
  // Before a job's first kernel: starts the call if none is open.
  void begin(cudaStream_t stream);
  // After kernels: the time since the previous mark goes to `label`.
  void mark(cudaStream_t stream, const std::string& label);
  // The stream was synchronized: the open call's times are read.
  void synced();
  // Where a direct kernel of `blocks` blocks labelled `kernel`, launched on
  // `stream`, records its stamps (mapped host memory, zeroed), read at the
  // next synced(); NULL when off, while the stream is being captured (a
  // replayed graph would stamp an area given to later kernels), or when the
  // area is full until then. One area: one device per process.
  uint64_t* stamps(cudaStream_t stream, const char* kernel, uint32_t blocks);
  // The medians so far, one line per label (empty when off or unused).
  std::string summary() const;

 private:
  cudaEvent_t event();
  void add(const std::string& label, float us);  // lock_ held

  struct Stamped {
    std::string kernel;
    size_t offset;  // into stamp_area_, in u64
    uint32_t blocks;
  };
  static constexpr size_t kStampWords = size_t{1} << 19;  // 4 MiB
  uint64_t* stamp_area_ = nullptr;                        // mapped host memory, from enable()
  size_t stamp_used_ = 0;
  std::vector<Stamped> stamped_;

  bool on_ = false;
  mutable std::mutex lock_;
  std::vector<cudaEvent_t> free_;
  std::vector<std::pair<std::string, cudaEvent_t>> open_;  // the call's marks, "" first
  std::vector<std::string> order_;                         // labels as first seen
  std::map<std::string, std::vector<float>> us_;
};

}  // namespace courier::cuda_gpu
