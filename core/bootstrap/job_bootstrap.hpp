// Joins the job described by the configuration: the TCP rendezvous or MPI,
// or nothing at all for a job of one process.
#pragma once

#include <memory>

#include "core/bootstrap/bootstrap.hpp"
#include "core/config.hpp"

namespace courier {

std::unique_ptr<Bootstrap> join_job(const JobInfo& job, int timeout_s, Logger& log);

}  // namespace courier
