#include "python/src/python_bootstrap.hpp"

#include <nanobind/stl/shared_ptr.h>

#include <cstring>
#include <string>
#include <utility>

#include "courier/error.hpp"
#include "python/src/bindings.hpp"

namespace nb = nanobind;

namespace courier::python {

CallbackBootstrap::CallbackBootstrap(int rank, int size, nb::object allgather, nb::object barrier)
    : rank_(rank), size_(size), allgather_(std::move(allgather)), barrier_(std::move(barrier)) {
  if (size <= 0 || rank < 0 || rank >= size) {
    throw courier::Error("CallbackBootstrap: rank " + std::to_string(rank) +
                         " is outside a job of size " + std::to_string(size));
  }
}

CallbackBootstrap::~CallbackBootstrap() {
  if (!interpreter_alive()) {
    // At interpreter exit: the callables cannot be released any more.
    allgather_.release();
    barrier_.release();
    return;
  }
  // The last owner may be a Context destroyed without the GIL.
  nb::gil_scoped_acquire gil;
  allgather_.reset();
  barrier_.reset();
}

std::vector<std::byte> CallbackBootstrap::allgather(std::span<const std::byte> mine) {
  nb::gil_scoped_acquire gil;
  // Destructors (a Buffer's collective teardown) may call this while a
  // Python exception is pending: set it aside for the call.
  nb::error_scope pending;
  try {
    nb::bytes block(mine.data(), mine.size());
    nb::object result = allgather_(block);
    if (!nb::isinstance<nb::bytes>(result)) {
      throw courier::Error("bootstrap (python): allgather returned a " +
                           nb::cast<std::string>(nb::str(result.type().attr("__name__"))) +
                           ", not bytes");
    }
    nb::bytes all = nb::borrow<nb::bytes>(result);
    if (all.size() != mine.size() * static_cast<size_t>(size_)) {
      throw courier::Error("bootstrap (python): allgather returned " + std::to_string(all.size()) +
                           " bytes where " + std::to_string(size_) + " ranks x " +
                           std::to_string(mine.size()) + " were expected");
    }
    std::vector<std::byte> out(all.size());
    if (!out.empty()) std::memcpy(out.data(), all.c_str(), out.size());
    return out;
  } catch (nb::python_error& e) {
    throw courier::Error(std::string("bootstrap (python): allgather failed: ") + e.what());
  }
}

void CallbackBootstrap::barrier() {
  nb::gil_scoped_acquire gil;
  nb::error_scope pending;
  try {
    barrier_();
  } catch (nb::python_error& e) {
    throw courier::Error(std::string("bootstrap (python): barrier failed: ") + e.what());
  }
}

void bind_bootstrap(nb::module_& m) {
  nb::class_<CallbackBootstrap>(m, "CallbackBootstrap",
                                "An already joined job whose collectives are Python callables "
                                "(courier.deep_ep builds one from a torch.distributed group).")
      .def(nb::init<int, int, nb::object, nb::object>(), nb::arg("rank"), nb::arg("size"),
           nb::arg("allgather"), nb::arg("barrier"),
           "allgather(bytes) -> bytes returns every rank's block in rank order; barrier() waits "
           "for all ranks.")
      .def_prop_ro("rank", &CallbackBootstrap::rank, "This rank.")
      .def_prop_ro("size", &CallbackBootstrap::size, "The number of ranks.");
}

}  // namespace courier::python
