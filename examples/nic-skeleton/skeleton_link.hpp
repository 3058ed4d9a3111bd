// The two ends of one stream between an initiator and a target endpoint:
// what a NIC's reliable connection (an RC queue pair) does in hardware.
//
//   OutgoingLink (initiator)            IncomingLink (target)
//     post(): queue HELLO/WRITE  ---->    progress(): read WRITE, check the
//                                          key and bounds, copy the bytes into
//                                          the region, queue RX_IMM, send ACK
//     progress(): read ACK,      <----
//       queue the TX completion
//
// One stream per peer, read in order, so writes land in the order they were
// posted (CAP_ORDERED_WRITES); the TX completion waits for the ACK, which the
// target sends after the bytes are in place (CAP_DELIVERY_COMPLETE).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "skeleton_completions.hpp"
#include "skeleton_memory.hpp"
#include "skeleton_socket.hpp"
#include "skeleton_wire.hpp"

namespace courier::skeleton {

class Backend;

// Frames waiting for room in a socket, sent in order. A WRITE's payload is
// sent straight from the registered source memory, which the caller keeps
// intact until the TX completion (a NIC's DMA engine reads it the same way).
class FrameQueue {
 public:
  void push(const FrameHeader& header, const std::byte* payload);
  // Sends as much as the socket takes now. 0, or -errno when it failed.
  int flush(const Socket& socket, const char* what);
  bool empty() const { return frames_.empty(); }
  void clear() { frames_.clear(), front_sent_ = 0; }

 private:
  struct Frame {
    FrameHeader header;
    const std::byte* payload;  // header.length bytes (kWrite only)
  };
  std::deque<Frame> frames_;
  uint64_t front_sent_ = 0;  // bytes of the first frame already sent
};

// Collects one FrameHeader from a non-blocking stream, across calls.
class HeaderReader {
 public:
  // 1: a whole header is in *out; 0: not yet; -errno: the stream failed or
  // was closed (-ECONNRESET).
  int read(const Socket& socket, FrameHeader* out, const char* what);
  // Nothing of a header read yet: a close here is a clean one.
  bool at_boundary() const { return got_ == 0; }

 private:
  std::byte bytes_[sizeof(FrameHeader)];
  size_t got_ = 0;
};

// The initiator's side of the stream to one peer rank.
class OutgoingLink {
 public:
  // Sends HELLO (our rank) first, so the target can name us in its RX_IMM
  // completions (CAP_IMM_SOURCE).
  OutgoingLink(uint32_t peer, uint32_t own_rank, Socket socket, CompletionQueue& completions);

  // Queues one WRITE and sends what the socket takes. -ECONNRESET (and a
  // reason) when the link already failed.
  int post(uint64_t key, uint64_t offset, const std::byte* payload, uint64_t length, bool with_imm,
           uint32_t imm, uint64_t cookie);
  // Sends queued frames and turns ACKs into TX completions. When the stream
  // fails, every write in flight completes with the error.
  void progress();
  bool idle() const { return in_flight_.empty(); }

 private:
  void break_link(int status);

  struct InFlight {
    uint64_t sequence;
    uint64_t cookie;
  };
  const uint32_t peer_;
  Socket socket_;
  CompletionQueue& completions_;
  FrameQueue outbox_;
  HeaderReader acks_;
  std::deque<InFlight> in_flight_;
  uint64_t next_sequence_ = 0;
  std::string broken_;  // why the link failed; empty while it works
  char what_[48];       // "stream to rank N", for messages
};

// The target's side of one accepted stream.
class IncomingLink {
 public:
  IncomingLink(Socket socket, const RegionTable& regions, CompletionQueue& completions,
               const Backend& backend);

  // Reads and applies frames, sends ACKs. 0 while the link lives;
  // -ECONNRESET when the initiator closed it between frames (normal at the
  // end of a job); another -errno when it broke (logged here).
  int progress();

 private:
  int read_frames();
  int start_frame(const FrameHeader& header);
  int read_payload();
  void finish_write();

  Socket socket_;
  const RegionTable& regions_;
  CompletionQueue& completions_;
  const Backend& backend_;
  HeaderReader headers_;
  FrameQueue acks_;
  uint32_t peer_ = UINT32_MAX;  // from HELLO
  // The WRITE being received.
  bool in_payload_ = false;
  FrameHeader current_{};
  std::byte* destination_ = nullptr;  // nullptr: refused, the bytes are discarded
  int refusal_ = 0;
  uint64_t received_ = 0;
  std::unique_ptr<std::byte[]> discard_;  // allocated at the first refused write
  char what_[48];                         // "stream from rank N", for messages
};

}  // namespace courier::skeleton
