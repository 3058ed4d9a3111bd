// The reliable-connected and datagram protocol between fake HCAs. The
// requester side (fake_requester.cpp) transmits send WRs in post order and
// turns responses into completions; the responder side (fake_responder.cpp)
// checks requests as real hardware does and applies them to local memory.
// The engine calls all of these with the HCA's mutex held.
#pragma once

#include <optional>

#include "fake_engine.hpp"
#include "fake_hca.hpp"
#include "fake_wire.hpp"

namespace courier::fake_verbs {

// Transmits what every QP may send now, fails WRs whose time is up, and
// returns the earliest time the engine must look again (nothing: no timer).
std::optional<Clock::time_point> pump_send_queues(Hca& hca, Links& links, Clock::time_point now);

// A response from a responder, for one of this HCA's QPs.
void on_response(Hca& hca, const FrameHeader& response, Clock::time_point now);

// The stream `connection_id` ended (peer process gone or device closed): the
// WRs waiting on it fail with IBV_WC_RETRY_EXC_ERR.
void on_connection_lost(Hca& hca, uint64_t connection_id);

// A request for one of this HCA's QPs; RC requests are answered on `reply`.
void on_request(Hca& hca, const Frame& request, Connection& reply);

}  // namespace courier::fake_verbs
