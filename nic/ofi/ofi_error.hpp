// Error reporting shared by the libfabric-based backends.
//
// Every failure is reported twice: as a negative errno-style return value
// (what the plugin ABI passes back) and as a human-readable sentence in a
// thread-local "last error" string (what last_error() returns). The string
// is per thread because endpoints are driven by different proxy threads at
// the same time; it is the only mutable global state in the backend.
#pragma once

#include <string>

namespace courier::ofi {

// The calling thread's most recent error text ("" when none yet).
const std::string& last_error();

// Replaces the calling thread's error text with a printf-formatted message
// and returns `status` unchanged, so a failure path reads as one statement:
//     return set_error(-EINVAL, "post_write: unknown peer %u", peer);
[[gnu::format(printf, 2, 3)]] int set_error(int status, const char* format, ...);

// "fi_domain returned -22 (Invalid argument)": the libfabric return code
// with its fi_strerror text, for embedding into error messages.
std::string describe_fi_error(const char* call, long rc);

// Converts a libfabric return code (-FI_E*) into the -errno value the plugin
// ABI uses. FI_E* values below 256 are errno values already; the libfabric
// specific ones are mapped to the closest errno.
int to_errno(long fi_rc);

}  // namespace courier::ofi
