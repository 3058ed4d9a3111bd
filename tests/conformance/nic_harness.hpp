// The conformance harness: loads the NIC backend under test, provides host
// services, and runs a scenario between real processes.
//
// run_group() forks N - 1 children. This process becomes rank 0 and runs its
// half with doctest assertions. The children become ranks 1..N-1: they
// cannot use doctest (their results would be lost), so each writes failures
// into a Report that travels back over its socketpair and is checked here.
// Every child talks to rank 0 over its own socketpair (one Message per
// datagram) to exchange endpoint names and keys and to ask for
// verifications; children never talk to each other. run_pair() is the common
// two-rank case: rank 0 the "initiator", rank 1 the "target". Every wait has
// a deadline, and while waiting each side keeps polling its endpoint, because
// providers with manual progress (shm, tcp) only move data when the target
// polls.
//
// A test reports a capability it cannot check with MESSAGE("SKIP: <why>");
// courier-conformance lists those cases as SKIP, never as PASS.
#pragma once

#include <courier/abi/nic_v1.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace courier::conformance {

using Clock = std::chrono::steady_clock;

// Upper bound for any single wait; generous because the CI machines are
// small and shared. Reaching it is a failure, never a timing measurement.
inline constexpr std::chrono::seconds kWaitLimit{30};
inline Clock::time_point deadline() { return Clock::now() + kWaitLimit; }

// The plugin named by COURIER_CONFORMANCE_PLUGIN (courier-conformance sets it
// from --backend), loaded once per process.
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

// One datagram between rank 0 and one child.
struct Message {
  enum Tag : uint32_t {
    kHello = 1,  // rank's endpoint; args: name length, rkey.key, rkey.base, region bytes;
                 // text: the name. A child sends its own; rank 0 answers with all N.
    kReady,      // after ep_connect: child -> rank 0; rank 0 -> child once all have connected
    kResult,     // child -> rank 0 at the end: text = the child's failures ("" = passed)
    kDone,       // rank 0 -> child: scenario over, report back
    kVerify,     // args: offset, length, seed, strict (1 = must already be visible)
    kVerified,   // answer to kVerify: text = "" or what is wrong
    kStore,      // args: offset, value, width (1..8 bytes, little-endian)
    kStored,     // answer to kStore
    kLoad,       // args: offset: read 8 bytes of the target's region
    kLoaded,     // answer to kLoad: args[0] = the bytes (little-endian); text = "" or error
  };
  uint32_t tag = 0;
  uint32_t rank = 0;  // kHello: whose endpoint it describes
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
// connected to every other rank. The "peer" is the rank this one talks to by
// default: rank 1 for rank 0, rank 0 for every child.
class Session {
 public:
  // channels[r]: the socket to rank r, or -1 (rank 0 has one per child, a
  // child only channels[0]).
  Session(int rank, int ranks, std::vector<int> channels, const SessionOptions& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // init, query, ep_open, mr_register, exchange names and keys, connect,
  // and wait until every rank has connected. Returns "" or what failed.
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
  // A write from our region [local_offset, +length) to the default peer's
  // region at remote_offset.
  courier_nic_write_v1 make_write(uint64_t local_offset, uint64_t remote_offset, uint64_t length,
                                  uint64_t cookie) const;

  // Messages to and from the default peer, or to and from rank `other`.
  void send(const Message& message) { send_to(peer, message); }
  void send_to(int other, const Message& message);
  // Waits for the next message, pumping meanwhile. False on deadline or when
  // the other process closed the channel (see channel_closed()).
  bool receive(Message* out, Clock::time_point until) { return receive_from(peer, out, until); }
  bool receive_from(int other, Message* out, Clock::time_point until);
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
  courier_nic_rkey_v1 peer_key{};  // the default peer's region
  size_t peer_region_bytes = 0;
  const int rank;
  const int ranks;  // processes in the scenario
  const int peer;
  const SessionOptions options;
  std::deque<courier_nic_completion_v1> pending;
  std::string poll_errors;  // texts of negative poll() results
  bool atomics = false;     // the endpoint was opened with COURIER_NIC_EP_ATOMICS

 private:
  // Rank 0's and a child's halves of setup() after ep_name.
  std::string exchange_as_root(const Message& mine);
  std::string exchange_as_child(const Message& mine);
  // Takes the next message from `other`, which must carry `tag`.
  std::string expect(int other, uint32_t tag, Message* out);
  std::string connect(const std::vector<Message>& hellos);

  std::vector<int> channels_;
  bool channel_closed_ = false;
};

// Runs a scenario of `ranks` processes (2 or more); see the top of this file.
// `root` runs in this process as rank 0; `child` runs in every other rank
// (Session::rank tells which).
void run_group(int ranks, const SessionOptions& options, const std::function<void(Session&)>& root,
               const std::function<void(Session&, Report&)>& child);

// Two processes: rank 0 the initiator, rank 1 the target.
inline void run_pair(const SessionOptions& options, const std::function<void(Session&)>& initiator,
                     const std::function<void(Session&, Report&)>& target) {
  run_group(2, options, initiator, target);
}

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
