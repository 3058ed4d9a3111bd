// How the fake verbs device refuses things: a line on stderr naming the verb
// and the reason (the fake never refuses silently), and the errno value.
#pragma once

#include <cerrno>
#include <cstdarg>

namespace courier::fake_verbs {

// Prints "fake verbs: <verb>: <reason>" to stderr and returns `error`.
[[gnu::format(printf, 3, 4)]] int refuse(int error, const char* verb, const char* format, ...);

// As refuse(), and also sets errno (for the verbs that return NULL).
[[gnu::format(printf, 3, 4)]] void refuse_errno(int error, const char* verb, const char* format,
                                                ...);

}  // namespace courier::fake_verbs
