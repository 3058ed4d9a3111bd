// Error reporting shared by the verbs-based backends (nic-cx7, nic-bnxt):
// last_error() and set_error() as every Courier NIC plugin has them
// (nic/last_error.hpp), and verbs' results in words.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "nic/last_error.hpp"

namespace courier::verbs {

using nic::last_error;
using nic::set_error;

// "ibv_modify_qp returned 22 (Invalid argument)": a verbs call's errno-style
// result (positive, or -1 with errno set) for embedding in messages.
std::string describe_verbs_error(const char* call, int rc);

// A work-completion status as "remote access error (IBV_WC_REM_ACCESS_ERR)".
std::string describe_wc_status(ibv_wc_status status);

// The -errno a failed work completion becomes in courier_nic_completion_v1.
int wc_status_to_errno(ibv_wc_status status);

}  // namespace courier::verbs
