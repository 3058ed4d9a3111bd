#include "core/bootstrap/result_tree.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/bootstrap/collective_messages.hpp"
#include "core/log.hpp"

namespace courier {

namespace {

constexpr std::string_view kComponent = "bootstrap";
// How often a wait serves its aside when nothing else wakes it.
constexpr std::chrono::milliseconds kAsideCheck{100};
// A connection to a parent's tree port must say hello within this (or the
// collective's deadline, if sooner); real children do so at once.
constexpr std::chrono::milliseconds kHelloTimeout{10'000};
// Connections waiting to say hello at once; beyond it the oldest goes.
constexpr size_t kMaxPending = 16;

}  // namespace

ResultTreeLinks::ResultTreeLinks(const BootstrapOptions& options, Logger& log)
    : options_(options), log_(log) {}

uint16_t ResultTreeLinks::listen(const net::Fd& rendezvous) {
  if (!result_tree::has_children(options_.rank, options_.world_size)) return 0;
  if (!listener_) {
    // Every address of the family: children come to the address rank 0
    // saw this rank connect from, which need not be a local one (NAT).
    const bool ipv6 = net::local_host(rendezvous).find(':') != std::string::npos;
    bool fell_back = false;
    listener_ = net::listen_tcp(ipv6 ? "::" : "", 0, 8, &fell_back,
                                fmt::format("rank {} (result tree)", options_.rank));
  }
  return net::local_port(listener_);
}

std::string ResultTreeLinks::parent_address() const {
  return parent_ ? net::format_address(parent_->host, parent_->port) : std::string("(unknown)");
}

bool ResultTreeLinks::wait_until(std::vector<pollfd>& fds, net::Deadline deadline,
                                 const Aside& aside) {
  for (;;) {
    aside.check();
    const net::Deadline slice = std::min(deadline, net::deadline_after(kAsideCheck));
    std::vector<pollfd> all = fds;
    all.push_back({aside.fd(), POLLIN, 0});  // a negative fd is ignored by poll()
    const int ready = ::poll(all.data(), all.size(), net::milliseconds_until(slice));
    if (ready < 0 && errno != EINTR) {
      throw TreeLinkError(
          -1, fmt::format("bootstrap: rank {}: poll() failed in the result tree: {}", options_.rank,
                          std::strerror(errno)));
    }
    bool any = false;
    for (size_t i = 0; i < fds.size(); ++i) {
      fds[i].revents = all[i].revents;
      any = any || fds[i].revents != 0;
    }
    if (any) return true;
    if (net::Clock::now() >= deadline) {
      aside.check();  // rank 0's own report, if it came meanwhile, explains more
      return false;
    }
  }
}

void ResultTreeLinks::wait(std::vector<pollfd>& fds, net::Deadline deadline, const Aside& aside,
                           const std::string& waiting_for, int suspect) {
  if (wait_until(fds, deadline, aside)) return;
  throw TreeLinkError(suspect, fmt::format("bootstrap: rank {} timed out after {} s waiting for {}",
                                           options_.rank, options_.timeout_s, waiting_for));
}

void ResultTreeLinks::connect_parent(net::Deadline deadline, const Aside& aside) {
  const int parent = result_tree::parent_of(options_.rank);
  if (!parent_ || parent_->port == 0) {
    throw TreeLinkError(parent, fmt::format("bootstrap: rank {} cannot receive allgather results: "
                                            "rank 0's welcome named no result-tree port for its "
                                            "parent, rank {}",
                                            options_.rank, parent));
  }
  // The parent listens since before it said hello; a refusal means it is
  // gone, which rank 0 announces (aside) while this retries, or which rank
  // 0's own end makes certain (rank0_gone): no more tries then.
  std::chrono::milliseconds pause{10};
  for (;;) {
    aside.check();
    net::ConnectAttempt attempt = net::connect_tcp_once(
        parent_->host, parent_->port, std::min(deadline, net::deadline_after(kAsideCheck * 10)));
    if (attempt.fd) {
      parent_fd_ = std::move(attempt.fd);
      break;
    }
    if (!attempt.retryable || net::Clock::now() + pause >= deadline ||
        (aside.rank0_gone && aside.rank0_gone())) {
      throw TreeLinkError(
          parent,
          fmt::format("bootstrap: rank {} cannot reach its result-tree parent, rank {} at {}: {}",
                      options_.rank, parent, parent_address(), attempt.error));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  wire::Hello hello{options_.rank, options_.world_size, options_.job_token, 0};
  const std::vector<std::byte> frame =
      wire::encode_frame(wire::FrameType::hello, 0, wire::encode_hello_payload(hello));
  const net::IoResult sent = net::send_all(parent_fd_.get(), frame, deadline);
  if (!sent.ok()) {
    throw TreeLinkError(
        parent,
        fmt::format("bootstrap: rank {} could not greet its result-tree parent, rank {} at {}: {}",
                    options_.rank, parent, parent_address(), sent.describe()));
  }
}

std::vector<std::byte> ResultTreeLinks::receive(uint64_t sequence, uint64_t expected,
                                                net::Deadline deadline, const Aside& aside) {
  const int parent = result_tree::parent_of(options_.rank);
  if (!parent_fd_) connect_parent(deadline, aside);
  const std::string what = fmt::format("rank {} at {} to pass on the result of allgather #{}",
                                       parent, parent_address(), sequence);
  wire::FrameReader& reader = parent_reader_;
  reader.reset();
  reader.set_max_length(expected, "the expected result size");
  for (;;) {
    switch (reader.read_available(parent_fd_.get())) {
      case wire::FrameReader::State::reading: {
        std::vector<pollfd> fds{{parent_fd_.get(), POLLIN, 0}};
        wait(fds, deadline, aside, what, parent);
        continue;
      }
      case wire::FrameReader::State::complete:
        break;
      case wire::FrameReader::State::closed:
      case wire::FrameReader::State::failed:
        throw TreeLinkError(parent, fmt::format("bootstrap: rank {} lost its result-tree link to "
                                                "rank {} at {} while waiting for the "
                                                "result of allgather #{}: {}{}",
                                                options_.rank, parent, parent_address(), sequence,
                                                reader.state() == wire::FrameReader::State::closed
                                                    ? fmt::format("rank {} ", parent)
                                                    : std::string(),
                                                reader.problem()));
      case wire::FrameReader::State::malformed:
        throw TreeLinkError(
            parent,
            fmt::format("bootstrap: rank {} got a bad message from its result-tree parent, rank "
                        "{} at {}, in allgather #{}: {}",
                        options_.rank, parent, parent_address(), sequence, reader.problem()));
    }
    break;
  }
  const wire::FrameHeader& header = reader.header();
  if (header.type != static_cast<uint16_t>(wire::FrameType::result) ||
      header.sequence != sequence || header.length != expected) {
    throw TreeLinkError(
        parent,
        fmt::format("bootstrap: protocol error: rank {} expected the {}-byte result of allgather "
                    "#{} from its "
                    "result-tree parent, rank {} at {}, but got a {} message #{} of {} bytes",
                    options_.rank, expected, sequence, parent, parent_address(),
                    wire::to_string(static_cast<wire::FrameType>(header.type)), header.sequence,
                    header.length));
  }
  received_ += wire::kHeaderBytes + header.length;
  std::vector<std::byte> payload = std::move(reader.payload());
  reader.reset();
  return payload;
}

int ResultTreeLinks::child_hello(wire::FrameReader& reader, const std::vector<int>& awaited,
                                 std::string* reason) const {
  if (reader.header().type != static_cast<uint16_t>(wire::FrameType::hello)) {
    *reason = fmt::format("expected a hello but got a {} message",
                          wire::to_string(static_cast<wire::FrameType>(reader.header().type)));
    return -1;
  }
  std::optional<wire::Hello> hello = wire::decode_hello_payload(reader.payload(), reason);
  if (!hello) return -1;
  if (!wire::tokens_equal(options_.job_token, hello->token)) {
    *reason = "wrong job token";
    return -1;
  }
  const int rank = hello->rank;
  if (hello->world_size != options_.world_size ||
      std::find(awaited.begin(), awaited.end(), rank) == awaited.end()) {
    *reason = fmt::format("rank {} of a {}-rank job is not a child this rank waits for", rank,
                          hello->world_size);
    return -1;
  }
  return rank;
}

void ResultTreeLinks::accept_children(uint64_t sequence, net::Deadline deadline,
                                      const Aside& aside) {
  std::vector<int> expected;
  for (int child : {2 * options_.rank + 1, 2 * options_.rank + 2}) {
    if (child < options_.world_size) expected.push_back(child);
  }
  struct Pending {
    net::Fd fd;
    std::string address;
    net::Deadline hello_deadline;
    wire::FrameReader reader{wire::kMaxHelloBytes, "hello size limit"};
  };
  std::vector<Pending> pending;  // oldest first
  auto missing = [&] {
    std::vector<int> ranks;
    for (int child : expected) {
      if (std::none_of(children_.begin(), children_.end(),
                       [&](const Child& c) { return c.rank == child; })) {
        ranks.push_back(child);
      }
    }
    return ranks;
  };
  // A connection that is not one of this rank's children is closed with a
  // reason in the log; the job goes on waiting for the real ones.
  auto refuse = [&](Pending& connection, const std::string& reason) {
    log_.warn(kComponent, "rank {} refused a result-tree connection from {}: {}", options_.rank,
              connection.address, reason);
    connection.fd.reset();
  };
  while (!missing().empty()) {
    std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
    for (const Pending& connection : pending) fds.push_back({connection.fd.get(), POLLIN, 0});
    const std::vector<int> awaited = missing();
    wait(fds, deadline, aside,
         fmt::format("{} to open {} result-tree link{} for allgather #{}",
                     format_rank_list(awaited), awaited.size() == 1 ? "its" : "their",
                     awaited.size() == 1 ? "" : "s", sequence),
         awaited.front());
    const net::Clock::time_point now = net::Clock::now();
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& connection = pending[i];
      if (fds[1 + i].revents != 0) {
        switch (connection.reader.read_available(connection.fd.get())) {
          case wire::FrameReader::State::reading:
            break;
          case wire::FrameReader::State::complete: {
            std::string reason;
            const int child = child_hello(connection.reader, missing(), &reason);
            if (child < 0) {
              refuse(connection, reason);
              break;
            }
            children_.push_back({child, std::move(connection.fd)});
            break;
          }
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
                           kHelloTimeout.count(), connection.reader.bytes_received()));
      }
    }
    std::erase_if(pending, [](const Pending& c) { return !c.fd; });
    if (fds[0].revents != 0) {
      for (;;) {
        std::string address;
        net::Fd fd = net::accept_tcp(listener_, &address);
        if (!fd) break;
        // A full list makes room by dropping the oldest: a real child says
        // hello as soon as it connects, so an idle flood cannot lock it out.
        if (pending.size() >= kMaxPending) {
          refuse(pending.front(), fmt::format("{} connections are waiting to say hello; the "
                                              "oldest goes",
                                              pending.size()));
          pending.erase(pending.begin());
        }
        pending.push_back({std::move(fd), std::move(address),
                           std::min(deadline, net::Clock::now() + kHelloTimeout)});
      }
    }
  }
  std::sort(children_.begin(), children_.end(),
            [](const Child& a, const Child& b) { return a.rank < b.rank; });
  children_complete_ = true;
  listener_.reset();  // nobody else may connect now
}

std::vector<ResultTreeLinks::Stuck> ResultTreeLinks::forward(std::span<const std::byte> frame,
                                                             uint64_t sequence,
                                                             net::Deadline deadline,
                                                             const Aside& aside) {
  if (!result_tree::has_children(options_.rank, options_.world_size)) return {};
  if (!children_complete_) accept_children(sequence, deadline, aside);
  // Both children at once, so that one that does not read cannot hold up
  // the other.
  std::vector<size_t> done(children_.size(), 0);
  auto pending = [&] {
    std::vector<size_t> left;
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].fd && done[i] < frame.size()) left.push_back(i);
    }
    return left;
  };
  for (std::vector<size_t> left = pending(); !left.empty(); left = pending()) {
    std::vector<pollfd> fds;
    for (size_t i : left) fds.push_back({children_[i].fd.get(), POLLOUT, 0});
    if (!wait_until(fds, deadline, aside)) {
      std::vector<Stuck> stuck;
      for (size_t i : left) {
        stuck.push_back({children_[i].rank,
                         fmt::format("bootstrap: rank {} timed out after {} s passing the result "
                                     "of allgather #{} on to rank {}, which took {} of its {} "
                                     "bytes",
                                     options_.rank, options_.timeout_s, sequence, children_[i].rank,
                                     done[i], frame.size())});
        children_[i].fd.reset();  // out of frame now: nothing more may go on it
      }
      return stuck;
    }
    for (size_t k = 0; k < left.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Child& child = children_[left[k]];
      size_t& sent = done[left[k]];
      const ssize_t n =
          ::send(child.fd.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        sent_ += static_cast<uint64_t>(n);
        continue;
      }
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      log_.warn(kComponent, "rank {} could not pass the result of allgather #{} on to rank {}: {}",
                options_.rank, sequence, child.rank,
                n == 0 ? std::string("connection closed") : std::string(std::strerror(errno)));
      child.fd.reset();  // its death is rank 0's to announce
    }
  }
  return {};
}

}  // namespace courier
