// courier.Context: one rank's view of the job (include/courier/context.hpp).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "courier/bootstrap.hpp"
#include "courier/context.hpp"
#include "python/src/bindings.hpp"
#include "python/src/python_bootstrap.hpp"

namespace nb = nanobind;

namespace courier::python {

namespace {

void make_context(Context* self, const std::optional<std::map<std::string, std::string>>& env,
                  std::shared_ptr<CallbackBootstrap> bootstrap) {
  ContextOptions options;
  if (env) options.env.assign(env->begin(), env->end());
  options.bootstrap = std::move(bootstrap);
  // Joining waits for the other ranks (and a Python bootstrap takes the GIL
  // back for its collectives).
  nb::gil_scoped_release released;
  new (self) Context(options);
}

nb::bytes allgather(Context& context, nb::bytes mine) {
  std::vector<std::byte> block(mine.size());
  if (!block.empty()) std::memcpy(block.data(), mine.c_str(), block.size());
  std::vector<std::byte> all;
  {
    nb::gil_scoped_release released;
    all = context.bootstrap().allgather(block);
  }
  return nb::bytes(all.data(), all.size());
}

}  // namespace

void bind_context(nb::module_& m) {
  nb::class_<Context>(m, "Context",
                      "One rank's view of a Courier job: configuration, backends, bootstrap, "
                      "proxies. Creating one is collective.")
      .def("__init__", &make_context, nb::arg("env") = nb::none(),
           nb::arg("bootstrap") = nb::none(),
           "Join the job. `env` overrides COURIER_* variables of the process environment; "
           "`bootstrap` is an already joined job (CallbackBootstrap), otherwise the job the "
           "environment names (courier-run, torchrun, ...).")
      .def_prop_ro("rank", &Context::rank, "This rank.")
      .def_prop_ro("world_size", &Context::world_size, "The number of ranks.")
      .def_prop_ro("gpu_backend", &Context::gpu_backend, "The GPU backend in use ('host', ...).")
      .def_prop_ro("nic_backend", &Context::nic_backend, "The NIC backend in use ('ofi', ...).")
      .def_prop_ro(
          "bootstrap_kind", [](Context& c) { return std::string(c.bootstrap().kind()); },
          "How the ranks exchange data out of band: 'tcp', 'mpi' or 'python'.")
      .def_prop_ro("rank_hosts", &Context::rank_hosts,
                   "Per rank, the index of its host (hosts in the order of their lowest rank).")
      .def("barrier", &Context::barrier, nb::call_guard<nb::gil_scoped_release>(),
           "Collective: returns once every rank got here.")
      .def("allgather", &allgather, nb::arg("mine"),
           "Collective, out of band: every rank's `mine` (all of one length), concatenated in "
           "rank order.");
}

}  // namespace courier::python
