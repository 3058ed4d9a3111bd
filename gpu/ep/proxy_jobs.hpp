// How a GPU backend takes an EP job (proxy path, and the direct path's jobs
// that grew) from the core: a core of an older minor passes a shorter
// struct (struct_size), and the fields it lacks mean what zero means
// (docs/plugin-abi.md, "GPU ABI 1.8"). Host code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "courier/abi/gpu_v1.h"

namespace courier::device::ep {

// The fewest bytes of a job a backend accepts: everything up to the first
// field a newer minor appended that is not required.
template <class Job>
constexpr size_t min_job_size() {
  return sizeof(Job);
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_proxy_ht_dispatch_v1>() {
  return offsetof(courier_gpu_ep_proxy_ht_dispatch_v1, row_source);  // minor 7
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_proxy_ht_receive_v1>() {
  return offsetof(courier_gpu_ep_proxy_ht_receive_v1, readback);  // minor 7
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_proxy_combine_v1>() {
  return offsetof(courier_gpu_ep_proxy_combine_v1, x_source);  // minor 7
}

template <>
constexpr size_t min_job_size<courier_gpu_ep_proxy_refuse_v1>() {
  return offsetof(courier_gpu_ep_proxy_refuse_v1, epoch);  // minor 3
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_proxy_ll_dispatch_v1>() {
  return offsetof(courier_gpu_ep_proxy_ll_dispatch_v1, epoch);  // minor 3
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_proxy_ll_receive_v1>() {
  return offsetof(courier_gpu_ep_proxy_ll_receive_v1, wait_cost);  // minor 8
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_proxy_reduce_v1>() {
  return offsetof(courier_gpu_ep_proxy_reduce_v1, wait_cost);  // minor 8
}

// The direct path's jobs that gained epoch words in minor 10 (and their
// fused launches' fields in minor 13).
template <>
constexpr size_t min_job_size<courier_gpu_ep_wait_v1>() {
  return offsetof(courier_gpu_ep_wait_v1, epoch_word);  // minor 2
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_signal_v1>() {
  // Minor 2: up to the embedded wait's minor-2 end.
  return offsetof(courier_gpu_ep_signal_v1, wait) + offsetof(courier_gpu_ep_wait_v1, epoch_word);
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_ll_dispatch_v1>() {
  return offsetof(courier_gpu_ep_ll_dispatch_v1, epoch_word);  // minor 2
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_ll_receive_v1>() {
  return offsetof(courier_gpu_ep_ll_receive_v1, epoch_word);  // minor 2
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_reduce_v1>() {
  return offsetof(courier_gpu_ep_reduce_v1, epoch_word);  // minor 2
}
// The high-throughput dispatch's, fused in minor 16.
template <>
constexpr size_t min_job_size<courier_gpu_ep_route_v1>() {
  return offsetof(courier_gpu_ep_route_v1, signal);  // minor 2
}
template <>
constexpr size_t min_job_size<courier_gpu_ep_ht_dispatch_v1>() {
  return offsetof(courier_gpu_ep_ht_dispatch_v1, done);  // minor 2
}
// And the one that gained its fused signal in minor 13.
template <>
constexpr size_t min_job_size<courier_gpu_ep_combine_send_v1>() {
  return offsetof(courier_gpu_ep_combine_send_v1, flag_off);  // minor 2
}

// *out = `job`, the fields past its struct_size zero; false when job is
// NULL or shorter than min_job_size.
template <class Job>
bool complete_job(const Job* job, Job* out) {
  if (job == nullptr || job->struct_size < min_job_size<Job>()) return false;
  std::memset(static_cast<void*>(out), 0, sizeof *out);
  std::memcpy(static_cast<void*>(out), job, std::min<size_t>(job->struct_size, sizeof *out));
  return true;
}

}  // namespace courier::device::ep
