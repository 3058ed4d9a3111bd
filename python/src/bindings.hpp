// The parts of the courier._courier module, one per responsibility; each
// adds its Python names to the module (module.cpp calls them in order).
#pragma once

#include <nanobind/nanobind.h>

namespace courier::python {

void bind_errors(nanobind::module_& m);     // errors.cpp: courier.Error
void bind_dlpack(nanobind::module_& m);     // dlpack_bridge.cpp: TensorRef, DtypeView
void bind_bootstrap(nanobind::module_& m);  // python_bootstrap.cpp: CallbackBootstrap
void bind_context(nanobind::module_& m);    // context_bindings.cpp: Context
void bind_ep(nanobind::module_& m);         // ep_bindings.cpp: EpBuffer and its results

// False once the interpreter is gone or shutting down: code run from C++
// destructors and DLPack deleters must then not take the GIL.
inline bool interpreter_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

}  // namespace courier::python
