#include "ofi_error.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>

namespace courier::ofi {
namespace {

// One string per thread: endpoints run on different proxy threads and each
// must be able to explain its own failure without locking.
thread_local std::string t_last_error;

}  // namespace

const std::string& last_error() { return t_last_error; }

int set_error(int status, const char* format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  t_last_error = text;
  return status;
}

std::string describe_fi_error(const char* call, long rc) {
  char text[512];
  std::snprintf(text, sizeof text, "%s returned %ld (%s)", call, rc,
                fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)));
  return text;
}

int to_errno(long fi_rc) {
  if (fi_rc >= 0) return 0;
  const long code = -fi_rc;
  if (code < FI_ERRNO_OFFSET) return static_cast<int>(-code);
  switch (code) {
    case FI_ETOOSMALL:
      return -ENOSPC;
    case FI_EOPBADSTATE:
      return -EPERM;
    case FI_EBADFLAGS:
    case FI_ENOEQ:
    case FI_EDOMAIN:
    case FI_ENOCQ:
    case FI_ENOAV:
      return -EINVAL;
    case FI_ETRUNC:
      return -EMSGSIZE;
    case FI_ENOKEY:
      return -ENOKEY;
    case FI_EOVERRUN:
      return -EOVERFLOW;
    case FI_ENORX:
      return -ENOBUFS;
    default:  // FI_EOTHER, FI_EAVAIL, FI_ECRC and anything newer
      return -EIO;
  }
}

}  // namespace courier::ofi
