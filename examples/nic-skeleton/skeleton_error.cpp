#include "skeleton_error.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace courier::skeleton {
namespace {

// Per thread, as the ABI asks: each proxy thread reads its own failure.
thread_local char tls_error[512] = "skeleton: no error";
thread_local char tls_errno_text[128];

}  // namespace

int fail(int status, const char* format, ...) {
  const int prefix = std::snprintf(tls_error, sizeof tls_error, "skeleton: ");
  va_list args;
  va_start(args, format);
  std::vsnprintf(tls_error + prefix, sizeof tls_error - prefix, format, args);
  va_end(args);
  return status;
}

const char* last_error() { return tls_error; }

const char* errno_text(int error) {
  // glibc's strerror_r (GNU variant) may return a static string instead of
  // filling the buffer.
  return strerror_r(error, tls_errno_text, sizeof tls_errno_text);
}

}  // namespace courier::skeleton
