#include "core/ep/exchange.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"

namespace courier::ep {

Exchange::Exchange(Context& ctx, uint64_t bytes)
    : ctx_(ctx),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())) {
  if (bytes > TransferCmd::kMaxOffset) {
    fail(
        "ep::Buffer: its window would need {} bytes, more than the 4 GiB a window can address; "
        "lower max_tokens_per_rank",
        bytes);
  }
  memory_ = ctx.alloc(bytes);
  std::vector<std::byte> zeros(bytes);
  ctx.copy(memory_.data(), zeros.data(), bytes);
  window_ = ctx.register_window(memory_.data(), memory_.size());
}

Exchange::~Exchange() {
  try {
    ctx_.deregister_window(window_);
  } catch (const Error&) {
    // A rank that is gone cannot take part; the memory is freed anyway.
  }
}

void Exchange::add_writes(std::vector<TransferCmd>& list, uint32_t dst, uint64_t src_offset,
                          uint64_t dst_offset, uint64_t bytes) const {
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min<uint64_t>(bytes - done, TransferCmd::kMaxLength);
    WriteCmdArgs a;
    a.dst_rank = dst;
    a.window = window_;
    a.src_offset = src_offset + done;
    a.dst_offset = dst_offset + done;
    a.length = n;
    TransferCmd cmd;
    const CmdStatus status = encode_write(a, &cmd);
    if (status != CmdStatus::ok) fail("ep::Buffer: a WRITE to rank {}: {}", dst, to_string(status));
    list.push_back(cmd);
    done += n;
  }
}

void Exchange::add_signal(std::vector<TransferCmd>& list, uint32_t dst, uint64_t staging_offset,
                          uint64_t record_offset, uint64_t bytes, uint64_t epoch_offset) const {
  add_writes(list, dst, staging_offset, record_offset, bytes);
  TransferCmd atomic;
  const CmdStatus status = encode_atomic(dst, window_, epoch_offset, AtomicOp::add_u64, 1, &atomic);
  if (status != CmdStatus::ok) fail("ep::Buffer: a signal to rank {}: {}", dst, to_string(status));
  list.push_back(atomic);
}

void Exchange::run(std::vector<std::vector<TransferCmd>>& commands, const char* what) {
  std::vector<DeviceCommandList> lists;
  for (uint32_t d = 0; d < commands.size(); ++d) {
    if (commands[d].empty()) continue;
    DeviceCommandList list;
    list.channel = d % ctx_.num_channels();
    list.commands = std::move(commands[d]);
    lists.push_back(std::move(list));
  }
  ctx_.run_device_commands(lists);
  for (const DeviceCommandList& list : lists) {
    if (list.status != PushStatus::ok) {
      fail("ep::Buffer::{}: channel {} failed: {} ({})", what, list.channel, to_string(list.status),
           ctx_.channel_stats(list.channel).first_error);
    }
  }
}

std::vector<std::byte> Exchange::wait(uint64_t first_record, uint64_t record_bytes,
                                      uint64_t epoch_field, uint64_t epoch, const char* what) {
  std::vector<std::byte> records(record_bytes * ranks_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (uint32_t spins = 0;; ++spins) {
    ctx_.copy(records.data(), at(first_record), records.size());
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < ranks_; ++r) {
      uint64_t seen = 0;
      std::memcpy(&seen, records.data() + r * record_bytes + epoch_field, 8);
      if (seen < epoch) missing.push_back(r);
    }
    if (missing.empty()) return records;
    if (auto failure = ctx_.failed_peer()) {
      fail("ep::Buffer::{}: rank {} is gone: {}", what, failure->rank, failure->reason);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      fail("ep::Buffer::{}: no data from rank(s) {} after 60 s (they did not call {} or are stuck)",
           what, fmt::join(missing, ", "), what);
    }
    if (spins > 64) std::this_thread::yield();
  }
}

}  // namespace courier::ep

namespace courier::ep {

void Exchange::refuse(std::vector<std::vector<TransferCmd>>& refusals, const char* what,
                      const std::string& why) {
  try {
    run(refusals, what);
  } catch (const Error&) {
    // The refusal itself is the error worth reporting.
  }
  throw CallRefused(why);
}

}  // namespace courier::ep
