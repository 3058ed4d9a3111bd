#include "core/bootstrap/collective_messages.hpp"

#include <fmt/format.h>

#include <map>

namespace courier {

std::string format_rank_list(std::span<const int> ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

std::optional<std::string> describe_size_mismatch(std::span<const uint64_t> sizes,
                                                  uint64_t sequence) {
  if (sizes.empty()) return std::nullopt;
  // The size most ranks agree on is taken as the intended one, so the message
  // blames the odd ones out rather than whichever rank happens to be first.
  std::map<uint64_t, int> votes;
  for (uint64_t size : sizes) ++votes[size];
  if (votes.size() == 1) return std::nullopt;
  uint64_t expected = sizes[0];
  for (uint64_t size : sizes) {
    if (votes[size] > votes[expected]) expected = size;
  }
  std::vector<int> offenders;
  std::string details;
  for (size_t rank = 0; rank < sizes.size(); ++rank) {
    if (sizes[rank] == expected) continue;
    offenders.push_back(static_cast<int>(rank));
    if (!details.empty()) details += ", ";
    details += fmt::format("{} bytes from rank {}", sizes[rank], rank);
  }
  if (offenders.size() == 1) {
    return fmt::format(
        "bootstrap: allgather #{}: rank {} contributed {} bytes while the other ranks contributed "
        "{} bytes each; every rank must contribute the same number of bytes",
        sequence, offenders[0], sizes[static_cast<size_t>(offenders[0])], expected);
  }
  return fmt::format(
      "bootstrap: allgather #{}: {} contributed a different size ({}) than the other ranks ({} "
      "bytes each); every rank must contribute the same number of bytes",
      sequence, format_rank_list(offenders), details, expected);
}

}  // namespace courier
