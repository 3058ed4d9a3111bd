// Byte patterns for checking writes byte for byte.
//
// Every byte's expected value depends on its offset in the target region and
// on a per-write seed, so a write landing at the wrong offset, a truncated
// write, or a stale buffer all show up as mismatches. Bytes that no write
// should touch hold a different, also offset-dependent, "canary" value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace courier::conformance {

inline uint8_t canary_byte(uint64_t offset) {
  return static_cast<uint8_t>(0xC3 ^ (offset * 7) ^ (offset >> 9));
}

inline uint8_t pattern_byte(uint64_t offset, uint64_t seed) {
  const uint64_t mixed = (offset + 1) * 0x9E3779B97F4A7C15ull ^ (seed + 1) * 0xD1B54A32D192ED03ull;
  const auto value = static_cast<uint8_t>(mixed >> 56);
  // Never equal to the canary, so even a one-byte write is observable.
  return value == canary_byte(offset) ? static_cast<uint8_t>(~value) : value;
}

// Writes the pattern that target offsets [target_offset, +len) must end up
// holding into `source` (a local buffer of len bytes).
void fill_pattern(std::byte* source, uint64_t target_offset, size_t len, uint64_t seed);
// Resets region bytes [from, +len) to the canary.
void fill_canary(std::byte* region, uint64_t from, size_t len);

// "" when region bytes [offset, +len) hold the pattern, else a description
// of the first mismatch and the number of wrong bytes.
std::string check_pattern(const std::byte* region, uint64_t offset, size_t len, uint64_t seed);
// "" when region bytes [from, +len) still hold the canary.
std::string check_canary(const std::byte* region, uint64_t from, size_t len);

}  // namespace courier::conformance
