// Error reporting shared by the libfabric-based backends: last_error() and
// set_error() as every Courier NIC plugin has them (nic/last_error.hpp), and
// libfabric's return codes in words and as errno values.
#pragma once

#include <string>

#include "nic/last_error.hpp"

namespace courier::ofi {

using nic::last_error;
using nic::set_error;

// "fi_domain returned -22 (Invalid argument)": the libfabric return code
// with its fi_strerror text, for embedding into error messages.
std::string describe_fi_error(const char* call, long rc);

// Converts a libfabric return code (-FI_E*) into the -errno value the plugin
// ABI uses. FI_E* values below 256 are errno values already; the libfabric
// specific ones are mapped to the closest errno.
int to_errno(long fi_rc);

}  // namespace courier::ofi
