// Prints BenchResults as an aligned table (default) or as one JSON object
// per line (--json), the same for every benchmark and baseline.
#pragma once

#include <vector>

#include "bench_result.hpp"

namespace courier::bench {

void print_table(const std::vector<BenchResult>& results);
void print_json(const std::vector<BenchResult>& results);

}  // namespace courier::bench
