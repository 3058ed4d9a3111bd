// courier.Error: every courier::Error thrown by the library reaches Python
// as this exception, with the C++ message unchanged. courier.CallRefused, its
// subclass, is a collective call every rank refused together (the object
// stays usable).
#include "courier/error.hpp"
#include "python/src/bindings.hpp"

namespace nb = nanobind;

namespace courier::python {

void bind_errors(nb::module_& m) {
  nb::exception<courier::Error> error(m, "Error", PyExc_RuntimeError);
  error.attr("__module__") = "courier";
  error.attr("__doc__") = "A failure reported by Courier; the message names what is wrong.";
  // Registered after Error: nanobind tries the newest translator first.
  nb::exception<courier::CallRefused> refused(m, "CallRefused", error);
  refused.attr("__module__") = "courier";
  refused.attr("__doc__") =
      "A collective call every rank refused together before any data moved (some rank's "
      "arguments were wrong, or the ranks' configurations differ); the object stays usable.";
}

}  // namespace courier::python
