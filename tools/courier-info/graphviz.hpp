// Renders a DOT graph through Graphviz's `dot` program, for
// courier-info --topology --svg.
#pragma once

#include <string>
#include <string_view>

namespace courier::info {

// The graph `dot_text` laid out and rendered by `dot -T<format>` (dot found
// on PATH): the rendered document. Throws courier::Error saying what is
// missing when Graphviz is not installed, and what dot said when it fails;
// dot's warnings on success go to stderr.
std::string render_with_graphviz(std::string_view dot_text, std::string_view format);

}  // namespace courier::info
