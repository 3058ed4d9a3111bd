// Error reporting shared by the verbs-based backends (nic-cx7, nic-bnxt).
//
// As in nic/ofi: every failure is a negative errno-style return value (what
// the plugin ABI passes back) plus a sentence in a thread-local "last error"
// string (what last_error() returns). Per thread, because endpoints are
// driven by different proxy threads at the same time.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace courier::verbs {

// The calling thread's most recent error text ("" when none yet).
const std::string& last_error();

// Replaces the calling thread's error text and returns `status` unchanged:
//     return set_error(-EINVAL, "post_write: unknown peer %u", peer);
[[gnu::format(printf, 2, 3)]] int set_error(int status, const char* format, ...);

// "ibv_modify_qp returned 22 (Invalid argument)": a verbs call's errno-style
// result (positive, or -1 with errno set) for embedding in messages.
std::string describe_verbs_error(const char* call, int rc);

// A work-completion status as "remote access error (IBV_WC_REM_ACCESS_ERR)".
std::string describe_wc_status(ibv_wc_status status);

// The -errno a failed work completion becomes in courier_nic_completion_v1.
int wc_status_to_errno(ibv_wc_status status);

}  // namespace courier::verbs
