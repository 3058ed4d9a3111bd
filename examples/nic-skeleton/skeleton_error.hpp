// Errors of the skeleton backend: every failing entry point returns -errno
// and leaves a sentence for last_error() (docs/plugin-abi.md, section 4).
#pragma once

namespace courier::skeleton {

// Sets the calling thread's last_error text to "skeleton: <message>" and
// returns `status`, so that a failure reads `return fail(-EINVAL, "...", ...)`.
[[gnu::format(printf, 2, 3)]] int fail(int status, const char* format, ...);

// The calling thread's most recent failure; never NULL.
const char* last_error();

// The text of an errno value (strerror, without its thread-safety trap).
const char* errno_text(int error);

}  // namespace courier::skeleton
