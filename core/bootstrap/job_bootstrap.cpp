#include "core/bootstrap/job_bootstrap.hpp"

namespace courier {

namespace {

// A job of one process needs no rendezvous.
class SingleProcessBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view kind() const override { return "single"; }
  std::vector<std::byte> allgather(std::span<const std::byte> mine) override {
    return {mine.begin(), mine.end()};
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Bootstrap> join_job(const JobInfo& job, int timeout_s, Logger& log) {
  if (job.use_mpi) return make_mpi_bootstrap(log);
  if (job.world_size == 1) return std::make_unique<SingleProcessBootstrap>();
  BootstrapOptions options;
  options.rank = job.rank;
  options.world_size = job.world_size;
  options.host = job.bootstrap_host;
  options.port = job.bootstrap_port;
  options.job_token = job.job_token;
  options.timeout_s = timeout_s;
  return make_tcp_bootstrap(options, log);
}

}  // namespace courier
