// The side of the TCP bootstrap that ranks 1..N-1 run: connect to rank 0
// (retrying, since rank 0 may start later), say hello, wait for the welcome;
// then each collective is "send my block, receive everybody's".
//
// Rank 0 reports job failures as error frames; they are thrown here verbatim,
// so every rank fails with the same message. Failures only this rank can see
// (rank 0 gone, its own timeout) are phrased from this rank's point of view.
//
// Liveness: the connection stays open for the job's lifetime. Between
// collectives a monitor thread reads it: a gone frame (another rank died) or
// the connection closing without rank 0's goodbye (rank 0 died) is reported
// to the subscribed handler and thrown by the next collective. The
// destructor says goodbye, so that an orderly exit is not taken for a death.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "core/bootstrap/bootstrap_wire.hpp"
#include "core/bootstrap/peer_liveness.hpp"
#include "core/bootstrap/result_tree.hpp"
#include "core/bootstrap/socket.hpp"
#include "core/bootstrap/tcp_bootstrap.hpp"
#include "core/check.hpp"
#include "core/log.hpp"

namespace courier {

namespace {

constexpr std::string_view kComponent = "bootstrap";

// After a failed send, how long to look for the error frame rank 0 may have
// sent to explain why it stopped reading.
constexpr std::chrono::milliseconds kLastWordsTime{1'000};

// How often a collective's wait looks whether this rank declared the job
// failed meanwhile.
constexpr std::chrono::milliseconds kFailureCheck{100};

class TcpRendezvousClient final : public Bootstrap {
 public:
  TcpRendezvousClient(const BootstrapOptions& options, Logger& log,
                      const TcpBootstrapTuning& tuning)
      : options_(options),
        log_(log),
        tuning_(tuning),
        address_(net::format_address(options.host, options.port)) {
    const net::Deadline deadline = net::deadline_after(std::chrono::seconds(options_.timeout_s));
    join(deadline);
    log_.debug(kComponent, "rank {} joined the job at {}", options_.rank, address_);
    monitor_ = std::make_unique<ConnectionMonitor>(ConnectionMonitor::Hooks{
        [this] { return watch(); }, [this](std::span<const pollfd> fds) { return handle(fds); }});
  }

  ~TcpRendezvousClient() override {
    monitor_.reset();
    // Goodbye: rank 0 must not take this connection's closing for a death.
    // Not while an exception unwinds the stack: a rank failing with an error
    // should make the others fail now rather than at their own timeouts.
    if (!fd_ || failure_ || rank0_left_ || std::uncaught_exceptions() > 0) return;
    const std::vector<std::byte> goodbye =
        wire::encode_frame(wire::FrameType::goodbye, sequence_, {});
    std::lock_guard lock(write_mutex_);
    (void)net::send_all(fd_.get(), goodbye, net::deadline_after(kLastWordsTime));
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.world_size; }
  std::string_view kind() const override { return "tcp"; }
  std::vector<std::byte> allgather(std::span<const std::byte> mine) override;
  void barrier() override { (void)allgather({}); }
  Traffic traffic() const override {
    return {sent_.load() + tree_.bytes_sent(), received_.load() + tree_.bytes_received()};
  }
  PeerWatch watch_peers(PeerFailureHandler handler) override {
    return notifier_->subscribe(notifier_, std::move(handler));
  }
  // Tells rank 0, which relays it to every rank. The socket is shared with
  // the collectives: writes take write_mutex_, so frames never interleave.
  void report_failure(int suspect, const std::string& message) override {
    std::lock_guard lock(write_mutex_);
    if (reported_.load() || !fd_) return;
    {
      std::lock_guard text_lock(reported_mutex_);
      reported_message_ = message;
    }
    reported_.store(true);
    const std::vector<std::byte> frame =
        wire::encode_failed_frame(suspect >= 0 ? suspect : options_.rank, message);
    const net::IoResult sent = net::send_all(fd_.get(), frame, net::deadline_after(kLastWordsTime));
    if (!sent.ok()) {
      log_.warn(kComponent, "rank {} could not tell rank 0 at {} that it failed: {}", options_.rank,
                address_, sent.describe());
    }
  }

 private:
  // The monitor's hooks (docs/bootstrap.md, "Liveness").
  std::vector<pollfd> watch() const;
  bool handle(std::span<const pollfd> fds);
  // Records a peer's death: later collectives throw `message`.
  void peer_gone(int rank, const std::string& message) {
    failure_ = message;
    notifier_->report(rank, message);
  }
  void connect_to_rank0(net::Deadline deadline);
  // Connects, says hello and waits for the welcome; while rank 0 turns the
  // connection away as busy (a flood of connections), tries again, backing
  // off, until the deadline.
  void join(net::Deadline deadline);
  void send_frame(const std::vector<std::byte>& frame, net::Deadline deadline,
                  std::string_view what);
  // Reads one frame from rank 0. An error or gone frame is thrown as the
  // job's failure; so are end-of-stream, a goodbye, a bad frame and the
  // deadline.
  wire::FrameReader receive_frame(net::Deadline deadline, uint64_t max_length,
                                  std::string_view waiting_for);
  // The text of an error frame rank 0 sent before closing, if one arrives
  // by the deadline.
  std::optional<std::string> read_error_frame(net::Deadline deadline);
  [[noreturn]] void protocol_error(const wire::FrameReader& reply, std::string_view expected);
  // What rank 0's connection says that ends a wait for `waiting_for`, in
  // reader_'s `state`: an error or gone frame, the connection's end, a bad
  // frame; thrown as the job's failure. Other complete frames are the
  // caller's.
  void throw_on_notice(wire::FrameReader::State state, std::string_view waiting_for);
  // This rank declared the job failed (report_failure): the wait ends.
  void fail_if_reported(std::string_view waiting_for);
  // While waiting on the result tree: what rank 0 sent meanwhile (an error,
  // a death), thrown as the job's failure; never blocks.
  void check_rank0(std::string_view waiting_for);
  // Fails the tree wait of collective sequence_ with rank 0's end.
  [[noreturn]] void lost_rank0();
  // The result of collective `sequence` from this rank's result-tree
  // parent, passed on to its children (docs/bootstrap.md, "The result tree").
  std::vector<std::byte> receive_by_tree(uint64_t sequence, uint64_t expected,
                                         net::Deadline deadline, const std::string& what);
  // Passes this collective's result on to this rank's result-tree children.
  void pass_on(const std::vector<std::byte>& result, uint64_t sequence, net::Deadline deadline,
               const std::string& what);
  ResultTreeLinks::Aside tree_aside(const std::string& what);
  // A tree link failed: rank 0's word on it, if it comes within a second
  // (a parent that died is announced as gone), else the link's own.
  [[noreturn]] void tree_failed(const TreeLinkError& error);
  [[noreturn]] void fail_here(std::string message) {
    failure_ = message;
    throw Error(message);
  }

  BootstrapOptions options_;
  Logger& log_;
  TcpBootstrapTuning tuning_;
  ResultTreeLinks tree_{options_, log_};
  // Held while a frame is written to fd_ (collectives, report_failure).
  std::mutex write_mutex_;
  // Set once this rank declared the job failed (report_failure, from any
  // thread): a collective waiting for rank 0 stops then, since the ranks it
  // waits for may never come (a partition cuts them off from rank 0).
  std::atomic<bool> reported_{false};
  std::mutex reported_mutex_;
  std::string reported_message_;
  std::string address_;
  net::Fd fd_;
  // Frames from rank 0, read by the monitor between collectives and by the
  // collectives themselves (a frame the monitor began, a collective ends).
  wire::FrameReader reader_{wire::kMaxNoticeBytes, "error message limit"};
  uint64_t sequence_ = 0;
  // Collective bytes moved (traffic()); read from any thread.
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  // Written by the monitor only while no collective runs (ConnectionMonitor
  // orders the two), read by collectives.
  std::optional<std::string> failure_;
  bool rank0_left_ = false;
  // Rank 0's connection ended without a goodbye while this rank waited on
  // the result tree (check_rank0): the result comes from the parent or not
  // at all, so the end is reported after the collective (the monitor, the
  // next collective) or by tree_failed, which it then explains; a wait
  // still going reply_grace after it fails naming rank 0 (lost_rank0).
  std::optional<std::string> rank0_closed_;
  net::Clock::time_point rank0_closed_at_{};
  std::shared_ptr<PeerFailureNotifier> notifier_ = std::make_shared<PeerFailureNotifier>();
  // Last: stopped first, before the members it reads go away.
  std::unique_ptr<ConnectionMonitor> monitor_;
};

std::vector<pollfd> TcpRendezvousClient::watch() const {
  if (failure_ || rank0_left_) return {};
  return {pollfd{fd_.get(), POLLIN, 0}};
}

bool TcpRendezvousClient::handle(std::span<const pollfd> fds) {
  if (fds.empty() || fds[0].revents == 0) return true;
  switch (reader_.read_available(fd_.get())) {
    case wire::FrameReader::State::reading:
      return true;
    case wire::FrameReader::State::complete: {
      const wire::FrameHeader& header = reader_.header();
      const std::vector<std::byte>& payload = reader_.payload();
      if (header.type == static_cast<uint16_t>(wire::FrameType::gone)) {
        std::optional<wire::Gone> gone = wire::decode_gone_payload(payload);
        if (gone) {
          peer_gone(gone->rank, gone->message);
          return false;
        }
      } else if (header.type == static_cast<uint16_t>(wire::FrameType::goodbye)) {
        // Rank 0 left in order: nobody watches the job's liveness any more.
        rank0_left_ = true;
        log_.debug(kComponent, "rank 0 at {} said goodbye", address_);
        return false;
      } else if (header.type == static_cast<uint16_t>(wire::FrameType::error)) {
        failure_ = std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
        return false;
      }
      failure_ = fmt::format(
          "bootstrap: protocol error: rank {} got an unexpected {} message #{} from rank 0 at {} "
          "between collectives",
          options_.rank, wire::to_string(static_cast<wire::FrameType>(header.type)),
          header.sequence, address_);
      return false;
    }
    case wire::FrameReader::State::closed:
    case wire::FrameReader::State::failed:
      peer_gone(0, fmt::format("bootstrap: rank 0 ({}) is gone: rank {}'s connection to it closed "
                               "without a goodbye after allgather #{}: {}",
                               address_, options_.rank, sequence_, reader_.problem()));
      return false;
    case wire::FrameReader::State::malformed:
      failure_ = fmt::format("bootstrap: rank {} got a bad message from rank 0 at {}: {}",
                             options_.rank, address_, reader_.problem());
      return false;
  }
  return false;
}

void TcpRendezvousClient::connect_to_rank0(net::Deadline deadline) {
  // Rank 0 may not be listening yet: retry, backing off up to half a second.
  std::chrono::milliseconds pause{10};
  std::string last_error;
  for (;;) {
    net::ConnectAttempt attempt =
        net::connect_tcp_once(options_.host, options_.port,
                              std::min(deadline, net::deadline_after(std::chrono::seconds(5))));
    if (attempt.fd) {
      fd_ = std::move(attempt.fd);
      return;
    }
    last_error = attempt.error;
    if (!attempt.retryable) {
      fail_here(fmt::format("bootstrap: rank {} cannot reach rank 0 at {}: {}", options_.rank,
                            address_, last_error));
    }
    log_.debug(kComponent, "rank {}: connecting to {} failed ({}); retrying", options_.rank,
               address_, last_error);
    if (net::Clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  fail_here(fmt::format("bootstrap: rank {} timed out after {} s connecting to rank 0 at {}: {}",
                        options_.rank, options_.timeout_s, address_, last_error));
}

void TcpRendezvousClient::join(net::Deadline deadline) {
  std::chrono::milliseconds pause{10};
  for (uint32_t attempt = 1;; ++attempt) {
    connect_to_rank0(deadline);
    wire::Hello hello{options_.rank, options_.world_size, options_.job_token, tree_.listen(fd_)};
    send_frame(wire::encode_frame(wire::FrameType::hello, 0, wire::encode_hello_payload(hello)),
               deadline, "its hello");
    wire::FrameReader reply =
        receive_frame(deadline + tuning_.reply_grace, 0, "the signal that all ranks joined");
    reader_.reset();
    if (reply.header().type == static_cast<uint16_t>(wire::FrameType::welcome)) {
      std::optional<wire::TreeParent> parent = wire::decode_welcome_payload(reply.payload());
      if (!parent) protocol_error(reply, "a welcome naming a result-tree parent or nothing");
      tree_.set_parent(std::move(*parent));
      return;
    }
    if (reply.header().type != static_cast<uint16_t>(wire::FrameType::busy)) {
      protocol_error(reply, "a welcome");
    }
    const std::vector<std::byte>& text = reply.payload();
    const std::string why(reinterpret_cast<const char*>(text.data()), text.size());
    fd_.reset();
    if (net::Clock::now() + pause >= deadline) {
      fail_here(
          fmt::format("bootstrap: rank {} timed out after {} s joining the job: {} ({} tries)",
                      options_.rank, options_.timeout_s, why, attempt));
    }
    log_.info(kComponent, "rank {}: {}; trying again in {} ms", options_.rank, why, pause.count());
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

void TcpRendezvousClient::send_frame(const std::vector<std::byte>& frame, net::Deadline deadline,
                                     std::string_view what) {
  std::unique_lock write_lock(write_mutex_);
  std::span<const std::byte> left(frame);
  std::string problem;
  while (!left.empty()) {
    ssize_t sent = ::send(fd_.get(), left.data(), left.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      left = left.subspan(static_cast<size_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      problem = std::strerror(errno);
      break;
    }
    // Full socket: wait for room, but also listen, because rank 0 stops
    // reading when the job fails and sends an error frame instead.
    pollfd watch{fd_.get(), POLLOUT | POLLIN, 0};
    int ready = ::poll(&watch, 1, net::milliseconds_until(deadline));
    if (ready < 0 && errno != EINTR) {
      problem = std::strerror(errno);
      break;
    }
    if (ready == 0) {
      fail_here(fmt::format("bootstrap: rank {} timed out after {} s sending {} to rank 0 at {}",
                            options_.rank, options_.timeout_s, what, address_));
    }
    if (ready > 0 && (watch.revents & POLLIN) != 0) {
      problem = "rank 0 answered before the message was complete";
      break;
    }
  }
  write_lock.unlock();
  if (problem.empty()) return;
  // Rank 0 stopped listening; its error frame, if any, says why.
  if (std::optional<std::string> reason = read_error_frame(net::deadline_after(kLastWordsTime))) {
    fail_here(std::move(*reason));
  }
  fail_here(
      fmt::format("bootstrap: rank {} lost its connection to rank 0 at {} while sending {}: "
                  "{}",
                  options_.rank, address_, what, problem));
}

wire::FrameReader TcpRendezvousClient::receive_frame(net::Deadline deadline, uint64_t max_length,
                                                     std::string_view waiting_for) {
  // The shared reader: a frame the monitor started reading continues here.
  wire::FrameReader& reader = reader_;
  reader.set_max_length(std::max<uint64_t>(max_length, wire::kMaxNoticeBytes),
                        "the expected reply size");
  for (;;) {
    const wire::FrameReader::State state = reader.state() == wire::FrameReader::State::complete
                                               ? wire::FrameReader::State::complete
                                               : reader.read_available(fd_.get());
    throw_on_notice(state, waiting_for);
    if (state == wire::FrameReader::State::complete) {
      if (reader.header().type == static_cast<uint16_t>(wire::FrameType::goodbye)) {
        rank0_left_ = true;
        fail_here(
            fmt::format("bootstrap: rank {} lost its connection to rank 0 at {} while waiting "
                        "for {}: rank 0 left the job (it said goodbye)",
                        options_.rank, address_, waiting_for));
      }
      wire::FrameReader complete = std::move(reader);
      reader_ = wire::FrameReader(wire::kMaxNoticeBytes, "error message limit");
      return complete;
    }
    fail_if_reported(waiting_for);
    // In slices, to notice report_failure soon.
    const net::Deadline slice = std::min(deadline, net::deadline_after(kFailureCheck));
    net::IoResult waited = net::wait_readable(fd_.get(), slice);
    if (waited.status == net::IoStatus::timed_out && net::Clock::now() < deadline) continue;
    if (waited.status == net::IoStatus::timed_out) {
      fail_here(
          fmt::format("bootstrap: rank {} timed out after {} s waiting for rank 0 at {} to "
                      "send {}",
                      options_.rank, options_.timeout_s, address_, waiting_for));
    }
    if (!waited.ok()) {
      fail_here(fmt::format("bootstrap: rank {} failed waiting for rank 0 at {}: {}", options_.rank,
                            address_, waited.describe()));
    }
  }
}

std::optional<std::string> TcpRendezvousClient::read_error_frame(net::Deadline deadline) {
  wire::FrameReader& reader = reader_;
  reader.set_max_length(wire::kMaxNoticeBytes, "error message limit");
  for (;;) {
    wire::FrameReader::State state = reader.state() == wire::FrameReader::State::complete
                                         ? wire::FrameReader::State::complete
                                         : reader.read_available(fd_.get());
    if (state == wire::FrameReader::State::complete &&
        reader.header().type == static_cast<uint16_t>(wire::FrameType::error)) {
      const std::vector<std::byte>& text = reader.payload();
      return std::string(reinterpret_cast<const char*>(text.data()), text.size());
    }
    if (state == wire::FrameReader::State::complete &&
        reader.header().type == static_cast<uint16_t>(wire::FrameType::gone)) {
      if (std::optional<wire::Gone> gone = wire::decode_gone_payload(reader.payload())) {
        peer_gone(gone->rank, gone->message);
        return gone->message;
      }
    }
    if (state != wire::FrameReader::State::reading) return std::nullopt;
    if (!net::wait_readable(fd_.get(), deadline).ok()) return std::nullopt;
  }
}

void TcpRendezvousClient::protocol_error(const wire::FrameReader& reply,
                                         std::string_view expected) {
  fail_here(
      fmt::format("bootstrap: protocol error: rank {} expected {} from rank 0 at {} but got "
                  "a {} message #{} of {} bytes",
                  options_.rank, expected, address_,
                  wire::to_string(static_cast<wire::FrameType>(reply.header().type)),
                  reply.header().sequence, reply.header().length));
}

std::vector<std::byte> TcpRendezvousClient::allgather(std::span<const std::byte> mine) {
  ConnectionMonitor::Exclusive hold(monitor_.get());
  if (failure_) throw Error(*failure_);
  if (rank0_left_) {
    fail_here(fmt::format(
        "bootstrap: rank {} lost its connection to rank 0 at {} before allgather #{}: rank 0 "
        "left the job (it said goodbye)",
        options_.rank, address_, sequence_ + 1));
  }
  if (rank0_closed_) {
    const std::string message = fmt::format(
        "bootstrap: rank {} lost its connection to rank 0 at {} before allgather #{}: {}",
        options_.rank, address_, sequence_ + 1, *rank0_closed_);
    peer_gone(0, message);
    throw Error(message);
  }
  const uint64_t sequence = ++sequence_;
  const net::Deadline deadline = net::deadline_after(std::chrono::seconds(options_.timeout_s));
  const std::string what = fmt::format("allgather #{}", sequence);
  const std::vector<std::byte> block = wire::encode_frame(wire::FrameType::block, sequence, mine);
  send_frame(block, deadline, "its block for " + what);
  sent_ += block.size();
  const uint64_t expected = static_cast<uint64_t>(options_.world_size) * mine.size();
  const bool by_tree = result_tree::used_for(options_.world_size, mine.size());
  if (by_tree && options_.rank >= 3) return receive_by_tree(sequence, expected, deadline, what);
  wire::FrameReader reply =
      receive_frame(deadline + tuning_.reply_grace, expected, "the result of " + what);
  const wire::FrameHeader& header = reply.header();
  if (header.type != static_cast<uint16_t>(wire::FrameType::result) ||
      header.sequence != sequence || header.length != expected) {
    protocol_error(reply, fmt::format("the {}-byte result of {}", expected, what));
  }
  received_ += wire::kHeaderBytes + header.length;
  std::vector<std::byte> result = std::move(reply.payload());
  if (by_tree) {
    pass_on(result, sequence, deadline, what);
  }
  return result;
}

ResultTreeLinks::Aside TcpRendezvousClient::tree_aside(const std::string& what) {
  return {[this] { return failure_ || rank0_left_ || rank0_closed_ ? -1 : fd_.get(); },
          [this, what] { check_rank0("the result of " + what); },
          [this] { return rank0_closed_.has_value(); }};
}

void TcpRendezvousClient::fail_if_reported(std::string_view waiting_for) {
  if (!reported_.load()) return;
  std::lock_guard text_lock(reported_mutex_);
  fail_here(fmt::format("bootstrap: rank {} stopped waiting for {}: it declared the job failed: {}",
                        options_.rank, waiting_for, reported_message_));
}

void TcpRendezvousClient::throw_on_notice(wire::FrameReader::State state,
                                          std::string_view waiting_for) {
  switch (state) {
    case wire::FrameReader::State::reading:
      return;
    case wire::FrameReader::State::complete: {
      const std::vector<std::byte>& text = reader_.payload();
      if (reader_.header().type == static_cast<uint16_t>(wire::FrameType::error)) {
        fail_here(std::string(reinterpret_cast<const char*>(text.data()), text.size()));
      }
      if (reader_.header().type == static_cast<uint16_t>(wire::FrameType::gone)) {
        if (std::optional<wire::Gone> gone = wire::decode_gone_payload(text)) {
          peer_gone(gone->rank, gone->message);
          throw Error(gone->message);
        }
      }
      return;
    }
    case wire::FrameReader::State::closed:
    case wire::FrameReader::State::failed: {
      std::string message = fmt::format(
          "bootstrap: rank {} lost its connection to rank 0 at {} while waiting for {}: {}{}",
          options_.rank, address_, waiting_for,
          state == wire::FrameReader::State::closed ? "rank 0 " : "", reader_.problem());
      // Without a goodbye: rank 0 died.
      peer_gone(0, message);
      throw Error(message);
    }
    case wire::FrameReader::State::malformed:
      fail_here(
          fmt::format("bootstrap: rank {} got a bad message from rank 0 at {} while waiting "
                      "for {}: {}",
                      options_.rank, address_, waiting_for, reader_.problem()));
  }
}

void TcpRendezvousClient::check_rank0(std::string_view waiting_for) {
  fail_if_reported(waiting_for);
  if (failure_) throw Error(*failure_);
  if (rank0_left_) return;
  if (rank0_closed_) {
    // A result rank 0 sent travels a hop per level, in milliseconds; a
    // wait this long after its end is for a result it never sent (or a
    // child that died with it): fail, not wait out the deadline.
    if (net::Clock::now() >= rank0_closed_at_ + tuning_.reply_grace) lost_rank0();
    return;
  }
  const wire::FrameReader::State state = reader_.read_available(fd_.get());
  if (state == wire::FrameReader::State::closed || state == wire::FrameReader::State::failed) {
    // Rank 0 sent this result to ranks 1 and 2 before its connections
    // ended, or they fail and close their links: either way the tree
    // answers. (Rank 0 leaves without a goodbye when it fails right after
    // a collective; failing the collective here would fail ranks whose
    // result is on its way.)
    rank0_closed_ =
        (state == wire::FrameReader::State::closed ? "rank 0 " : "") + reader_.problem();
    rank0_closed_at_ = net::Clock::now();
    return;
  }
  throw_on_notice(state, waiting_for);
  if (state != wire::FrameReader::State::complete) return;
  const wire::FrameHeader& header = reader_.header();
  if (header.type == static_cast<uint16_t>(wire::FrameType::goodbye)) {
    // Rank 0 passed this result on and left in order: not a failure.
    rank0_left_ = true;
    reader_.reset();
    return;
  }
  fail_here(fmt::format(
      "bootstrap: protocol error: rank {} got an unexpected {} message #{} from rank 0 at {} "
      "while waiting for {}",
      options_.rank, wire::to_string(static_cast<wire::FrameType>(header.type)), header.sequence,
      address_, waiting_for));
}

void TcpRendezvousClient::lost_rank0() {
  const std::string message = fmt::format(
      "bootstrap: rank {} lost its connection to rank 0 at {} while waiting for the result of "
      "allgather #{}: {}",
      options_.rank, address_, sequence_, rank0_closed_.value_or("rank 0 closed the connection"));
  peer_gone(0, message);
  throw Error(message);
}

void TcpRendezvousClient::tree_failed(const TreeLinkError& error) {
  // The link failed because rank 0 did: its parent never got the result.
  if (rank0_closed_ && !failure_) lost_rank0();
  if (!failure_ && !rank0_left_) {
    if (std::optional<std::string> reason = read_error_frame(net::deadline_after(kLastWordsTime))) {
      fail_here(std::move(*reason));
    }
  }
  // Rank 0 knows nothing of it (a stalled parent, a child that never came):
  // every rank must hear it, or ranks past this collective never would.
  report_failure(error.suspect(), error.what());
  fail_here(error.what());
}

std::vector<std::byte> TcpRendezvousClient::receive_by_tree(uint64_t sequence, uint64_t expected,
                                                            net::Deadline deadline,
                                                            const std::string& what) {
  std::vector<std::byte> result;
  try {
    result = tree_.receive(sequence, expected, deadline + tuning_.reply_grace, tree_aside(what));
  } catch (const TreeLinkError& error) {
    tree_failed(error);
  }
  pass_on(result, sequence, deadline, what);
  return result;
}

void TcpRendezvousClient::pass_on(const std::vector<std::byte>& result, uint64_t sequence,
                                  net::Deadline deadline, const std::string& what) {
  std::vector<ResultTreeLinks::Stuck> stuck;
  try {
    stuck = tree_.forward(wire::encode_frame(wire::FrameType::result, sequence, result), sequence,
                          deadline + tuning_.reply_grace, tree_aside(what));
  } catch (const TreeLinkError& error) {
    tree_failed(error);
  }
  // A child alive but not reading: it fails the job, named to every rank;
  // this rank has its result and returns it.
  if (!stuck.empty()) {
    log_.error(kComponent, "{}", stuck.front().message);
    report_failure(stuck.front().rank, stuck.front().message);
  }
}

}  // namespace

std::unique_ptr<Bootstrap> make_tcp_rendezvous_client(const BootstrapOptions& options, Logger& log,
                                                      const TcpBootstrapTuning& tuning) {
  return std::make_unique<TcpRendezvousClient>(options, log, tuning);
}

}  // namespace courier
