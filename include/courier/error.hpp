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

}  // namespace courier
