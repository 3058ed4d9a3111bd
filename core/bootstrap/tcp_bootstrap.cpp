// make_tcp_bootstrap: checks the options, then takes rank 0's role (host the
// rendezvous) or a client's.
#include "core/bootstrap/tcp_bootstrap.hpp"

#include "core/bootstrap/bootstrap_wire.hpp"
#include "core/check.hpp"

namespace courier {

namespace {

void validate(const BootstrapOptions& options) {
  if (options.world_size < 1) {
    fail("bootstrap: options.world_size = {} is invalid: a job has at least 1 rank",
         options.world_size);
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    fail("bootstrap: options.rank = {} is outside [0, {}) (options.world_size = {})", options.rank,
         options.world_size, options.world_size);
  }
  if (options.timeout_s <= 0) {
    fail("bootstrap: options.timeout_s = {} is invalid: expected a positive number of seconds",
         options.timeout_s);
  }
  if (options.job_token.size() > wire::kMaxTokenBytes) {
    fail("bootstrap: options.job_token is {} bytes long; the limit is {} bytes",
         options.job_token.size(), wire::kMaxTokenBytes);
  }
  if (options.world_size == 1) return;
  if (options.port == 0) {
    fail(
        "bootstrap: options.port = 0 is invalid for a {}-rank job: every rank must know rank "
        "0's port in advance",
        options.world_size);
  }
  if (options.rank > 0 && options.host.empty()) {
    fail("bootstrap: rank {} has no options.host: it needs rank 0's address to connect to",
         options.rank);
  }
}

}  // namespace

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const BootstrapOptions& options, Logger& log,
                                              const TcpBootstrapTuning& tuning) {
  validate(options);
  if (options.rank == 0) return make_tcp_rendezvous_host(options, log, tuning);
  return make_tcp_rendezvous_client(options, log, tuning);
}

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const BootstrapOptions& options, Logger& log) {
  return make_tcp_bootstrap(options, log, TcpBootstrapTuning{});
}

}  // namespace courier
