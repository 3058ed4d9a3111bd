#include "verbs_error.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace courier::verbs {
namespace {

const char* wc_status_name(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_FATAL_ERR:
      return "IBV_WC_FATAL_ERR";
    case IBV_WC_GENERAL_ERR:
      return "IBV_WC_GENERAL_ERR";
    default:
      return "IBV_WC_*";
  }
}

}  // namespace

std::string describe_verbs_error(const char* call, int rc) {
  // rdma-core returns errno values directly from most calls, and -1 with
  // errno set from a few; report whichever carries the code.
  const int code = rc > 0 ? rc : (errno != 0 ? errno : EIO);
  char text[256];
  std::snprintf(text, sizeof text, "%s failed: %s (errno %d)", call, std::strerror(code), code);
  return text;
}

std::string describe_wc_status(ibv_wc_status status) {
  char text[160];
  std::snprintf(text, sizeof text, "%s (%s)", ibv_wc_status_str(status), wc_status_name(status));
  return text;
}

int wc_status_to_errno(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return 0;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR:
      return -EACCES;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_LOC_LEN_ERR:
      return -EINVAL;
    case IBV_WC_WR_FLUSH_ERR:
      return -ECANCELED;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return -ETIMEDOUT;
    default:
      return -EIO;
  }
}

}  // namespace courier::verbs
