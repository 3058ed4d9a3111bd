// Courier's exception type. Every failure the public API reports is a
// courier::Error whose message names the thing that is wrong (variable,
// file, rank, argument) and what was expected instead.
#pragma once

#include <stdexcept>
#include <string>

namespace courier {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective call that every rank gave up on together before any data
// moved, because some rank's arguments were wrong or the ranks' configurations
// differ: the rank at fault says why, the others name it. The object that
// refused stays usable; the next call of every rank goes ahead as usual.
class CallRefused : public Error {
 public:
  using Error::Error;
};

}  // namespace courier
