#include "bench_output.hpp"

#include <fmt/format.h>

namespace courier::bench {

namespace {
std::string human_size(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

void print_table(const std::vector<BenchResult>& results) {
  fmt::print("{:<10} {:<8} {:<10} {:<9} {:>9} {:>7} {:>9} {:>8} {:>14} {:>10}\n", "bench", "path",
             "op", "provider", "size", "window", "iters", "threads", "msgs/s", "GB/s");
  for (const BenchResult& r : results) {
    fmt::print("{:<10} {:<8} {:<10} {:<9} {:>9} {:>7} {:>9} {:>8} {:>14.0f} {:>10.3f}\n", r.bench,
               r.path, r.op, r.provider.empty() ? "-" : r.provider, human_size(r.size), r.window,
               r.iters, r.threads, r.msgs_per_s, r.gbytes_per_s);
  }
}

void print_json(const std::vector<BenchResult>& results) {
  for (const BenchResult& r : results) {
    fmt::print(
        "{{\"bench\":\"{}\",\"path\":\"{}\",\"op\":\"{}\",\"provider\":\"{}\",\"size\":{},"
        "\"window\":{},\"fifo_inflight\":{},\"iters\":{},\"threads\":{},\"repeats\":{},\"seconds\":"
        "{:.6f},\"msgs_per_"
        "s\":{:.1f},"
        "\"gbytes_per_s\":{:.6f}}}\n",
        json_escape(r.bench), json_escape(r.path), json_escape(r.op), json_escape(r.provider),
        r.size, r.window, r.fifo_inflight, r.iters, r.threads, r.repeats, r.seconds, r.msgs_per_s,
        r.gbytes_per_s);
  }
}

}  // namespace courier::bench
