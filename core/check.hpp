// Helpers to raise courier::Error with a formatted, contextual message.
#pragma once

#include <fmt/format.h>

#include <utility>

#include "courier/error.hpp"

namespace courier {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// A refusal every rank of a collective call raises together (CallRefused).
template <class... Args>
[[noreturn]] void refuse_call(fmt::format_string<Args...> format, Args&&... args) {
  throw CallRefused(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace courier
