// The receiving end of one ordered stream (a peer's proxy endpoint -> this
// one): which 16-bit sequence numbers arrived, so that an emulated atomic is
// applied only once every message its sender sequenced before it landed,
// and a duplicated delivery is recognised and dropped.
#pragma once

#include <cstdint>
#include <unordered_set>

namespace courier {

class ReceiveStream {
 public:
  enum class Arrival { fresh, duplicate };

  // Records that `seq` arrived. A sequence number below `expected()` or seen
  // already is a duplicate. Numbers are compared modulo 2^16: the sender
  // never has more than 2^15 sequenced messages unaccounted for.
  Arrival arrive(uint16_t seq) {
    const uint16_t ahead = static_cast<uint16_t>(seq - expected_);
    if (ahead >= 0x8000u) return Arrival::duplicate;
    if (ahead != 0) {
      return early_.insert(seq).second ? Arrival::fresh : Arrival::duplicate;
    }
    ++expected_;
    while (early_.erase(expected_) != 0) ++expected_;
    return Arrival::fresh;
  }

  // True once `seq` and every number before it arrived.
  bool complete_through(uint16_t seq) const {
    return static_cast<uint16_t>(expected_ - 1 - seq) < 0x8000u;
  }

  // The lowest sequence number not yet arrived ("last seen" + 1).
  uint16_t expected() const { return expected_; }
  // Arrived ahead of a gap.
  size_t early() const { return early_.size(); }

 private:
  uint16_t expected_ = 0;
  std::unordered_set<uint16_t> early_;
};

}  // namespace courier
