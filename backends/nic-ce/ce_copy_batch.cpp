// The copies gathered for one peer go to the copy engines as one batch: one
// driver call (cudaMemcpyBatchAsync where the runtime has it) and one event
// instead of one each. Pieces contiguous at both ends become one copy, and
// only copies whose byte ranges are disjoint run as a batch, so their order
// cannot change the final bytes; others run one by one in post order.
#include <algorithm>
#include <cstdint>
#include <string>

#include "ce_clock.hpp"
#include "ce_endpoint.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

bool Endpoint::plan_batch() {
  batch_dst_.clear();
  batch_src_.clear();
  batch_bytes_.clear();
  const size_t n = batch_.size();
  // Copies in one batch run in any order: none may write bytes another
  // reads or writes. Sorted by destination, neighbours must not overlap;
  // and no source range may meet a destination range (a sweep over both
  // sorted lists).
  order_.resize(n);
  for (size_t i = 0; i < n; ++i) order_[i] = i;
  auto dst = [&](size_t i) { return reinterpret_cast<uintptr_t>(batch_[i]->dst); };
  auto src = [&](size_t i) { return reinterpret_cast<uintptr_t>(batch_[i]->src); };
  auto bytes = [&](size_t i) { return uintptr_t{batch_[i]->bytes}; };
  std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return dst(a) < dst(b); });
  for (size_t k = 1; k < n; ++k) {
    if (dst(order_[k]) < dst(order_[k - 1]) + bytes(order_[k - 1])) return false;
  }
  by_source_ = order_;
  std::sort(by_source_.begin(), by_source_.end(),
            [&](size_t a, size_t b) { return src(a) < src(b); });
  for (size_t i = 0, j = 0; i < n && j < n;) {
    const size_t d = order_[i], r = by_source_[j];
    if (dst(d) < src(r) + bytes(r) && src(r) < dst(d) + bytes(d)) return false;
    if (dst(d) + bytes(d) <= src(r) + bytes(r)) {
      ++i;
    } else {
      ++j;
    }
  }
  // One copy per run contiguous at both ends: a kernel's pieces of one
  // region become one copy again, whatever order they were pushed in.
  for (size_t k = 0; k < n; ++k) {
    const Op& op = *batch_[order_[k]];
    if (!batch_dst_.empty() &&
        static_cast<std::byte*>(batch_dst_.back()) + batch_bytes_.back() == op.dst &&
        static_cast<const std::byte*>(batch_src_.back()) + batch_bytes_.back() == op.src) {
      batch_bytes_.back() += op.bytes;
    } else {
      batch_dst_.push_back(op.dst);
      batch_src_.push_back(op.src);
      batch_bytes_.push_back(op.bytes);
    }
  }
  return true;
}

void Endpoint::flush_batch(Peer& peer) {
  if (batch_.empty()) return;
  const uint64_t submit_ns = options_.trace ? monotonic_ns() : 0;
  int status = ensure_stream(peer);
  if (status == 0) {
    const cudaError_t rc = submit_batch(peer);
    if (rc != cudaSuccess) {
      status = set_cuda_error(
          rc, batch_.size() == 1
                  ? "cudaMemcpyAsync"
                  : "submitting a batch of " + std::to_string(batch_.size()) + " peer copies");
    }
  }
  if (status == 0) status = record_event(peer, *batch_.back());
  if (status == 0 && options_.trace) {
    uint64_t bytes = 0, first = UINT64_MAX, last = 0;
    for (const Op* op : batch_) {
      bytes += op->bytes;
      first = std::min(first, op->posted_ns);
      last = std::max(last, op->posted_ns);
    }
    batch_.back()->trace_slot =
        trace_.launched(static_cast<uint32_t>(batch_.size()), static_cast<uint32_t>(batch_copies_),
                        bytes, first, last, submit_ns);
  }
  for (Op* op : batch_) {
    if (status != 0) {
      finish_launched(*op, status);
    } else {
      op->state = State::running;
    }
  }
  batch_.clear();
}

cudaError_t Endpoint::submit_batch(Peer& peer) {
  batch_copies_ = batch_.size();
  if (batch_.size() == 1 || !plan_batch()) {
    // Ranges that meet (or a single copy): one copy each, in post order.
    for (const Op* op : batch_) {
      cudaError_t rc = cudaMemcpyAsync(op->dst, op->src, op->bytes, cudaMemcpyDefault, peer.stream);
      if (rc != cudaSuccess) return rc;
    }
    return cudaSuccess;
  }
  copies_merged_ += batch_.size() - batch_dst_.size();
  const size_t n = batch_dst_.size();
  batch_copies_ = n;
  if (n > 1 && batch_call_) {
#if CUDART_VERSION >= 12080
    // The sources are read in stream order: a kernel before this copy on
    // the stream may still be writing them (they are not ephemeral).
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attributes.srcLocHint.type = cudaMemLocationTypeDevice;
    attributes.srcLocHint.id = options_.device;
    attributes.dstLocHint.type = cudaMemLocationTypeDevice;
    attributes.dstLocHint.id = options_.device;
    size_t attribute_index = 0;
#if CUDART_VERSION >= 13000
    cudaError_t rc = cudaMemcpyBatchAsync(batch_dst_.data(), batch_src_.data(), batch_bytes_.data(),
                                          n, &attributes, &attribute_index, 1, peer.stream);
#else
    size_t failed_index = 0;
    cudaError_t rc = cudaMemcpyBatchAsync(batch_dst_.data(), const_cast<void**>(batch_src_.data()),
                                          batch_bytes_.data(), n, &attributes, &attribute_index, 1,
                                          &failed_index, peer.stream);
#endif
    if (rc == cudaSuccess) return rc;
    if (rc != cudaErrorNotSupported && rc != cudaErrorInvalidValue) return rc;
    // A driver without the batch call: copy one by one from now on.
    cudaGetLastError();
    batch_call_ = false;
#else
    batch_call_ = false;
#endif
  }
  for (size_t i = 0; i < n; ++i) {
    cudaError_t rc = cudaMemcpyAsync(batch_dst_[i], batch_src_[i], batch_bytes_[i],
                                     cudaMemcpyDefault, peer.stream);
    if (rc != cudaSuccess) return rc;
  }
  return cudaSuccess;
}

}  // namespace courier::nic_ce
