// Rank 0's side of the TCP bootstrap: hosts the rendezvous.
//
// Join phase: one poll() loop over the listening socket, every connection
// that has not yet said hello, and every rank that already joined. Each
// unauthenticated connection gets its own hello deadline, so a silent or
// hostile peer is refused without holding up anyone else. Anything wrong with
// a connection (token, format, rank, size) refuses that connection with a
// logged reason; the job keeps waiting for the real ranks.
//
// Collectives: gather one block per rank (again one poll() loop, so a large
// block from one rank never waits behind another), check them, and send the
// concatenation back. A failure of the job (timeout, a rank that hung up, a
// size mismatch) is sent as an error frame to every rank still connected, so
// all ranks throw the same message.
//
// Liveness (docs/bootstrap.md): between collectives a monitor thread watches
// every rank's connection. A connection that closes without a goodbye means
// the rank died: rank 0 sends a gone frame naming it to every other rank and
// reports it to its own subscriber. A block that arrives early (a rank
// entered the next collective first) is kept for that collective.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <utility>

#include "core/bootstrap/bootstrap_wire.hpp"
#include "core/bootstrap/collective_messages.hpp"
#include "core/bootstrap/peer_liveness.hpp"
#include "core/bootstrap/result_tree.hpp"
#include "core/bootstrap/socket.hpp"
#include "core/bootstrap/tcp_bootstrap.hpp"
#include "core/check.hpp"
#include "core/log.hpp"

namespace courier {

namespace {

constexpr std::string_view kComponent = "bootstrap";

// Connections that have not yet sent a hello, beyond the ranks we expect. A
// flood of idle connections is refused at accept time instead of growing the
// poll set without bound.
constexpr size_t kExtraPendingConnections = 64;
// How often a collective's wait looks for a failure of this rank to announce.
constexpr std::chrono::milliseconds kFailureCheck{100};

// How long rank 0 spends telling the ranks about a failure before it throws.
constexpr std::chrono::milliseconds kErrorNoticeTime{1'000};

// A connection that has not yet said hello.
struct PendingConnection {
  net::Fd fd;
  std::string address;
  net::Deadline hello_deadline;
  wire::FrameReader reader;
};

// A rank that joined.
struct JoinedRank {
  net::Fd fd;
  std::string address;
  // Where it accepts its result-tree children (its hello; 0: none).
  uint16_t tree_port = 0;
  // False after a partial send: the stream is out of frame, so nothing more
  // may be written to it.
  bool writable = true;
  // Frames from this rank, read by the monitor between collectives and by
  // the collectives (a block that arrives early waits here, complete).
  std::optional<wire::FrameReader> reader;
  // It said goodbye: it left the job in order.
  bool departed = false;
  // It sent more than one frame ahead: the monitor keeps off it until the
  // next collective, which sorts it out.
  bool parked = false;
};

class TcpRendezvousHost final : public Bootstrap {
 public:
  TcpRendezvousHost(const BootstrapOptions& options, Logger& log, const TcpBootstrapTuning& tuning)
      : options_(options),
        log_(log),
        tuning_(tuning),
        ranks_(static_cast<size_t>(options.world_size)) {
    if (options_.world_size == 1) return;  // nobody to meet
    if (options_.job_token.empty()) {
      log_.warn(kComponent,
                "no job token is set: any process that reaches port {} can join this job",
                options_.port);
    }
    bool fell_back = false;
    listener_ = net::listen_tcp(options_.host, options_.port, options_.world_size + 16, &fell_back);
    address_ =
        net::format_address(options_.host.empty() ? "0.0.0.0" : options_.host, options_.port);
    if (fell_back) {
      log_.info(kComponent, "{} is not an address of this machine; listening on all addresses",
                options_.host);
    }
    log_.info(kComponent, "rank 0 is waiting for {} ranks at {}", options_.world_size - 1,
              address_);
    accept_ranks();
    for (JoinedRank& peer : ranks_) {
      peer.reader.emplace(options_.max_message_bytes, "max_message_bytes");
    }
    monitor_ = std::make_unique<ConnectionMonitor>(ConnectionMonitor::Hooks{
        [this] { return watch(); }, [this](std::span<const pollfd> fds) { return handle(fds); }});
  }

  ~TcpRendezvousHost() override {
    monitor_.reset();
    // Goodbye: the ranks must not take these connections' closing for rank
    // 0's death. Not while an exception unwinds the stack: then rank 0 is
    // failing, and the others should learn it now.
    if (failure_ || std::uncaught_exceptions() > 0) return;
    const std::vector<std::byte> goodbye =
        wire::encode_frame(wire::FrameType::goodbye, sequence_, {});
    const net::Deadline deadline = net::deadline_after(kErrorNoticeTime);
    for (JoinedRank& peer : ranks_) {
      if (peer.fd && peer.writable && !peer.departed) {
        (void)net::send_all(peer.fd.get(), goodbye, deadline);
      }
    }
  }

  int rank() const override { return 0; }
  int size() const override { return options_.world_size; }
  std::string_view kind() const override { return "tcp"; }
  std::vector<std::byte> allgather(std::span<const std::byte> mine) override;
  void barrier() override { (void)allgather({}); }
  Traffic traffic() const override { return {sent_.load(), received_.load()}; }
  PeerWatch watch_peers(PeerFailureHandler handler) override {
    return notifier_->subscribe(notifier_, std::move(handler));
  }
  // Rank 0's own failure: announced by the monitor between collectives, or
  // by the collective running now (its wait checks every kFailureCheck).
  void report_failure(int suspect, const std::string& message) override {
    {
      std::lock_guard lock(pending_mutex_);
      if (pending_failure_) return;
      pending_failure_.emplace(suspect >= 0 ? suspect : 0, message);
    }
    if (monitor_) monitor_->wake();
  }

 private:
  // A failure report_failure left for the monitor or the collective.
  std::optional<std::pair<int, std::string>> take_pending_failure() {
    std::lock_guard lock(pending_mutex_);
    if (!pending_failure_ || pending_taken_) return std::nullopt;
    pending_taken_ = true;
    return pending_failure_;
  }
  // The monitor's hooks (docs/bootstrap.md, "Liveness").
  std::vector<pollfd> watch();
  bool handle(std::span<const pollfd> fds);
  // After a complete frame is buffered: the outcome of peeking at what
  // follows. nullopt while nothing does; "" when data follows; otherwise
  // why the connection ended.
  std::optional<std::string> peek_end(const JoinedRank& peer) const;
  // Rank `rank` died (`dead`), or a rank failed naming `rank` as the
  // suspect: tells every other rank and the subscriber; later collectives
  // throw `message`.
  void announce_gone(int rank, const std::string& message, bool dead = true);
  [[noreturn]] void fail_gone(int rank, std::string message, bool dead = true) {
    announce_gone(rank, message, dead);
    throw Error(message);
  }
  // Sends `frame` to every rank still connected, then half-closes.
  void broadcast_last_word(const std::vector<std::byte>& frame);
  std::string left_message(int rank, uint64_t sequence) const {
    return fmt::format(
        "bootstrap: rank {} ({}) disconnected during allgather #{}: it left the job (said "
        "goodbye) before taking part",
        rank, ranks_[static_cast<size_t>(rank)].address, sequence);
  }
  void accept_ranks();
  void accept_new_connections(std::vector<PendingConnection>& pending, net::Deadline job_deadline);
  // Registers the rank a complete hello names, or refuses the connection.
  void admit(PendingConnection& connection);
  void refuse(PendingConnection& connection, std::string_view reason);
  // Turns a connection away for now: a busy frame, which the joiner
  // answers by trying again later (until its own timeout).
  void turn_away(PendingConnection& connection, std::string_view reason);
  // Sends `frame`, best effort, and closes the connection without a reset.
  static void say_and_close(PendingConnection& connection, const std::vector<std::byte>& frame);
  void watch_joined_rank(int rank);
  std::vector<int> missing_ranks() const;
  // Tells every connected rank and throws `message` as courier::Error.
  [[noreturn]] void fail_job(std::string message);
  std::chrono::milliseconds hello_timeout() const {
    return std::min(tuning_.hello_timeout,
                    std::chrono::milliseconds(std::chrono::seconds(options_.timeout_s)));
  }

  BootstrapOptions options_;
  Logger& log_;
  TcpBootstrapTuning tuning_;
  std::string address_;
  net::Fd listener_;
  std::vector<JoinedRank> ranks_;  // by rank; entry 0 is this process
  uint64_t sequence_ = 0;
  // Collective bytes moved (traffic()); read from any thread.
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  // Set once the job failed: every later call throws it again.
  std::optional<std::string> failure_;
  // A rank lost while sending the last result: the other ranks completed that
  // collective, so the loss is reported at the next one, to everybody.
  std::optional<std::string> deferred_failure_;
  std::mutex pending_mutex_;
  std::optional<std::pair<int, std::string>> pending_failure_;
  bool pending_taken_ = false;
  // Ranks in the order watch() listed them, for handle().
  std::vector<int> watched_;
  std::shared_ptr<PeerFailureNotifier> notifier_ = std::make_shared<PeerFailureNotifier>();
  // Last: stopped first, before the members it reads go away.
  std::unique_ptr<ConnectionMonitor> monitor_;
};

std::vector<pollfd> TcpRendezvousHost::watch() {
  watched_.clear();
  std::vector<pollfd> fds;
  if (failure_) return fds;
  if (auto failed = take_pending_failure()) {
    announce_gone(failed->first, failed->second, false);
    return fds;
  }
  for (int rank = 1; rank < options_.world_size; ++rank) {
    const JoinedRank& peer = ranks_[static_cast<size_t>(rank)];
    if (!peer.fd || peer.departed || peer.parked) continue;
    fds.push_back({peer.fd.get(), POLLIN, 0});
    watched_.push_back(rank);
  }
  return fds;
}

std::optional<std::string> TcpRendezvousHost::peek_end(const JoinedRank& peer) const {
  std::byte probe{};
  const ssize_t got = ::recv(peer.fd.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got > 0) return std::string();
  if (got == 0) return std::string("closed the connection");
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return std::nullopt;
  return std::string(std::strerror(errno));
}

bool TcpRendezvousHost::handle(std::span<const pollfd> fds) {
  for (size_t i = 0; i < fds.size() && i < watched_.size(); ++i) {
    if (fds[i].revents == 0) continue;
    const int rank = watched_[i];
    JoinedRank& peer = ranks_[static_cast<size_t>(rank)];
    wire::FrameReader& reader = *peer.reader;
    std::string problem;
    if (reader.state() == wire::FrameReader::State::complete) {
      // Its block for the next collective is here; only its end matters now.
      std::optional<std::string> end = peek_end(peer);
      if (!end) continue;
      if (end->empty()) {
        peer.parked = true;
        continue;
      }
      problem = std::move(*end);
    } else {
      switch (reader.read_available(peer.fd.get())) {
        case wire::FrameReader::State::reading:
          continue;
        case wire::FrameReader::State::complete:
          if (reader.header().type == static_cast<uint16_t>(wire::FrameType::goodbye)) {
            log_.debug(kComponent, "rank {} ({}) said goodbye", rank, peer.address);
            peer.departed = true;
            peer.fd.reset();
          }
          if (reader.header().type == static_cast<uint16_t>(wire::FrameType::failed)) {
            if (std::optional<wire::Gone> failed = wire::decode_gone_payload(reader.payload())) {
              announce_gone(failed->rank, failed->message, false);
              return false;
            }
          }
          // Anything else is checked by the collective it belongs to.
          continue;
        case wire::FrameReader::State::closed:
        case wire::FrameReader::State::failed:
          problem = reader.problem();
          break;
        case wire::FrameReader::State::malformed:
          peer.parked = true;  // the next collective reports it, naming the rank
          continue;
      }
    }
    peer.writable = false;
    announce_gone(rank, fmt::format("bootstrap: rank {} ({}) is gone: its connection to the "
                                    "rendezvous at {} closed without a goodbye after allgather "
                                    "#{}: {}",
                                    rank, peer.address, address_, sequence_, problem));
    return false;
  }
  return true;
}

void TcpRendezvousHost::announce_gone(int rank, const std::string& message, bool dead) {
  failure_ = message;
  if (dead && rank >= 0 && rank < options_.world_size) {
    ranks_[static_cast<size_t>(rank)].writable = false;
  }
  log_.debug(kComponent, "telling the ranks that rank {} {}", rank, dead ? "is gone" : "failed");
  broadcast_last_word(wire::encode_gone_frame(rank, message));
  notifier_->report(rank, message);
}

void TcpRendezvousHost::broadcast_last_word(const std::vector<std::byte>& frame) {
  const net::Deadline deadline = net::deadline_after(kErrorNoticeTime);
  for (JoinedRank& peer : ranks_) {
    if (!peer.fd || !peer.writable) continue;
    if (!net::send_all(peer.fd.get(), frame, deadline).ok()) peer.writable = false;
    // No more frames will follow: let the rank see end-of-stream after it.
    ::shutdown(peer.fd.get(), SHUT_WR);
  }
}

void TcpRendezvousHost::accept_ranks() {
  const net::Deadline deadline = net::deadline_after(std::chrono::seconds(options_.timeout_s));
  std::vector<PendingConnection> pending;
  while (!missing_ranks().empty()) {
    // Poll set: the listener, the pending connections, then the joined ranks.
    std::vector<pollfd> fds;
    fds.push_back({listener_.get(), POLLIN, 0});
    net::Deadline wake = deadline;
    for (const PendingConnection& connection : pending) {
      fds.push_back({connection.fd.get(), POLLIN, 0});
      wake = std::min(wake, connection.hello_deadline);
    }
    std::vector<int> joined;
    for (int rank = 1; rank < options_.world_size; ++rank) {
      if (!ranks_[static_cast<size_t>(rank)].fd) continue;
      fds.push_back({ranks_[static_cast<size_t>(rank)].fd.get(), POLLIN, 0});
      joined.push_back(rank);
    }
    if (::poll(fds.data(), fds.size(), net::milliseconds_until(wake)) < 0 && errno != EINTR) {
      fail_job(fmt::format("bootstrap: poll() failed while waiting for ranks at {}: {}", address_,
                           std::strerror(errno)));
    }
    const net::Clock::time_point now = net::Clock::now();

    // A rank that joined and then hung up cannot take part in the job.
    for (size_t i = 0; i < joined.size(); ++i) {
      if (fds[1 + pending.size() + i].revents != 0) watch_joined_rank(joined[i]);
    }
    // Progress every pending connection; drop the finished and the expired.
    for (size_t i = 0; i < pending.size(); ++i) {
      PendingConnection& connection = pending[i];
      if (fds[1 + i].revents != 0) {
        switch (connection.reader.read_available(connection.fd.get())) {
          case wire::FrameReader::State::reading:
            break;
          case wire::FrameReader::State::complete:
            admit(connection);
            break;
          case wire::FrameReader::State::closed:
          case wire::FrameReader::State::malformed:
          case wire::FrameReader::State::failed:
            refuse(connection, connection.reader.problem());
            break;
        }
      }
      if (connection.fd && now >= connection.hello_deadline) {
        refuse(connection,
               fmt::format("no complete hello within {} ms of connecting ({} bytes received)",
                           hello_timeout().count(), connection.reader.bytes_received()));
      }
    }
    std::erase_if(pending, [](const PendingConnection& c) { return !c.fd; });
    if (fds[0].revents != 0) accept_new_connections(pending, deadline);

    if (now >= deadline && !missing_ranks().empty()) {
      for (PendingConnection& connection : pending) {
        refuse(connection, "the job timed out waiting for its ranks");
      }
      fail_job(fmt::format("bootstrap: timed out after {} s waiting for {} to join {}",
                           options_.timeout_s, format_rank_list(missing_ranks()), address_));
    }
  }

  // Everybody is here: connections still without a hello are not ranks.
  for (PendingConnection& connection : pending) {
    refuse(connection, "all ranks of this job have already joined");
  }
  listener_.reset();
  const net::Deadline send_deadline = net::deadline_after(std::chrono::seconds(options_.timeout_s));
  for (int rank = 1; rank < options_.world_size; ++rank) {
    JoinedRank& peer = ranks_[static_cast<size_t>(rank)];
    // Ranks 3 and up learn where their result-tree parent listens, at the
    // address this rank sees it connected from.
    wire::TreeParent parent;
    if (rank >= 3) {
      const JoinedRank& up = ranks_[static_cast<size_t>(result_tree::parent_of(rank))];
      parent.port = up.tree_port;
      parent.host = net::unbracketed(net::host_of(up.address));
    }
    const std::vector<std::byte> welcome =
        wire::encode_frame(wire::FrameType::welcome, 0, wire::encode_welcome_payload(parent));
    net::IoResult sent = net::send_all(peer.fd.get(), welcome, send_deadline);
    if (!sent.ok()) {
      peer.writable = false;
      fail_job(fmt::format("bootstrap: rank {} ({}) disconnected from {} as the job started: {}",
                           rank, peer.address, address_, sent.describe()));
    }
  }
  log_.info(kComponent, "all {} ranks joined at {}", options_.world_size, address_);
}

void TcpRendezvousHost::accept_new_connections(std::vector<PendingConnection>& pending,
                                               net::Deadline job_deadline) {
  const size_t max_pending = static_cast<size_t>(options_.world_size) + kExtraPendingConnections;
  for (;;) {
    std::string address;
    net::Fd fd = net::accept_tcp(listener_, &address);
    if (!fd) return;
    PendingConnection connection{
        std::move(fd), std::move(address),
        std::min(job_deadline, net::Clock::now() + hello_timeout()),
        wire::FrameReader(std::min<uint64_t>(options_.max_message_bytes, wire::kMaxHelloBytes),
                          options_.max_message_bytes < wire::kMaxHelloBytes ? "max_message_bytes"
                                                                            : "hello size limit")};
    // A flood must delay the job, not end it: the real rank turned away
    // here retries. No source address has more real ranks than the job;
    // a flood from one address leaves the other slots to the rest.
    if (pending.size() >= max_pending) {
      turn_away(connection,
                fmt::format("too many connections ({}) are already waiting to say hello",
                            pending.size()));
      continue;
    }
    const std::string host = net::host_of(connection.address);
    const auto same_host = static_cast<size_t>(std::count_if(
        pending.begin(), pending.end(),
        [&](const PendingConnection& other) { return net::host_of(other.address) == host; }));
    if (same_host >= static_cast<size_t>(options_.world_size)) {
      turn_away(connection,
                fmt::format("too many connections from {} ({}) are already waiting to say hello",
                            host, same_host));
      continue;
    }
    log_.debug(kComponent, "connection from {}", connection.address);
    pending.push_back(std::move(connection));
  }
}

void TcpRendezvousHost::admit(PendingConnection& connection) {
  const wire::FrameHeader& header = connection.reader.header();
  if (header.type != static_cast<uint16_t>(wire::FrameType::hello)) {
    refuse(connection, fmt::format("expected a hello but got a {} message",
                                   wire::to_string(static_cast<wire::FrameType>(header.type))));
    return;
  }
  std::string reason;
  std::optional<wire::Hello> hello =
      wire::decode_hello_payload(connection.reader.payload(), &reason);
  if (!hello) {
    refuse(connection, reason);
    return;
  }
  // The token first: a peer that cannot prove it belongs to the job learns
  // nothing about the job's shape from the refusal.
  if (!wire::tokens_equal(options_.job_token, hello->token)) {
    refuse(connection, "wrong job token");
    return;
  }
  if (header.sequence != 0) {
    refuse(connection,
           fmt::format("malformed hello: sequence number {} (expected 0)", header.sequence));
    return;
  }
  if (hello->world_size != options_.world_size) {
    refuse(connection, fmt::format("it claims world size {} but rank 0's world size is {}",
                                   hello->world_size, options_.world_size));
    return;
  }
  if (hello->rank < 0 || hello->rank >= options_.world_size) {
    refuse(connection, fmt::format("rank {} is outside [0, {})", hello->rank, options_.world_size));
    return;
  }
  if (hello->rank == 0) {
    refuse(connection, "it claims rank 0, which is this process");
    return;
  }
  JoinedRank& slot = ranks_[static_cast<size_t>(hello->rank)];
  if (slot.fd) {
    refuse(connection,
           fmt::format("duplicate rank {}: it already joined from {}", hello->rank, slot.address));
    return;
  }
  slot.fd = std::move(connection.fd);
  slot.address = connection.address;
  slot.tree_port = hello->tree_port;
  log_.info(kComponent, "rank {} joined from {} ({} of {} ranks present)", hello->rank,
            slot.address, options_.world_size - static_cast<int>(missing_ranks().size()),
            options_.world_size);
}

void TcpRendezvousHost::refuse(PendingConnection& connection, std::string_view reason) {
  log_.warn(kComponent, "refused connection from {}: {}", connection.address, reason);
  // Best effort, without waiting: tell an honest but misconfigured rank why,
  // so it fails with the reason instead of a bare "connection closed". A
  // fresh connection's send buffer always has room for this small frame.
  say_and_close(connection,
                wire::encode_error_frame(fmt::format(
                    "bootstrap: rank 0 at {} refused this connection: {}", address_, reason)));
}

void TcpRendezvousHost::turn_away(PendingConnection& connection, std::string_view reason) {
  log_.warn(kComponent, "turned away connection from {} for now: {}", connection.address, reason);
  const std::string text =
      fmt::format("rank 0 at {} turned this connection away for now: {}", address_, reason);
  say_and_close(
      connection,
      wire::encode_frame(
          wire::FrameType::busy, 0,
          std::as_bytes(std::span(std::string_view(text).substr(0, wire::kMaxErrorBytes)))));
}

void TcpRendezvousHost::say_and_close(PendingConnection& connection,
                                      const std::vector<std::byte>& frame) {
  (void)net::send_all(connection.fd.get(), frame, net::Clock::now());
  // Closing with unread bytes (a hello already sent) would reset the
  // connection, and a reset may discard the frame before the peer reads
  // it: end our side, read what is there, then close.
  ::shutdown(connection.fd.get(), SHUT_WR);
  std::byte scratch[4096];
  for (int i = 0; i < 16; ++i) {
    const ssize_t got = ::recv(connection.fd.get(), scratch, sizeof scratch, MSG_DONTWAIT);
    if (got <= 0) break;
  }
  connection.fd.reset();
}

void TcpRendezvousHost::watch_joined_rank(int rank) {
  JoinedRank& peer = ranks_[static_cast<size_t>(rank)];
  std::byte probe{};
  size_t received = 0;
  net::IoResult result = net::receive_some(peer.fd.get(), std::span(&probe, 1), &received);
  if (!result.ok()) {
    peer.writable = false;
    fail_job(fmt::format("bootstrap: rank {} ({}) disconnected from {} before all ranks joined",
                         rank, peer.address, address_));
  }
  if (received > 0) {
    fail_job(
        fmt::format("bootstrap: protocol error: rank {} ({}) sent data before all ranks "
                    "joined",
                    rank, peer.address));
  }
}

std::vector<int> TcpRendezvousHost::missing_ranks() const {
  std::vector<int> missing;
  for (int rank = 1; rank < options_.world_size; ++rank) {
    if (!ranks_[static_cast<size_t>(rank)].fd) missing.push_back(rank);
  }
  return missing;
}

void TcpRendezvousHost::fail_job(std::string message) {
  failure_ = message;
  broadcast_last_word(wire::encode_error_frame(message));
  throw Error(message);
}

std::vector<std::byte> TcpRendezvousHost::allgather(std::span<const std::byte> mine) {
  ConnectionMonitor::Exclusive hold(monitor_.get());
  if (failure_) throw Error(*failure_);
  const uint64_t sequence = ++sequence_;
  if (deferred_failure_) fail_job(*deferred_failure_);
  if (auto failed = take_pending_failure()) fail_gone(failed->first, failed->second, false);
  const size_t world = static_cast<size_t>(options_.world_size);
  if (world == 1) return {mine.begin(), mine.end()};
  for (int rank = 1; rank < options_.world_size; ++rank) {
    if (ranks_[static_cast<size_t>(rank)].departed) fail_job(left_message(rank, sequence));
  }

  std::vector<std::vector<std::byte>> blocks(world);
  blocks[0].assign(mine.begin(), mine.end());
  std::vector<bool> delivered(world, false);
  // Delivered ranks are still watched for their end; one that sends ahead
  // is not, so that its pending bytes do not keep waking poll().
  std::vector<bool> quiet(world, false);
  // Takes the complete frame `rank` sent.
  auto take = [&](int rank) {
    JoinedRank& peer = ranks_[static_cast<size_t>(rank)];
    const wire::FrameHeader& header = peer.reader->header();
    if (header.type == static_cast<uint16_t>(wire::FrameType::goodbye)) {
      peer.departed = true;
      fail_job(left_message(rank, sequence));
    }
    if (header.type == static_cast<uint16_t>(wire::FrameType::failed)) {
      if (std::optional<wire::Gone> failed = wire::decode_gone_payload(peer.reader->payload())) {
        fail_gone(failed->rank, failed->message, false);
      }
    }
    if (header.type != static_cast<uint16_t>(wire::FrameType::block) ||
        header.sequence != sequence) {
      fail_job(fmt::format(
          "bootstrap: protocol error: rank {} ({}) sent a {} message #{} during allgather "
          "#{} (do all ranks call the same collectives in the same order?)",
          rank, peer.address, wire::to_string(static_cast<wire::FrameType>(header.type)),
          header.sequence, sequence));
    }
    received_ += wire::kHeaderBytes + header.length;
    blocks[static_cast<size_t>(rank)] = std::move(peer.reader->payload());
    delivered[static_cast<size_t>(rank)] = true;
  };
  for (int rank = 1; rank < options_.world_size; ++rank) {
    JoinedRank& peer = ranks_[static_cast<size_t>(rank)];
    peer.parked = false;
    if (peer.reader->state() == wire::FrameReader::State::complete) take(rank);
  }

  const net::Deadline deadline = net::deadline_after(std::chrono::seconds(options_.timeout_s));
  for (;;) {
    std::vector<int> waiting;
    std::vector<int> polled;
    std::vector<pollfd> fds;
    for (int rank = 1; rank < options_.world_size; ++rank) {
      if (!delivered[static_cast<size_t>(rank)]) waiting.push_back(rank);
      if (quiet[static_cast<size_t>(rank)]) continue;
      fds.push_back({ranks_[static_cast<size_t>(rank)].fd.get(), POLLIN, 0});
      polled.push_back(rank);
    }
    if (waiting.empty()) break;
    if (net::Clock::now() >= deadline) {
      fail_job(fmt::format("bootstrap: timed out after {} s in allgather #{} waiting for {} at {}",
                           options_.timeout_s, sequence, format_rank_list(waiting), address_));
    }
    const int wait_ms =
        std::min<int>(net::milliseconds_until(deadline), static_cast<int>(kFailureCheck.count()));
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      fail_job(fmt::format("bootstrap: poll() failed in allgather #{}: {}", sequence,
                           std::strerror(errno)));
    }
    if (auto failed = take_pending_failure()) fail_gone(failed->first, failed->second, false);
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int rank = polled[i];
      JoinedRank& peer = ranks_[static_cast<size_t>(rank)];
      wire::FrameReader& reader = *peer.reader;
      if (delivered[static_cast<size_t>(rank)]) {
        // A rank that delivered its block may still die while others are
        // slow: its death must not wait for the result to bounce.
        std::optional<std::string> end = peek_end(peer);
        if (!end) continue;
        if (end->empty()) {
          quiet[static_cast<size_t>(rank)] = true;
          continue;
        }
        fail_gone(rank, fmt::format("bootstrap: rank {} ({}) disconnected during allgather #{}: {}",
                                    rank, peer.address, sequence, *end));
      }
      switch (reader.read_available(peer.fd.get())) {
        case wire::FrameReader::State::reading:
          break;
        case wire::FrameReader::State::complete:
          take(rank);
          break;
        case wire::FrameReader::State::closed:
        case wire::FrameReader::State::failed:
          fail_gone(rank,
                    fmt::format("bootstrap: rank {} ({}) disconnected during allgather #{}: {}",
                                rank, peer.address, sequence, reader.problem()));
        case wire::FrameReader::State::malformed:
          // The stream is out of frame: answer nothing on it but the error.
          fail_job(fmt::format("bootstrap: rank {} ({}) sent a bad message in allgather #{}: {}",
                               rank, peer.address, sequence, reader.problem()));
      }
    }
  }
  // Ready for the next frames, which the monitor may read.
  for (int rank = 1; rank < options_.world_size; ++rank) {
    ranks_[static_cast<size_t>(rank)].reader->reset();
  }

  std::vector<uint64_t> sizes;
  for (const std::vector<std::byte>& block : blocks) sizes.push_back(block.size());
  if (auto mismatch = describe_size_mismatch(sizes, sequence)) fail_job(std::move(*mismatch));

  std::vector<std::byte> result;
  result.reserve(world * mine.size());
  for (const std::vector<std::byte>& block : blocks) {
    result.insert(result.end(), block.begin(), block.end());
  }
  const std::vector<std::byte> frame =
      wire::encode_frame(wire::FrameType::result, sequence, result);
  const net::Deadline send_deadline = net::deadline_after(std::chrono::seconds(options_.timeout_s));
  // A result goes to ranks 1 and 2, which pass it down the tree.
  const size_t receivers =
      result_tree::used_for(options_.world_size, mine.size()) ? std::min<size_t>(world, 3) : world;
  for (size_t rank = 1; rank < receivers; ++rank) {
    JoinedRank& peer = ranks_[rank];
    net::IoResult sent = net::send_all(peer.fd.get(), frame, send_deadline);
    if (sent.ok()) {
      sent_ += frame.size();
      continue;
    }
    peer.writable = false;
    log_.warn(kComponent, "could not deliver allgather #{} to rank {} ({}): {}", sequence, rank,
              peer.address, sent.describe());
    if (!deferred_failure_) {
      deferred_failure_ = fmt::format("bootstrap: rank {} ({}) disconnected during allgather #{}",
                                      rank, peer.address, sequence);
    }
  }
  return result;
}

}  // namespace

std::unique_ptr<Bootstrap> make_tcp_rendezvous_host(const BootstrapOptions& options, Logger& log,
                                                    const TcpBootstrapTuning& tuning) {
  return std::make_unique<TcpRendezvousHost>(options, log, tuning);
}

}  // namespace courier
