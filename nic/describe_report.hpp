// How every NIC plugin's describe entry (NIC ABI 1.2) hands its report to
// the core: NUL-terminated, truncated to the caller's buffer, with *len set to
// what the whole report needs, so the caller can ask for the size first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace courier::nic {

inline void copy_report(const std::string& text, char* buf, size_t* len) {
  const size_t capacity = *len;
  *len = text.size() + 1;
  if (buf == nullptr || capacity == 0) return;
  const size_t copied = std::min(capacity - 1, text.size());
  std::memcpy(buf, text.data(), copied);
  buf[copied] = '\0';
}

}  // namespace courier::nic
