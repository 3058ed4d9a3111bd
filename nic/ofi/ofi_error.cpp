#include "ofi_error.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstdio>

namespace courier::ofi {

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
