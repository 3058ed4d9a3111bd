// courier.Error: every courier::Error thrown by the library reaches Python
// as this exception, with the C++ message unchanged.
#include "courier/error.hpp"
#include "python/src/bindings.hpp"

namespace nb = nanobind;

namespace courier::python {

void bind_errors(nb::module_& m) {
  nb::exception<courier::Error> error(m, "Error", PyExc_RuntimeError);
  error.attr("__module__") = "courier";
  error.attr("__doc__") = "A failure reported by Courier; the message names what is wrong.";
}

}  // namespace courier::python
