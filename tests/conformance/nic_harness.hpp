// The conformance harness: loads the NIC backend under test, provides host
// services, and runs a scenario between two real processes.
//
// run_pair() forks. This process becomes rank 0, the "initiator", and runs
// its half with doctest assertions. The child becomes rank 1, the "target":
// it cannot use doctest (its results would be lost), so it writes failures
// into a Report that travels back over a socketpair and is checked here.
// Both halves talk over the same socketpair (one Message per datagram) to
// exchange endpoint names and keys and to ask for verifications. Every wait
// has a deadline, and while waiting each side keeps polling its endpoint,
// because providers with manual progress (shm, tcp) only move data when the
// target polls.
#pragma once

#include <courier/abi/nic_v1.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

namespace courier::conformance {

using Clock = std::chrono::steady_clock;

// Upper bound for any single wait; generous because the CI machines are
// small and shared. Reaching it is a failure, never a timing measurement.
inline constexpr std::chrono::seconds kWaitLimit{30};
inline Clock::time_point deadline() { return Clock::now() + kWaitLimit; }

// The plugin named by COURIER_CONFORMANCE_PLUGIN, loaded once per process.
// Throws std::runtime_error with the reason when it cannot be loaded.
const courier_nic_plugin_v1& plugin();
const std::string& plugin_path();

// The backend's last error text for the calling thread ("" if it returned NULL).
std::string backend_error(void* backend = nullptr);

// Host services as the core would provide them: stderr logging, the
// environment (with per-host overrides) and aligned allocation.
class TestHost {
 public:
  TestHost();
  TestHost(const TestHost&) = delete;
  TestHost& operator=(const TestHost&) = delete;

  const courier_host_services_v1* services() const { return &services_; }
  // Makes get_env(name) return `value` for this host only.
  void set_env(const std::string& name, const std::string& value) { overrides_[name] = value; }

 private:
  static void log(void* ctx, int level, const char* backend, const char* message);
  static const char* get_env(void* ctx, const char* name);
  static void* alloc(void* ctx, size_t size, size_t alignment);
  static void free(void* ctx, void* pointer);

  courier_host_services_v1 services_{};
  std::map<std::string, std::string> overrides_;
};

// One datagram between the two processes.
struct Message {
  enum Tag : uint32_t {
    kHello = 1,  // args: name length, rkey.key, rkey.base, region bytes; text: the name
    kResult,     // target -> initiator at the end: text = the target's failures ("" = passed)
    kDone,       // initiator -> target: scenario over, report back
    kVerify,     // args: offset, length, seed, strict (1 = must already be visible)
    kVerified,   // answer to kVerify: text = "" or what is wrong
    kStore,      // args: offset, value, width (1..8 bytes, little-endian)
    kStored,     // answer to kStore
    kLoad,       // args: offset: read 8 bytes of the target's region
    kLoaded,     // answer to kLoad: args[0] = the bytes (little-endian); text = "" or error
  };
  uint32_t tag = 0;
  uint32_t reserved = 0;
  uint64_t args[4] = {};
  char text[480] = {};
};

// Collects the target's failures.
class Report {
 public:
  [[gnu::format(printf, 3, 4)]] void check(bool condition, const char* format, ...);
  [[gnu::format(printf, 2, 3)]] void fail(const char* format, ...);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

struct SessionOptions {
  uint32_t tx_depth = 64;
  uint32_t rx_depth = 256;
  size_t region_bytes = (size_t{2} << 20) + 65536;  // room for 1 MiB writes at offsets
  // courier_nic_ep_attr_v1.flags. COURIER_NIC_EP_ATOMICS is dropped when the
  // backend offers no atomics (Session::atomics says whether it was kept).
  uint32_t ep_flags = 0;
};

// True when the plugin has the ABI 1.1 post_atomic entry and `props` lists
// at least one atomic op.
bool offers_atomics(const courier_nic_plugin_v1& api, const courier_nic_props_v1& props);

// One rank's side of a scenario: backend, endpoint, one registered region,
// connected to the other rank.
class Session {
 public:
  Session(int rank, int channel_fd, const SessionOptions& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // init, query, ep_open, mr_register, exchange names and keys, connect.
  // Returns "" or what failed.
  std::string setup();

  // Polls once; appends completions to `pending`. Returns poll's result.
  int pump();
  // Takes the TX completion for `cookie` (pumping until it arrives).
  bool take_tx(uint64_t cookie, courier_nic_completion_v1* out, Clock::time_point until);
  // Takes the oldest RX_IMM completion (pumping until one arrives).
  bool take_rx_imm(courier_nic_completion_v1* out, Clock::time_point until);
  // post_write, pumping and retrying while the endpoint answers -EAGAIN.
  // Returns the final status, or -ETIMEDOUT.
  int post_retrying(const courier_nic_write_v1& write, Clock::time_point until);
  // post_atomic with the same retrying.
  int post_atomic_retrying(const courier_nic_atomic_v1& atomic, Clock::time_point until);
  // A write from our region [local_offset, +length) to the peer's region at
  // remote_offset.
  courier_nic_write_v1 make_write(uint64_t local_offset, uint64_t remote_offset, uint64_t length,
                                  uint64_t cookie) const;

  void send(const Message& message);
  // Waits for the next message, pumping meanwhile. False on deadline or when
  // the other process closed the channel (see channel_closed()).
  bool receive(Message* out, Clock::time_point until);
  bool channel_closed() const { return channel_closed_; }

  // Target side: answers kVerify requests until kDone arrives.
  void serve(Report& report);

  const courier_nic_plugin_v1& api;
  TestHost host;
  courier_nic_props_v1 props{};
  void* backend = nullptr;
  void* ep = nullptr;
  void* mr = nullptr;
  std::byte* region = nullptr;
  courier_nic_rkey_v1 local_key{};
  courier_nic_rkey_v1 peer_key{};
  size_t peer_region_bytes = 0;
  const int rank;
  const int peer;
  const SessionOptions options;
  std::deque<courier_nic_completion_v1> pending;
  std::string poll_errors;  // texts of negative poll() results
  bool atomics = false;     // the endpoint was opened with COURIER_NIC_EP_ATOMICS

 private:
  int fd_;
  bool channel_closed_ = false;
};

// Runs a two-process scenario; see the top of this file.
void run_pair(const SessionOptions& options, const std::function<void(Session&)>& initiator,
              const std::function<void(Session&, Report&)>& target);

// Initiator helper: asks the target to check region bytes [offset, +length)
// for the pattern of `seed` (strict: without waiting for them to appear).
// Returns "" or the target's complaint.
std::string verify_remote(Session& session, uint64_t offset, uint64_t length, uint64_t seed,
                          bool strict);

// Initiator helpers for atomics: make the target store `width` bytes of
// `value` at `offset` of its region, or read 8 bytes there. The target does
// it with plain CPU accesses between two polls. Store returns "" or a problem;
// load sets *value.
std::string remote_store(Session& session, uint64_t offset, uint64_t value, uint32_t width);
std::string remote_load(Session& session, uint64_t offset, uint64_t* value);

// Mask of the immediate-data bytes a backend carries.
inline uint64_t imm_mask(uint32_t imm_bytes) {
  return imm_bytes >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * imm_bytes)) - 1;
}

}  // namespace courier::conformance
