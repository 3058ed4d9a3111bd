// Error texts shared by the TCP and MPI bootstraps, so that both phrase the
// same failure the same way and every rank of a job prints the same line.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace courier {

// "rank 3" or "ranks 2, 5, 7".
std::string format_rank_list(std::span<const int> ranks);

// When the allgather contributions in `sizes` (indexed by rank) are not all
// equal, says which ranks differ from the size most ranks used (ties go to the
// lowest rank's size), for example "bootstrap: allgather #4: rank 2
// contributed 5 bytes while the other ranks contributed 4 bytes each; every
// rank must contribute the same number of bytes". nullopt when all agree.
std::optional<std::string> describe_size_mismatch(std::span<const uint64_t> sizes,
                                                  uint64_t sequence);

}  // namespace courier
