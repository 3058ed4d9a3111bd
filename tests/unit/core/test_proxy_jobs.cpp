// How GPU backends take EP proxy jobs (gpu/ep/proxy_jobs.hpp): a job from a
// core of an older minor (shorter struct_size) is completed with zeros, a
// job too short for the fields a backend needs is refused.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>

#include "gpu/ep/proxy_jobs.hpp"

using courier::device::ep::complete_job;

TEST_CASE("a minor-7 combine job is taken, its minor-8 fields zero") {
  courier_gpu_ep_proxy_combine_v1 job;
  std::memset(&job, 0xAB, sizeof job);  // what lies past a shorter job in memory
  job.struct_size = offsetof(courier_gpu_ep_proxy_combine_v1, x_source);
  job.row_bytes = 14336;
  job.x_off = 4096;
  courier_gpu_ep_proxy_combine_v1 full;
  REQUIRE(complete_job(&job, &full));
  CHECK(full.row_bytes == 14336);
  CHECK(full.x_off == 4096);
  CHECK(full.x_source == 0);
  CHECK(full.sends_settled == 0);
}

TEST_CASE("minor-7 dispatch and receive jobs are taken, their new fields zero") {
  courier_gpu_ep_proxy_ht_dispatch_v1 dispatch;
  std::memset(&dispatch, 0xCD, sizeof dispatch);
  dispatch.struct_size = offsetof(courier_gpu_ep_proxy_ht_dispatch_v1, row_source);
  courier_gpu_ep_proxy_ht_dispatch_v1 full_dispatch;
  REQUIRE(complete_job(&dispatch, &full_dispatch));
  CHECK(full_dispatch.row_source == 0);
  CHECK(full_dispatch.sends_settled == 0);

  courier_gpu_ep_proxy_ht_receive_v1 receive;
  std::memset(&receive, 0xCD, sizeof receive);
  receive.struct_size = offsetof(courier_gpu_ep_proxy_ht_receive_v1, readback);
  receive.wait_sends = 0;  // minor 7's reserved word, zeroed by that core
  courier_gpu_ep_proxy_ht_receive_v1 full_receive;
  REQUIRE(complete_job(&receive, &full_receive));
  CHECK(full_receive.readback == nullptr);
  CHECK(full_receive.plan == nullptr);
  CHECK(full_receive.slots == nullptr);
  CHECK(full_receive.slot_tokens == 0);
}

TEST_CASE("a job too short for the fields a backend needs, or none, is refused") {
  courier_gpu_ep_proxy_combine_v1 combine{};
  combine.struct_size = offsetof(courier_gpu_ep_proxy_combine_v1, x_off);  // minor 6
  courier_gpu_ep_proxy_combine_v1 full;
  CHECK_FALSE(complete_job(&combine, &full));
  courier_gpu_ep_proxy_ll_dispatch_v1 dispatch{};
  // Short of its minor-3 fields (release_target).
  dispatch.struct_size = offsetof(courier_gpu_ep_proxy_ll_dispatch_v1, epoch) - 8;
  courier_gpu_ep_proxy_ll_dispatch_v1 full_dispatch;
  CHECK_FALSE(complete_job(&dispatch, &full_dispatch));
  courier_gpu_ep_proxy_reduce_v1 reduce{};
  reduce.struct_size = offsetof(courier_gpu_ep_proxy_reduce_v1, wait_cost) - 8;
  courier_gpu_ep_proxy_reduce_v1 full_reduce;
  CHECK_FALSE(complete_job(&reduce, &full_reduce));
  CHECK_FALSE(complete_job<courier_gpu_ep_proxy_reduce_v1>(nullptr, &full_reduce));
}

TEST_CASE("minor-8 low-latency receive and reduce jobs are taken, wait_cost NULL") {
  courier_gpu_ep_proxy_ll_receive_v1 receive;
  std::memset(&receive, 0xEF, sizeof receive);
  receive.struct_size = offsetof(courier_gpu_ep_proxy_ll_receive_v1, wait_cost);
  receive.local_experts = 36;
  courier_gpu_ep_proxy_ll_receive_v1 full_receive;
  REQUIRE(complete_job(&receive, &full_receive));
  CHECK(full_receive.local_experts == 36);
  CHECK(full_receive.wait_cost == nullptr);

  courier_gpu_ep_proxy_reduce_v1 reduce;
  std::memset(&reduce, 0xEF, sizeof reduce);
  reduce.struct_size = offsetof(courier_gpu_ep_proxy_reduce_v1, wait_cost);
  reduce.tokens = 128;
  courier_gpu_ep_proxy_reduce_v1 full_reduce;
  REQUIRE(complete_job(&reduce, &full_reduce));
  CHECK(full_reduce.tokens == 128);
  CHECK(full_reduce.wait_cost == nullptr);
}

TEST_CASE("minor-9 jobs are taken with epoch NULL: their targets come from the job") {
  courier_gpu_ep_proxy_refuse_v1 refuse;
  std::memset(&refuse, 0x5A, sizeof refuse);
  refuse.struct_size = offsetof(courier_gpu_ep_proxy_refuse_v1, epoch);
  refuse.release_target = 3u << 16;
  courier_gpu_ep_proxy_refuse_v1 full_refuse;
  REQUIRE(complete_job(&refuse, &full_refuse));
  CHECK(full_refuse.release_target == 3u << 16);
  CHECK(full_refuse.epoch == nullptr);

  courier_gpu_ep_proxy_ll_dispatch_v1 dispatch;
  std::memset(&dispatch, 0x5A, sizeof dispatch);
  dispatch.struct_size = offsetof(courier_gpu_ep_proxy_ll_dispatch_v1, epoch);
  courier_gpu_ep_proxy_ll_dispatch_v1 full_dispatch;
  REQUIRE(complete_job(&dispatch, &full_dispatch));
  CHECK(full_dispatch.epoch == nullptr);

  courier_gpu_ep_proxy_ll_receive_v1 receive;
  std::memset(&receive, 0x5A, sizeof receive);
  receive.struct_size = offsetof(courier_gpu_ep_proxy_ll_receive_v1, epoch);
  courier_gpu_ep_proxy_ll_receive_v1 full_receive;
  REQUIRE(complete_job(&receive, &full_receive));
  CHECK(full_receive.epoch == nullptr);

  courier_gpu_ep_proxy_combine_v1 combine;
  std::memset(&combine, 0x5A, sizeof combine);
  combine.struct_size = offsetof(courier_gpu_ep_proxy_combine_v1, epoch);
  courier_gpu_ep_proxy_combine_v1 full_combine;
  REQUIRE(complete_job(&combine, &full_combine));
  CHECK(full_combine.epoch == nullptr);

  courier_gpu_ep_proxy_reduce_v1 reduce;
  std::memset(&reduce, 0x5A, sizeof reduce);
  reduce.struct_size = offsetof(courier_gpu_ep_proxy_reduce_v1, epoch);
  courier_gpu_ep_proxy_reduce_v1 full_reduce;
  REQUIRE(complete_job(&reduce, &full_reduce));
  CHECK(full_reduce.epoch == nullptr);
}

TEST_CASE("minor-9 direct-path jobs are taken with epoch_word NULL, the signal's wait included") {
  // A minor-9 signal job ends with its embedded wait's minor-9 fields.
  courier_gpu_ep_signal_v1 signal;
  std::memset(&signal, 0x3C, sizeof signal);
  signal.struct_size = static_cast<uint32_t>(offsetof(courier_gpu_ep_signal_v1, wait) +
                                             offsetof(courier_gpu_ep_wait_v1, epoch_word));
  signal.epoch = 7;
  signal.wait.epoch = 7;
  courier_gpu_ep_signal_v1 full_signal;
  REQUIRE(complete_job(&signal, &full_signal));
  CHECK(full_signal.epoch == 7);
  CHECK(full_signal.wait.epoch == 7);
  CHECK(full_signal.wait.epoch_word == nullptr);
  CHECK(full_signal.epoch_word == nullptr);
  signal.struct_size -= 8;  // short of the wait's minor-2 fields
  CHECK_FALSE(complete_job(&signal, &full_signal));

  courier_gpu_ep_wait_v1 wait;
  std::memset(&wait, 0x3C, sizeof wait);
  wait.struct_size = offsetof(courier_gpu_ep_wait_v1, epoch_word);
  courier_gpu_ep_wait_v1 full_wait;
  REQUIRE(complete_job(&wait, &full_wait));
  CHECK(full_wait.epoch_word == nullptr);

  courier_gpu_ep_ll_dispatch_v1 dispatch;
  std::memset(&dispatch, 0x3C, sizeof dispatch);
  dispatch.struct_size = offsetof(courier_gpu_ep_ll_dispatch_v1, epoch_word);
  courier_gpu_ep_ll_dispatch_v1 full_dispatch;
  REQUIRE(complete_job(&dispatch, &full_dispatch));
  CHECK(full_dispatch.epoch_word == nullptr);

  courier_gpu_ep_ll_receive_v1 receive;
  std::memset(&receive, 0x3C, sizeof receive);
  receive.struct_size = offsetof(courier_gpu_ep_ll_receive_v1, epoch_word);
  courier_gpu_ep_ll_receive_v1 full_receive;
  REQUIRE(complete_job(&receive, &full_receive));
  CHECK(full_receive.epoch_word == nullptr);
  CHECK(full_receive.scales_layout == 0);

  courier_gpu_ep_reduce_v1 reduce;
  std::memset(&reduce, 0x3C, sizeof reduce);
  reduce.struct_size = offsetof(courier_gpu_ep_reduce_v1, epoch_word);
  courier_gpu_ep_reduce_v1 full_reduce;
  REQUIRE(complete_job(&reduce, &full_reduce));
  CHECK(full_reduce.epoch_word == nullptr);
}
