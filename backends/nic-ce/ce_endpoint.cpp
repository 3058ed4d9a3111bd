// Opening and closing an endpoint, and the streams it owns.
#include "ce_endpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "ce_atomic_kernel.hpp"
#include "ce_current_device.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

int Endpoint::open(const EndpointOptions& options, std::unique_ptr<Endpoint>* out) {
  std::unique_ptr<Endpoint> ep(new Endpoint(options));
  char name[56];
  std::snprintf(name, sizeof name, "/courier-ce-%d-%p", static_cast<int>(getpid()),
                static_cast<void*>(ep.get()));
  std::string error;
  if (int rc = Segment::create(name, &ep->own_, &error); rc != 0) return set_error(rc, error);
  if (int status = use_device(options.device); status != 0) return status;
  cudaError_t rc = prepare_atomic_kernel();
  if (rc != cudaSuccess) return set_cuda_error(rc, "loading the atomic kernel");
  const uint32_t slots = std::max<uint32_t>(options.tx_depth, 1);
  void* staging = nullptr;
  rc = cudaHostAlloc(&staging, slots * sizeof(uint64_t),
                     cudaHostAllocMapped | cudaHostAllocPortable);
  if (rc != cudaSuccess) return set_cuda_error(rc, "cudaHostAlloc of atomic result slots");
  ep->staging_ = static_cast<uint64_t*>(staging);
  for (uint32_t i = slots; i > 0; --i) ep->free_staging_.push_back(static_cast<int32_t>(i - 1));
  *out = std::move(ep);
  return 0;
}

Endpoint::~Endpoint() {
  if (options_.trace) trace_.print(options_.batch_copies);
  use_device(options_.device);
  for (Peer& peer : peers_) {
    if (peer.stream != nullptr) {
      cudaStreamSynchronize(peer.stream);
      cudaStreamDestroy(peer.stream);
    }
    for (Op& op : peer.ops) {
      if (op.event != nullptr) cudaEventDestroy(op.event);
    }
    if (!peer.self && options_.mappings != nullptr) options_.mappings->forget_owner(peer.layout);
  }
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
  if (control_stream_ != nullptr) cudaStreamDestroy(control_stream_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

int Endpoint::ensure_stream(Peer& peer) {
  if (peer.stream != nullptr) return 0;
  cudaError_t rc = cudaStreamCreateWithFlags(&peer.stream, cudaStreamNonBlocking);
  return rc == cudaSuccess ? 0 : set_cuda_error(rc, "cudaStreamCreate");
}

// A synchronous copy on the endpoint's own non-blocking stream: the legacy
// default stream would wait for every kernel of the context, including a
// producer that waits for this endpoint.
cudaError_t Endpoint::copy_now(void* dst, const void* src, size_t bytes) {
  if (control_stream_ == nullptr) {
    cudaError_t rc = cudaStreamCreateWithFlags(&control_stream_, cudaStreamNonBlocking);
    if (rc != cudaSuccess) return rc;
  }
  cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, control_stream_);
  return rc == cudaSuccess ? cudaStreamSynchronize(control_stream_) : rc;
}

}  // namespace courier::nic_ce
