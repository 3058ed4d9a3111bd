#include "nic_patterns.hpp"

#include <cstdio>

namespace courier::conformance {
namespace {

template <typename Expected>
std::string compare(const std::byte* region, uint64_t from, size_t len, const char* what,
                    Expected expected) {
  size_t wrong = 0;
  uint64_t first = 0;
  for (uint64_t offset = from; offset < from + len; ++offset) {
    if (static_cast<uint8_t>(region[offset]) != expected(offset)) {
      if (wrong++ == 0) first = offset;
    }
  }
  if (wrong == 0) return "";
  char text[256];
  std::snprintf(text, sizeof text,
                "%zu of %zu bytes differ from the %s in [%llu, +%zu); first at offset %llu: "
                "0x%02x instead of 0x%02x",
                wrong, len, what, static_cast<unsigned long long>(from), len,
                static_cast<unsigned long long>(first), static_cast<unsigned>(region[first]),
                static_cast<unsigned>(expected(first)));
  return text;
}

}  // namespace

void fill_pattern(std::byte* source, uint64_t target_offset, size_t len, uint64_t seed) {
  for (size_t i = 0; i < len; ++i) source[i] = std::byte{pattern_byte(target_offset + i, seed)};
}

void fill_canary(std::byte* region, uint64_t from, size_t len) {
  for (uint64_t offset = from; offset < from + len; ++offset) {
    region[offset] = std::byte{canary_byte(offset)};
  }
}

std::string check_pattern(const std::byte* region, uint64_t offset, size_t len, uint64_t seed) {
  return compare(region, offset, len, "written pattern",
                 [seed](uint64_t o) { return pattern_byte(o, seed); });
}

std::string check_canary(const std::byte* region, uint64_t from, size_t len) {
  return compare(region, from, len, "untouched canary", [](uint64_t o) { return canary_byte(o); });
}

}  // namespace courier::conformance
