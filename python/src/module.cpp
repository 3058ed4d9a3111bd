// courier._courier: the C++ library as a Python extension (docs/python.md).
// The pure-Python package courier/ builds its public API on top.
#include "python/src/bindings.hpp"

NB_MODULE(_courier, m) {
  m.doc() = "Courier's C++ library: Context, the expert-parallel Buffer, DLPack tensors.";
  courier::python::bind_errors(m);
  courier::python::bind_dlpack(m);
  courier::python::bind_bootstrap(m);
  courier::python::bind_context(m);
  courier::python::bind_ep(m);
}
