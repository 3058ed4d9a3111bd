// courier::ep: expert-parallel dispatch and combine over a Context
// (docs/ep.md). Tensors cross the API as DLPack views, so frameworks hand
// theirs in without copies; they live in the GPU backend's memory (host
// memory on gpu-host) and are row-major and contiguous.
//
// Being built (issue 5): the layout is here; dispatch and combine follow.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "courier/context.hpp"

namespace courier::ep {

struct BufferOptions {
  size_t num_nvl_bytes = 0;   // for direct stores between GPUs of one host
  size_t num_rdma_bytes = 0;  // for the proxy path
  bool low_latency_mode = false;
};

// What get_dispatch_layout fills: caller-allocated tensors.
struct DispatchLayout {
  DLTensor* num_tokens_per_rank = nullptr;    // [num_ranks] int32
  DLTensor* num_tokens_per_expert = nullptr;  // [num_experts] int32
  DLTensor* is_token_in_rank = nullptr;       // [num_tokens, num_ranks] bool (uint8)
};

class Buffer {
 public:
  // Collective over the Context's ranks.
  Buffer(Context& context, const BufferOptions& options = {});
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Where the tokens of topk_idx ([num_tokens, topk] int64, -1 = none) go:
  // tokens per rank (once per rank, however many of its experts live
  // there), tokens per expert, and which token goes to which rank. Experts
  // are spread evenly: rank r holds [r * E / R, (r + 1) * E / R). Local (not
  // collective). Throws courier::Error naming the argument that is wrong: a
  // tensor's dtype, shape or device, num_experts not a positive multiple of
  // the number of ranks, or an expert index outside [-1, num_experts).
  void get_dispatch_layout(const DLTensor& topk_idx, int num_experts, const DispatchLayout& out);

  int num_ranks() const;
  int rank() const;
  // Where tensors passed to this Buffer must live (kDLCPU on gpu-host,
  // kDLCUDA or kDLROCM with this rank's GPU index otherwise).
  DLDevice device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace courier::ep
