// The error reporting of Courier's own NIC plugins (nic/ofi, nic/verbs).
//
// Every failure is reported twice: as a negative errno-style return value
// (what the plugin ABI passes back) and as a sentence in a thread-local "last
// error" string (what last_error() returns). Per thread, because endpoints are
// driven by different proxy threads at the same time and each must explain its
// own failure without locking; it is the only mutable global state in a
// plugin (each plugin file carries its own copy).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace courier::nic {

inline thread_local std::string t_last_error;

// The calling thread's most recent error text ("" when none yet).
inline const std::string& last_error() { return t_last_error; }

// Replaces the calling thread's error text with a printf-formatted message
// and returns `status` unchanged, so a failure path reads as one statement:
//     return set_error(-EINVAL, "post_write: unknown peer %u", peer);
[[gnu::format(printf, 2, 3)]] inline int set_error(int status, const char* format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  t_last_error = text;
  return status;
}

}  // namespace courier::nic
