#include "core/faults/fault_spec.hpp"

#include <fmt/format.h>

#include <charconv>

#include "core/check.hpp"

namespace courier {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

template <class T>
bool parse_number(std::string_view text, T& value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return !text.empty() && ec == std::errc() && ptr == end;
}

}  // namespace

std::string FaultSpec::describe() const {
  if (!active() && malform == 0) return "off";
  std::string out;
  auto add = [&](std::string item) { out += out.empty() ? item : "," + item; };
  if (reorder > 0) add(fmt::format("reorder={}", reorder));
  if (delay_us > 0) add(fmt::format("delay_us={}", delay_us));
  if (dup > 0) add(fmt::format("dup={}", dup));
  if (fail > 0) add(fmt::format("fail={}", fail));
  if (malform > 0) add(fmt::format("malform={}", malform));
  add(fmt::format("seed={}", seed));
  return out;
}

FaultSpec parse_fault_spec(std::string_view text, std::string_view variable) {
  FaultSpec spec;
  if (trim(text).empty()) return spec;
  uint32_t seen = 0;  // one bit per key: a key given twice is most likely a mistake
  std::string_view rest = text;
  for (;;) {
    size_t comma = rest.find(',');
    std::string_view item = trim(rest.substr(0, comma));
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      fail("{}='{}': '{}' is not a key=value pair (expected e.g. reorder=0.3,delay_us=50)",
           variable, text, item);
    }
    std::string_view key = trim(item.substr(0, eq));
    std::string_view value = trim(item.substr(eq + 1));
    auto probability = [&](double& out) {
      if (!parse_number(value, out) || !(out >= 0.0 && out <= 1.0)) {
        fail("{}='{}': {} must be a probability in [0, 1] (got '{}')", variable, text, key, value);
      }
    };
    uint32_t bit = 0;
    if (key == "reorder") {
      bit = 1;
      probability(spec.reorder);
    } else if (key == "dup") {
      bit = 2;
      probability(spec.dup);
    } else if (key == "fail") {
      bit = 4;
      probability(spec.fail);
    } else if (key == "delay_us") {
      bit = 8;
      if (!parse_number(value, spec.delay_us) || spec.delay_us > kMaxFaultDelayUs) {
        fail("{}='{}': delay_us must be an integer in [0, {}] (got '{}')", variable, text,
             kMaxFaultDelayUs, value);
      }
    } else if (key == "malform") {
      bit = 32;
      probability(spec.malform);
    } else if (key == "seed") {
      bit = 16;
      if (!parse_number(value, spec.seed)) {
        fail("{}='{}': seed must be a non-negative integer (got '{}')", variable, text, value);
      }
    } else {
      fail("{}='{}': unknown key '{}' (expected reorder, delay_us, dup, fail, malform, seed)",
           variable, text, key);
    }
    if ((seen & bit) != 0) fail("{}='{}': {} is given twice", variable, text, key);
    seen |= bit;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return spec;
}

}  // namespace courier
