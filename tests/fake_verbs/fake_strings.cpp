// The string helpers and ibv_fork_init, as libibverbs defines them.
#include <infiniband/verbs.h>

extern "C" {

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const names[] = {
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "aborted error",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM rendezvous pending",
  };
  const auto index = static_cast<unsigned>(status);
  return index < sizeof(names) / sizeof(names[0]) ? names[index] : "unknown";
}

const char* ibv_port_state_str(ibv_port_state state) {
  static const char* const names[] = {"no state change (NOP)", "down", "init", "armed", "active",
                                      "active deferred"};
  const auto index = static_cast<unsigned>(state);
  return index < sizeof(names) / sizeof(names[0]) ? names[index] : "unknown";
}

// Fork protection (madvise DONTFORK on registered memory) has nothing to
// protect here: the fake keeps no page pinned.
int ibv_fork_init(void) { return 0; }

}  // extern "C"
