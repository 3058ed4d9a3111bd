// The 64-bit completion cookies of the transport stack (docs/wire-formats.md,
// "Completion cookies"). Two layers own a cookie space each; a TX completion
// comes back with the cookie its post carried:
//
//   the proxy's, handed to the top of the stack (the semantics layer):
//     [63:48] the channel's index among the proxy thread's channels
//     [47:0]  the command's ticket modulo 2^48 (the full ticket is rebuilt
//             from the channel's completion prefix, always within one ring
//             depth below it)
//
//   the semantics layer's, handed to the layers below it:
//     [63] = 0: a caller's WRITE, with the caller's cookie as it is (a plain
//               write on an ordered transport: the layer keeps nothing for
//               it; the proxy's cookies fit up to 32768 channels a thread)
//     [63] = 1: [62:56] kind (SemanticKind)
//       user:          [31:0]  index of the operation in the layer's table
//                              of posts in flight (which holds the caller's
//                              cookie and peer): atomics, writes with
//                              immediate data or on unordered transports,
//                              and caller cookies with bit 63 set
//       atomic request,
//       atomic answer: [55:32] peer   [7:0] mailbox slot
//       barrier:       [55:32] peer
#pragma once

#include <cstdint>

namespace courier::cookie {

// The proxy's cookies.
inline constexpr uint64_t kTicketBits = 48;
inline constexpr uint64_t kTicketMask = (uint64_t{1} << kTicketBits) - 1;

constexpr uint64_t of_command(uint32_t channel_slot, uint64_t ticket) {
  return (uint64_t{channel_slot} << kTicketBits) | (ticket & kTicketMask);
}
constexpr uint32_t channel_slot(uint64_t cookie) {
  return static_cast<uint32_t>(cookie >> kTicketBits);
}
// The full ticket of a command cookie, given the channel's completion prefix.
constexpr uint64_t ticket(uint64_t cookie, uint64_t prefix) {
  return prefix + (((cookie & kTicketMask) - prefix) & kTicketMask);
}

// The semantics layer's cookies.
enum class SemanticKind : uint8_t { write = 0, user = 1, request = 2, answer = 3, barrier = 4 };

inline constexpr uint64_t kInternal = uint64_t{1} << 63;

constexpr SemanticKind kind(uint64_t cookie) {
  return (cookie & kInternal) == 0 ? SemanticKind::write
                                   : static_cast<SemanticKind>((cookie >> 56) & 0x7f);
}
// Whether a caller's cookie can go down as it is (the write form).
constexpr bool fits_write(uint64_t caller_cookie) { return (caller_cookie & kInternal) == 0; }

constexpr uint64_t of_user_post(uint32_t index) {
  return kInternal | (uint64_t{static_cast<uint8_t>(SemanticKind::user)} << 56) | index;
}
constexpr uint32_t user_index(uint64_t cookie) { return static_cast<uint32_t>(cookie); }
constexpr uint64_t of_internal(SemanticKind kind, uint32_t peer, uint32_t slot) {
  return kInternal | (uint64_t{static_cast<uint8_t>(kind)} << 56) |
         (uint64_t{peer & 0xffffffu} << 32) | (slot & 0xffu);
}
constexpr uint32_t internal_peer(uint64_t cookie) {
  return static_cast<uint32_t>((cookie >> 32) & 0xffffffu);
}
constexpr uint32_t internal_slot(uint64_t cookie) { return static_cast<uint32_t>(cookie & 0xffu); }

}  // namespace courier::cookie
