#include "core/ep/call_admission.hpp"

#include <fmt/format.h>

#include <cstring>
#include <span>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"

namespace courier::ep {

CallAdmission::CallAdmission(Context& ctx)
    : ctx_(ctx),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())) {}

void CallAdmission::admit(const CallConfig& mine, const std::string& refused, const char* what,
                          const std::function<void(const std::string&)>& refuse) {
  if (configured_) {
    if (!refused.empty()) refuse(refused);
    if (!(mine == config_)) {
      refuse(fmt::format(
          "ep::Buffer::{}: hidden {}, {}, top-{}, {} experts differ from the first call's hidden "
          "{}, {}, top-{}, {} experts; one Buffer serves one configuration",
          what, mine.hidden, to_string(mine.dtype), mine.topk, mine.num_experts, config_.hidden,
          to_string(config_.dtype), config_.topk, config_.num_experts));
    }
    return;
  }
  struct Vote {
    CallConfig config;
    uint32_t ok;
  } vote{mine, refused.empty() ? 1u : 0u};
  std::vector<std::byte> all =
      ctx_.bootstrap().allgather(std::as_bytes(std::span<const Vote, 1>(&vote, 1)));
  for (uint32_t r = 0; r < ranks_; ++r) {
    Vote theirs;
    std::memcpy(&theirs, all.data() + r * sizeof(Vote), sizeof theirs);
    if (r == rank_ || !refused.empty()) continue;
    if (theirs.ok == 0) {
      refuse_call("ep::Buffer::{}: rank {} refused its arguments (its error says why)", what, r);
    }
    if (!(theirs.config == mine)) {
      refuse_call(
          "ep::Buffer::{}: rank {} calls with hidden {}, {}, top-{}, {} experts but rank {} with "
          "hidden {}, {}, top-{}, {} experts: every rank must use the same configuration",
          what, r, theirs.config.hidden, to_string(theirs.config.dtype), theirs.config.topk,
          theirs.config.num_experts, rank_, mine.hidden, to_string(mine.dtype), mine.topk,
          mine.num_experts);
    }
  }
  if (!refused.empty()) throw CallRefused(refused);
  configured_ = true;
  config_ = mine;
}

}  // namespace courier::ep
