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
//     [63:56] kind (SemanticCookie)
//     user:          [31:0]  index of the operation in the layer's table of
//                            posts in flight (which holds the proxy's cookie)
//     atomic request,
//     atomic answer: [39:24] peer   [7:0] mailbox slot
//     barrier:       [39:24] peer
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
enum class SemanticKind : uint8_t { user = 0, request = 1, answer = 2, barrier = 3 };

constexpr SemanticKind kind(uint64_t cookie) { return static_cast<SemanticKind>(cookie >> 56); }
constexpr uint64_t of_user_post(uint32_t index) { return index; }
constexpr uint32_t user_index(uint64_t cookie) { return static_cast<uint32_t>(cookie); }
constexpr uint64_t of_internal(SemanticKind kind, uint32_t peer, uint32_t slot) {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (uint64_t{peer & 0xffffu} << 24) |
         (slot & 0xffu);
}
constexpr uint32_t internal_peer(uint64_t cookie) {
  return static_cast<uint32_t>((cookie >> 24) & 0xffffu);
}
constexpr uint32_t internal_slot(uint64_t cookie) { return static_cast<uint32_t>(cookie & 0xffu); }

}  // namespace courier::cookie
