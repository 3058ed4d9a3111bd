// A Bootstrap (courier/bootstrap.hpp) whose collectives are Python
// callables, so that a job already joined in Python (a torch.distributed
// process group) hands its out-of-band channel to a Context.
#pragma once

#include <nanobind/nanobind.h>

#include <span>
#include <string_view>
#include <vector>

#include "courier/bootstrap.hpp"

namespace courier::python {

class CallbackBootstrap : public Bootstrap {
 public:
  // allgather(bytes) -> bytes: every rank's block, concatenated in rank
  // order; barrier() -> None. Both are collective over the same ranks.
  CallbackBootstrap(int rank, int size, nanobind::object allgather, nanobind::object barrier);
  ~CallbackBootstrap() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view kind() const override { return "python"; }
  // Take the GIL, call the callable; a Python exception becomes a
  // courier::Error with its text.
  std::vector<std::byte> allgather(std::span<const std::byte> mine) override;
  void barrier() override;

 private:
  int rank_;
  int size_;
  nanobind::object allgather_;
  nanobind::object barrier_;
};

}  // namespace courier::python
