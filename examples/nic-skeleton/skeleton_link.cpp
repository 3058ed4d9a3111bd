#include "skeleton_link.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "skeleton_backend.hpp"
#include "skeleton_error.hpp"

namespace courier::skeleton {
namespace {

constexpr int kMaxParts = 64;                // iovecs per sendmsg
constexpr size_t kDiscardBytes = 64 * 1024;  // scratch for the bytes of a refused write

uint64_t frame_bytes(const FrameHeader& header) {
  return sizeof header + (header.kind == FrameKind::kWrite ? header.length : 0);
}

const char* refusal_text(int status) {
  switch (status) {
    case kBadKeyStatus:
      return "its remote key names no region registered at the target";
    case kOutOfRangeStatus:
      return "its remote range runs past the end of the target's region";
    default:
      return errno_text(-status);
  }
}

}  // namespace

// ---- FrameQueue -----------------------------------------------------------

void FrameQueue::push(const FrameHeader& header, const std::byte* payload) {
  frames_.push_back(Frame{header, payload});
}

int FrameQueue::flush(const Socket& socket, const char* what) {
  while (!frames_.empty()) {
    // Gather the start of the queue into one sendmsg: many small frames
    // (ACKs) cost one system call.
    iovec parts[kMaxParts];
    int count = 0;
    uint64_t skip = front_sent_;
    for (const Frame& frame : frames_) {
      if (count + 2 > kMaxParts) break;
      const auto* header = reinterpret_cast<const std::byte*>(&frame.header);
      if (skip < sizeof frame.header) {
        parts[count++] = {const_cast<std::byte*>(header + skip), sizeof frame.header - skip};
        skip = 0;
      } else {
        skip -= sizeof frame.header;
      }
      const uint64_t payload = frame_bytes(frame.header) - sizeof frame.header;
      if (payload > skip) {
        parts[count++] = {const_cast<std::byte*>(frame.payload + skip), payload - skip};
      }
      skip = 0;
    }
    const ssize_t sent = send_some(socket, parts, count, what);
    if (sent < 0) return static_cast<int>(sent);
    if (sent == 0) return 0;  // the socket is full: the rest goes at the next progress
    // Drop what went out.
    uint64_t left = static_cast<uint64_t>(sent);
    while (left > 0) {
      const uint64_t rest = frame_bytes(frames_.front().header) - front_sent_;
      if (left < rest) {
        front_sent_ += left;
        break;
      }
      left -= rest;
      frames_.pop_front();
      front_sent_ = 0;
    }
  }
  return 0;
}

// ---- HeaderReader ---------------------------------------------------------

int HeaderReader::read(const Socket& socket, FrameHeader* out, const char* what) {
  while (got_ < sizeof bytes_) {
    const ssize_t got = receive_some(socket, bytes_ + got_, sizeof bytes_ - got_, what);
    if (got <= 0) return static_cast<int>(got);
    got_ += static_cast<size_t>(got);
  }
  std::memcpy(out, bytes_, sizeof *out);
  got_ = 0;
  if (out->magic != kFrameMagic) {
    return fail(-EPROTO,
                "%s: a frame without the magic number (0x%08x): the stream lost its framing", what,
                out->magic);
  }
  return 1;
}

// ---- OutgoingLink ---------------------------------------------------------

OutgoingLink::OutgoingLink(uint32_t peer, uint32_t own_rank, Socket socket,
                           CompletionQueue& completions)
    : peer_(peer), socket_(std::move(socket)), completions_(completions) {
  std::snprintf(what_, sizeof what_, "stream to rank %u", peer);
  FrameHeader hello;
  hello.kind = FrameKind::kHello;
  hello.rank = own_rank;
  outbox_.push(hello, nullptr);
  if (const int rc = outbox_.flush(socket_, what_); rc != 0) break_link(rc);
}

int OutgoingLink::post(uint64_t key, uint64_t offset, const std::byte* payload, uint64_t length,
                       bool with_imm, uint32_t imm, uint64_t cookie) {
  if (!broken_.empty()) {
    return fail(-ECONNRESET, "post_write to rank %u: the stream failed earlier: %s", peer_,
                broken_.c_str());
  }
  // A NIC builds a work request here and rings the doorbell; the skeleton
  // queues a frame and lets the socket take what it can.
  FrameHeader write;
  write.kind = FrameKind::kWrite;
  write.flags = with_imm ? kFrameImm : 0;
  write.sequence = next_sequence_++;
  write.key = key;
  write.offset = offset;
  write.length = length;
  write.imm = imm;
  outbox_.push(write, payload);
  in_flight_.push_back({write.sequence, cookie});
  // A failure here completes this write (and the others in flight) with the
  // error, like a NIC whose connection broke after the doorbell.
  if (const int rc = outbox_.flush(socket_, what_); rc != 0) break_link(rc);
  return 0;
}

void OutgoingLink::progress() {
  if (!broken_.empty()) return;
  if (const int rc = outbox_.flush(socket_, what_); rc != 0) return break_link(rc);
  // ACKs come only for writes in flight; an idle stream is not read.
  while (!in_flight_.empty()) {
    FrameHeader ack;
    const int rc = acks_.read(socket_, &ack, what_);
    if (rc == 0) return;
    if (rc < 0) return break_link(rc);
    const InFlight oldest = in_flight_.front();
    if (ack.kind != FrameKind::kAck || ack.sequence != oldest.sequence) {
      return break_link(
          fail(-EPROTO, "%s: expected the ACK of write %llu, got frame kind %u for %llu", what_,
               static_cast<unsigned long long>(oldest.sequence), static_cast<unsigned>(ack.kind),
               static_cast<unsigned long long>(ack.sequence)));
    }
    in_flight_.pop_front();
    if (ack.status != 0) {
      // The reason travels as a status; the text is this thread's
      // last_error, which the core shows next to the failed completion.
      fail(ack.status, "write (cookie %llu) to rank %u was refused by the target: %s",
           static_cast<unsigned long long>(oldest.cookie), peer_, refusal_text(ack.status));
    }
    completions_.push_tx(peer_, oldest.cookie, ack.status);
  }
}

void OutgoingLink::break_link(int status) {
  broken_ = last_error();
  for (const InFlight& write : in_flight_) completions_.push_tx(peer_, write.cookie, status);
  in_flight_.clear();
  outbox_.clear();
  socket_ = Socket();
}

// ---- IncomingLink ---------------------------------------------------------

IncomingLink::IncomingLink(Socket socket, const RegionTable& regions, CompletionQueue& completions,
                           const Backend& backend)
    : socket_(std::move(socket)), regions_(regions), completions_(completions), backend_(backend) {
  std::snprintf(what_, sizeof what_, "stream from an unnamed rank");
}

int IncomingLink::progress() {
  int rc = read_frames();
  // ACKs go out even when reading stopped; a broken link sends nothing.
  if (rc == 0) rc = acks_.flush(socket_, what_);
  if (rc != 0 && !(rc == -ECONNRESET && headers_.at_boundary() && !in_payload_)) {
    backend_.log(COURIER_LOG_WARN, "%s", last_error());
  }
  return rc;
}

int IncomingLink::read_frames() {
  for (;;) {
    if (in_payload_) {
      const int rc = read_payload();
      if (rc <= 0) return rc;  // 0: the rest of the payload has not arrived yet
      finish_write();
      continue;
    }
    // Back-pressure: with rx_depth notifications waiting, leave further
    // frames in the socket until the core polls them away.
    if (completions_.rx_full()) return 0;
    FrameHeader header;
    const int rc = headers_.read(socket_, &header, what_);
    if (rc <= 0) return rc;
    if (const int started = start_frame(header); started != 0) return started;
  }
}

int IncomingLink::start_frame(const FrameHeader& header) {
  if (header.kind == FrameKind::kHello) {
    peer_ = header.rank;
    std::snprintf(what_, sizeof what_, "stream from rank %u", peer_);
    return 0;
  }
  if (header.kind != FrameKind::kWrite || peer_ == UINT32_MAX) {
    return fail(-EPROTO, "%s: unexpected frame kind %u%s", what_,
                static_cast<unsigned>(header.kind), peer_ == UINT32_MAX ? " before HELLO" : "");
  }
  // A NIC checks the rkey and the bounds in hardware and answers a remote
  // access error; nothing of a refused write reaches memory.
  current_ = header;
  destination_ = regions_.resolve(header.key, header.offset, header.length, &refusal_);
  received_ = 0;
  in_payload_ = true;
  if (!destination_) {
    backend_.log(COURIER_LOG_INFO,
                 "%s: refused write %llu of %llu bytes at offset %llu, key %llu: %s", what_,
                 static_cast<unsigned long long>(header.sequence),
                 static_cast<unsigned long long>(header.length),
                 static_cast<unsigned long long>(header.offset),
                 static_cast<unsigned long long>(header.key), refusal_text(refusal_));
    if (!discard_) discard_ = std::make_unique<std::byte[]>(kDiscardBytes);
  }
  return 0;
}

// 1 when the whole payload is in, 0 when more has to arrive, -errno.
int IncomingLink::read_payload() {
  while (received_ < current_.length) {
    const uint64_t rest = current_.length - received_;
    std::byte* into = destination_ ? destination_ + received_ : discard_.get();
    const size_t chunk = destination_ ? rest : std::min<uint64_t>(rest, kDiscardBytes);
    const ssize_t got = receive_some(socket_, into, chunk, what_);
    if (got <= 0) return static_cast<int>(got);
    received_ += static_cast<uint64_t>(got);
  }
  return 1;
}

void IncomingLink::finish_write() {
  in_payload_ = false;
  const int status = destination_ ? 0 : refusal_;
  // The bytes are in place before anyone hears of them: first the
  // notification here, then the ACK that completes the write at the
  // initiator.
  if (status == 0 && (current_.flags & kFrameImm)) {
    completions_.push_rx_imm(peer_, current_.imm, current_.length);
  }
  FrameHeader ack;
  ack.kind = FrameKind::kAck;
  ack.sequence = current_.sequence;
  ack.status = status;
  acks_.push(ack, nullptr);
}

}  // namespace courier::skeleton
