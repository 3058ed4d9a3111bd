#include "fake_log.hpp"

#include <cstdio>

namespace courier::fake_verbs {
namespace {

void print(const char* verb, const char* format, va_list args) {
  char reason[512];
  std::vsnprintf(reason, sizeof(reason), format, args);
  std::fprintf(stderr, "fake verbs: %s: %s\n", verb, reason);
}

}  // namespace

int refuse(int error, const char* verb, const char* format, ...) {
  va_list args;
  va_start(args, format);
  print(verb, format, args);
  va_end(args);
  return error;
}

void refuse_errno(int error, const char* verb, const char* format, ...) {
  va_list args;
  va_start(args, format);
  print(verb, format, args);
  va_end(args);
  errno = error;
}

}  // namespace courier::fake_verbs
