// Helpers for the bootstrap unit tests: ranks run as threads of the test
// process on 127.0.0.1, a log that tests can read back, and a raw TCP client
// that speaks (or deliberately mis-speaks) the wire protocol.
//
// Tests wait for events (a log line, a closed connection) with generous
// deadlines instead of sleeping, and never assert on durations.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "core/bootstrap/bootstrap_wire.hpp"
#include "core/bootstrap/socket.hpp"
#include "core/bootstrap/tcp_bootstrap.hpp"
#include "core/log.hpp"
#include "courier/error.hpp"

namespace courier::test {

// Deadline for waiting on events that normally take milliseconds; only a
// broken implementation gets near it.
inline constexpr std::chrono::seconds kPatience{30};

// A Logger writing to an unlinked temporary file, readable while in use.
class LogCapture {
 public:
  explicit LogCapture(LogLevel level = LogLevel::info) {
    char path[] = "/tmp/courier-bootstrap-test-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    unlink(path);
    read_fd_ = dup(fd);
    file_ = fdopen(fd, "w");
    REQUIRE(file_ != nullptr);
    logger_.emplace(level, file_);
  }
  ~LogCapture() {
    logger_.reset();
    std::fclose(file_);
    close(read_fd_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  Logger& logger() { return *logger_; }

  // Everything logged so far (the Logger flushes after every line).
  std::string text() const {
    std::string all;
    char buffer[4096];
    off_t offset = 0;
    for (;;) {
      ssize_t got = pread(read_fd_, buffer, sizeof buffer, offset);
      if (got <= 0) break;
      all.append(buffer, static_cast<size_t>(got));
      offset += got;
    }
    return all;
  }
  bool contains(const std::string& needle) const {
    return text().find(needle) != std::string::npos;
  }
  // Waits until `needle` has been logged; false if it never was.
  bool wait_for(const std::string& needle) const {
    auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!contains(needle)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  std::FILE* file_ = nullptr;
  int read_fd_ = -1;
  std::optional<Logger> logger_;
};

inline const std::string kToken = "0123456789abcdef-unit-test-token";

inline BootstrapOptions options_for(int rank, int world_size, uint16_t port, int timeout_s = 30) {
  BootstrapOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.host = "127.0.0.1";
  options.port = port;
  options.job_token = kToken;
  options.timeout_s = timeout_s;
  return options;
}

// What one rank's thread ended with.
struct RankOutcome {
  bool ok = false;
  std::string error;                            // the courier::Error message when !ok
  std::vector<std::vector<std::byte>> results;  // what its collectives returned
};

// Runs body(rank) on a thread; collects its outcome. Failed checks inside
// threads would not be reported reliably, so threads only record and the
// test asserts afterwards.
class RankThread {
 public:
  using Body = std::function<std::vector<std::vector<std::byte>>(int rank)>;
  RankThread(int rank, Body body)
      : thread_([this, rank, body = std::move(body)] {
          try {
            outcome_.results = body(rank);
            outcome_.ok = true;
          } catch (const Error& error) {
            outcome_.error = error.what();
          } catch (const std::exception& error) {
            outcome_.error = std::string("unexpected exception: ") + error.what();
          }
        }) {}
  ~RankThread() {
    if (thread_.joinable()) thread_.join();
  }
  RankThread(const RankThread&) = delete;
  RankThread& operator=(const RankThread&) = delete;

  const RankOutcome& join() {
    if (thread_.joinable()) thread_.join();
    return outcome_;
  }

 private:
  RankOutcome outcome_;
  std::thread thread_;
};

// Starts one thread per rank in `ranks`, all running `body`.
inline std::vector<std::unique_ptr<RankThread>> start_ranks(const std::vector<int>& ranks,
                                                            const RankThread::Body& body) {
  std::vector<std::unique_ptr<RankThread>> threads;
  for (int rank : ranks) threads.push_back(std::make_unique<RankThread>(rank, body));
  return threads;
}

inline std::vector<RankOutcome> join_all(std::vector<std::unique_ptr<RankThread>>& threads) {
  std::vector<RankOutcome> outcomes;
  for (auto& thread : threads) outcomes.push_back(thread->join());
  return outcomes;
}

// `size` bytes that depend on rank and round, to check placement in results.
inline std::vector<std::byte> pattern(int rank, int round, size_t size) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::byte>((rank * 131 + round * 17 + static_cast<int>(i)) & 0xff);
  }
  return bytes;
}

inline std::vector<std::byte> as_bytes(const std::string& text) {
  const auto* data = reinterpret_cast<const std::byte*>(text.data());
  return {data, data + text.size()};
}

// A hand-driven client of rank 0's rendezvous.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!fd_) {
      net::ConnectAttempt attempt =
          net::connect_tcp_once("127.0.0.1", port, net::deadline_after(std::chrono::seconds(1)));
      if (attempt.fd) {
        fd_ = std::move(attempt.fd);
        break;
      }
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline,
                      "rank 0 never started listening: " << attempt.error);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void send(const std::vector<std::byte>& bytes) {
    net::IoResult sent = net::send_all(fd_.get(), bytes, net::deadline_after(kPatience));
    REQUIRE_MESSAGE(sent.ok(), "raw client could not send: " << sent.describe());
  }

  // Reads until rank 0 closes the connection; returns the error text rank 0
  // sent first, or "" if it sent none.
  std::string read_refusal() {
    std::vector<std::byte> received;
    auto deadline = net::deadline_after(kPatience);
    for (;;) {
      std::byte buffer[4096];
      size_t got = 0;
      net::IoResult result = net::receive_some(fd_.get(), buffer, &got);
      received.insert(received.end(), buffer, buffer + got);
      if (result.status == net::IoStatus::closed) break;
      REQUIRE_MESSAGE(result.ok(), "raw client receive failed: " << result.describe());
      if (got == 0) {
        REQUIRE_MESSAGE(net::wait_readable(fd_.get(), deadline).ok(),
                        "rank 0 neither answered nor closed the connection");
      }
    }
    if (received.size() < wire::kHeaderBytes) return "";
    wire::FrameHeader header = wire::decode_header(
        std::span<const std::byte, wire::kHeaderBytes>(received.data(), wire::kHeaderBytes));
    if (header.type != static_cast<uint16_t>(wire::FrameType::error)) return "";
    return std::string(reinterpret_cast<const char*>(received.data()) + wire::kHeaderBytes,
                       received.size() - wire::kHeaderBytes);
  }

  // Reads one whole frame (header and payload).
  wire::FrameReader read_frame(uint64_t max_length = wire::kMaxErrorBytes) {
    wire::FrameReader reader(max_length, "test limit");
    auto deadline = net::deadline_after(kPatience);
    while (reader.read_available(fd_.get()) == wire::FrameReader::State::reading) {
      REQUIRE_MESSAGE(net::wait_readable(fd_.get(), deadline).ok(), "no frame from the peer");
    }
    REQUIRE_MESSAGE(reader.state() == wire::FrameReader::State::complete, reader.problem());
    return reader;
  }
  // Reads one whole frame and returns its type.
  wire::FrameType read_frame_type() {
    return static_cast<wire::FrameType>(read_frame().header().type);
  }

  void close() { fd_.reset(); }

 private:
  net::Fd fd_;
};

inline std::vector<std::byte> hello_frame(int rank, int world_size, const std::string& token,
                                          uint16_t tree_port = 0) {
  return wire::encode_frame(wire::FrameType::hello, 0,
                            wire::encode_hello_payload({rank, world_size, token, tree_port}));
}

}  // namespace courier::test
