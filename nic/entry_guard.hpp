// The control-path guard every NIC plugin's C entry points share: an
// allocation failure or any exception becomes an error code with a reason,
// never an exception escaping into the core's C call.
#pragma once

#include <cerrno>
#include <exception>
#include <new>

namespace courier::nic {

// `SetError` is the plugin's printf-style set_error (status, format, ...).
template <auto SetError, typename F>
int guarded(const char* what, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return SetError(-ENOMEM, "%s: out of memory", what);
  } catch (const std::exception& e) {
    return SetError(-EIO, "%s: %s", what, e.what());
  }
}

}  // namespace courier::nic
