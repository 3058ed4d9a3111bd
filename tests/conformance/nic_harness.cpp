#include "nic_harness.hpp"

#include <dlfcn.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

#include "nic_patterns.hpp"

namespace courier::conformance {
namespace {

struct LoadedPlugin {
  std::string path;
  const courier_nic_plugin_v1* api = nullptr;
};

LoadedPlugin load_plugin() {
  LoadedPlugin loaded;
  const char* path = std::getenv("COURIER_CONFORMANCE_PLUGIN");
  if (!path || !*path) {
    throw std::runtime_error(
        "COURIER_CONFORMANCE_PLUGIN is not set: point it at the libcourier-nic-*.so to test");
  }
  loaded.path = path;
  // Never unloaded: the process ends with the suite.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
  auto entry = reinterpret_cast<courier_nic_backend_v1_fn>(dlsym(handle, COURIER_NIC_SYMBOL_V1));
  if (!entry) {
    throw std::runtime_error(loaded.path + " does not export " + COURIER_NIC_SYMBOL_V1);
  }
  loaded.api = entry();
  if (!loaded.api)
    throw std::runtime_error(loaded.path + ": " + COURIER_NIC_SYMBOL_V1 + " returned NULL");
  return loaded;
}

const LoadedPlugin& loaded_plugin() {
  static const LoadedPlugin loaded = load_plugin();
  return loaded;
}

int log_threshold() {
  const char* level = std::getenv("COURIER_LOG_LEVEL");
  if (!level) return COURIER_LOG_WARN;
  const char* names[] = {"error", "warn", "info", "debug", "trace"};
  for (int i = 0; i < 5; ++i) {
    if (std::strcmp(level, names[i]) == 0) return i;
  }
  return COURIER_LOG_WARN;
}

std::string vformat(const char* format, va_list args) {
  char text[1024];
  std::vsnprintf(text, sizeof text, format, args);
  return text;
}

// Owns a child process: a scenario that ends early (a failed REQUIRE throws)
// must not leave its children running.
class ChildProcess {
 public:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Waits for the exit; kills the child at the deadline. Returns the
  // waitpid status, or -1 when it had to be killed.
  int wait(Clock::time_point until) {
    int status = 0;
    while (Clock::now() < until) {
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;  // the destructor kills it
  }

 private:
  pid_t pid_;
};

// Rank 0's ends of the socketpairs, indexed by rank (-1 for rank 0 itself).
struct RootChannels {
  std::vector<int> fds;
  explicit RootChannels(int ranks) : fds(ranks, -1) {}
  RootChannels(const RootChannels&) = delete;
  RootChannels& operator=(const RootChannels&) = delete;
  ~RootChannels() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
};

void copy_text(Message* message, const std::string& text) {
  std::snprintf(message->text, sizeof message->text, "%s", text.c_str());
}

// A child's whole life: set up, run its half, report, exit.
[[noreturn]] void run_child(int rank, int ranks, int fd, const SessionOptions& options,
                            const std::function<void(Session&, Report&)>& child) {
  Report report;
  {
    std::vector<int> channels(ranks, -1);
    channels[0] = fd;
    Session session(rank, ranks, channels, options);
    try {
      const std::string problem = session.setup();
      if (!problem.empty()) {
        report.fail("setup: %s", problem.c_str());
      } else {
        child(session, report);
      }
    } catch (const std::exception& e) {
      report.fail("exception: %s", e.what());
    }
    report.check(session.poll_errors.empty(), "poll() failed: %s", session.poll_errors.c_str());
    Message result;
    result.tag = Message::kResult;
    copy_text(&result, report.text());
    session.send(result);
  }  // tear down only after the report left
  _exit(0);
}

}  // namespace

const courier_nic_plugin_v1& plugin() { return *loaded_plugin().api; }
const std::string& plugin_path() { return loaded_plugin().path; }

bool offers_atomics(const courier_nic_plugin_v1& api, const courier_nic_props_v1& props) {
  const size_t entry_end = offsetof(courier_nic_plugin_v1, post_atomic) + sizeof api.post_atomic;
  return api.header.abi_minor >= 1 && api.header.struct_size >= entry_end &&
         api.post_atomic != nullptr && props.atomic_ops != 0;
}

std::string backend_error(void* backend) {
  const char* text = plugin().last_error(backend);
  return text ? text : "";
}

// ---------------------------------------------------------------- TestHost

TestHost::TestHost() {
  services_.struct_size = sizeof services_;
  services_.ctx = this;
  services_.log = &TestHost::log;
  services_.get_env = &TestHost::get_env;
  services_.alloc = &TestHost::alloc;
  services_.free = &TestHost::free;
}

void TestHost::log(void*, int level, const char* backend, const char* message) {
  static const char* const kNames[] = {"error", "warn", "info", "debug", "trace"};
  if (level > log_threshold()) return;
  std::fprintf(stderr, "[%s %s] %s\n", backend ? backend : "?",
               level >= 0 && level <= 4 ? kNames[level] : "?", message ? message : "");
}

const char* TestHost::get_env(void* ctx, const char* name) {
  const auto* host = static_cast<const TestHost*>(ctx);
  const auto found = host->overrides_.find(name);
  if (found != host->overrides_.end()) return found->second.c_str();
  return std::getenv(name);
}

void* TestHost::alloc(void*, size_t size, size_t alignment) {
  alignment = std::max(alignment, alignof(std::max_align_t));
  const size_t rounded = (size + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded);
}

void TestHost::free(void*, void* pointer) { std::free(pointer); }

// ------------------------------------------------------------------ Report

void Report::check(bool condition, const char* format, ...) {
  if (condition) return;
  va_list args;
  va_start(args, format);
  text_ += vformat(format, args) + "\n";
  va_end(args);
}

void Report::fail(const char* format, ...) {
  va_list args;
  va_start(args, format);
  text_ += vformat(format, args) + "\n";
  va_end(args);
}

// ----------------------------------------------------------------- Session

Session::Session(int rank_, int ranks_, std::vector<int> channels, const SessionOptions& options_)
    : api(plugin()),
      rank(rank_),
      ranks(ranks_),
      peer(rank_ == 0 ? 1 : 0),
      options(options_),
      channels_(std::move(channels)) {}

Session::~Session() {
  if (mr) api.mr_deregister(mr);
  if (ep) api.ep_close(ep);
  if (backend) api.fini(backend);
  if (region) host.services()->free(host.services()->ctx, region);
}

std::string Session::setup() {
  if (api.init(host.services(), &backend) != 0) return "init: " + backend_error();
  props.struct_size = sizeof props;
  if (api.query(backend, &props) != 0) return "query: " + backend_error(backend);

  courier_nic_ep_attr_v1 attr{};
  attr.struct_size = sizeof attr;
  attr.tx_depth = options.tx_depth;
  attr.rx_depth = options.rx_depth;
  attr.flags = options.ep_flags;
  if ((attr.flags & COURIER_NIC_EP_ATOMICS) && !offers_atomics(api, props)) {
    attr.flags &= ~uint32_t{COURIER_NIC_EP_ATOMICS};  // the test reports the skip
  }
  if (api.ep_open(backend, &attr, &ep) != 0) return "ep_open: " + backend_error(backend);
  atomics = (attr.flags & COURIER_NIC_EP_ATOMICS) != 0;

  const courier_host_services_v1* services = host.services();
  region = static_cast<std::byte*>(services->alloc(services->ctx, options.region_bytes, 4096));
  if (!region) return "cannot allocate the test region";
  fill_canary(region, 0, options.region_bytes);
  if (api.mr_register(ep, region, options.region_bytes, COURIER_MEM_HOST, &mr, &local_key) != 0) {
    return "mr_register: " + backend_error(backend);
  }

  Message hello;
  if (props.max_ep_name == 0 || props.max_ep_name > sizeof hello.text) {
    return "max_ep_name " + std::to_string(props.max_ep_name) + " is 0 or larger than the " +
           std::to_string(sizeof hello.text) + " bytes this harness can exchange";
  }
  size_t name_len = props.max_ep_name;
  if (api.ep_name(ep, hello.text, &name_len) != 0) return "ep_name: " + backend_error(backend);
  if (name_len == 0 || name_len > props.max_ep_name) {
    return "ep_name returned length " + std::to_string(name_len) + " (max_ep_name " +
           std::to_string(props.max_ep_name) + ")";
  }
  hello.tag = Message::kHello;
  hello.rank = static_cast<uint32_t>(rank);
  hello.args[0] = name_len;
  hello.args[1] = local_key.key;
  hello.args[2] = local_key.base;
  hello.args[3] = options.region_bytes;
  return rank == 0 ? exchange_as_root(hello) : exchange_as_child(hello);
}

std::string Session::expect(int other, uint32_t tag, Message* out) {
  if (!receive_from(other, out, deadline())) {
    return "nothing from rank " + std::to_string(other) + " (" +
           (channel_closed() ? "it exited or crashed" : "timeout") + ")";
  }
  if (out->tag == Message::kResult) {
    return "rank " + std::to_string(other) + " failed: " + out->text;
  }
  if (out->tag != tag) {
    return "unexpected message " + std::to_string(out->tag) + " from rank " +
           std::to_string(other) + " (expected " + std::to_string(tag) + ")";
  }
  return "";
}

// Rank 0 collects every child's hello, hands each child all of them,
// connects, and lets the children go once every rank has connected, so that
// no scenario writes to an endpoint that is still connecting.
std::string Session::exchange_as_root(const Message& mine) {
  std::vector<Message> hellos(ranks);
  hellos[0] = mine;
  for (int r = 1; r < ranks; ++r) {
    if (std::string problem = expect(r, Message::kHello, &hellos[r]); !problem.empty()) {
      return problem;
    }
    if (hellos[r].rank != static_cast<uint32_t>(r)) {
      return "rank " + std::to_string(r) + " introduced itself as rank " +
             std::to_string(hellos[r].rank);
    }
  }
  for (int r = 1; r < ranks; ++r) {
    for (const Message& hello : hellos) send_to(r, hello);
  }
  if (std::string problem = connect(hellos); !problem.empty()) return problem;
  Message ready;
  for (int r = 1; r < ranks; ++r) {
    if (std::string problem = expect(r, Message::kReady, &ready); !problem.empty()) {
      return problem;
    }
  }
  ready.tag = Message::kReady;
  for (int r = 1; r < ranks; ++r) send_to(r, ready);
  return "";
}

std::string Session::exchange_as_child(const Message& mine) {
  send_to(0, mine);
  std::vector<Message> hellos(ranks);
  for (int i = 0; i < ranks; ++i) {
    Message hello;
    if (std::string problem = expect(0, Message::kHello, &hello); !problem.empty()) return problem;
    if (hello.rank >= static_cast<uint32_t>(ranks)) return "hello for an unknown rank";
    hellos[hello.rank] = hello;
  }
  if (std::string problem = connect(hellos); !problem.empty()) return problem;
  Message ready;
  ready.tag = Message::kReady;
  send_to(0, ready);
  return expect(0, Message::kReady, &ready);
}

std::string Session::connect(const std::vector<Message>& hellos) {
  const Message& theirs = hellos[peer];
  peer_key.key = theirs.args[1];
  peer_key.base = theirs.args[2];
  peer_region_bytes = theirs.args[3];

  // The connect table: rank i's name at i * stride, zero padded.
  const size_t stride = props.max_ep_name;
  std::string table(hellos.size() * stride, '\0');
  for (size_t r = 0; r < hellos.size(); ++r) {
    if (hellos[r].tag != Message::kHello) return "no hello for rank " + std::to_string(r);
    std::memcpy(&table[r * stride], hellos[r].text, std::min<size_t>(hellos[r].args[0], stride));
  }
  if (api.ep_connect(ep, static_cast<uint32_t>(hellos.size()), table.data(), stride) != 0) {
    return "ep_connect: " + backend_error(backend);
  }
  return "";
}

int Session::pump() {
  courier_nic_completion_v1 batch[32];
  const int got = api.poll(ep, batch, 32);
  if (got < 0) {
    if (poll_errors.size() < 512) poll_errors += backend_error(backend) + "; ";
    return got;
  }
  pending.insert(pending.end(), batch, batch + got);
  return got;
}

bool Session::take_tx(uint64_t cookie, courier_nic_completion_v1* out, Clock::time_point until) {
  for (;;) {
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->kind == COURIER_NIC_COMP_TX && it->cookie == cookie) {
        *out = *it;
        pending.erase(it);
        return true;
      }
    }
    if (Clock::now() > until) return false;
    if (pump() <= 0) std::this_thread::yield();
  }
}

bool Session::take_rx_imm(courier_nic_completion_v1* out, Clock::time_point until) {
  for (;;) {
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->kind == COURIER_NIC_COMP_RX_IMM) {
        *out = *it;
        pending.erase(it);
        return true;
      }
    }
    if (Clock::now() > until) return false;
    if (pump() <= 0) std::this_thread::yield();
  }
}

int Session::post_retrying(const courier_nic_write_v1& write, Clock::time_point until) {
  for (;;) {
    const int rc = api.post_write(ep, &write);
    if (rc != -EAGAIN) return rc;
    if (Clock::now() > until) return -ETIMEDOUT;
    pump();
  }
}

int Session::post_atomic_retrying(const courier_nic_atomic_v1& atomic, Clock::time_point until) {
  for (;;) {
    const int rc = api.post_atomic(ep, &atomic);
    if (rc != -EAGAIN) return rc;
    if (Clock::now() > until) return -ETIMEDOUT;
    pump();
  }
}

courier_nic_write_v1 Session::make_write(uint64_t local_offset, uint64_t remote_offset,
                                         uint64_t length, uint64_t cookie) const {
  courier_nic_write_v1 write{};
  write.peer = static_cast<uint32_t>(peer);
  write.local_mr = mr;
  write.local_offset = local_offset;
  write.length = length;
  write.remote = peer_key;
  write.remote_offset = remote_offset;
  write.cookie = cookie;
  return write;
}

void Session::send_to(int other, const Message& message) {
  // SOCK_SEQPACKET: one send is one whole message.
  const int fd = channels_.at(other);
  while (::send(fd, &message, sizeof message, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

bool Session::receive_from(int other, Message* out, Clock::time_point until) {
  const int fd = channels_.at(other);
  for (;;) {
    const ssize_t got = ::recv(fd, out, sizeof *out, MSG_DONTWAIT);
    if (got == static_cast<ssize_t>(sizeof *out)) return true;
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
      channel_closed_ = true;
      return false;
    }
    if (Clock::now() > until) return false;
    // Keep the endpoint progressing while we wait for the other side.
    if (ep == nullptr || pump() <= 0) std::this_thread::yield();
  }
}

void Session::serve(Report& report) {
  Message message;
  while (receive(&message, deadline())) {
    if (message.tag == Message::kDone) return;
    if (message.tag == Message::kStore || message.tag == Message::kLoad) {
      Message answer;
      const uint64_t offset = message.args[0];
      if (offset > options.region_bytes || options.region_bytes - offset < 8) {
        answer.tag = message.tag == Message::kStore ? Message::kStored : Message::kLoaded;
        copy_text(&answer, "store/load offset outside the region");
      } else if (message.tag == Message::kStore) {
        const uint64_t value = message.args[1];
        std::memcpy(region + offset, &value, std::min<uint64_t>(message.args[2], 8));
        answer.tag = Message::kStored;
      } else {
        std::memcpy(&answer.args[0], region + offset, 8);
        answer.tag = Message::kLoaded;
      }
      send(answer);
      continue;
    }
    if (message.tag != Message::kVerify) {
      report.fail("target: unexpected message tag %u", message.tag);
      continue;
    }
    const uint64_t offset = message.args[0];
    const uint64_t length = message.args[1];
    const uint64_t seed = message.args[2];
    const bool strict = message.args[3] != 0;
    std::string problem;
    if (offset > options.region_bytes || length > options.region_bytes - offset) {
      problem = "verification range outside the region";
    } else if (strict) {
      // The initiator saw its TX completion and the backend claims delivery
      // complete: the bytes must be here already, without polling first.
      problem = check_pattern(region, offset, length, seed);
      if (!problem.empty()) problem = "not visible at TX completion: " + problem;
    } else {
      // Without delivery complete the bytes may still be on their way.
      const auto until = deadline();
      while (!(problem = check_pattern(region, offset, length, seed)).empty() &&
             Clock::now() < until) {
        pump();
      }
    }
    if (problem.empty()) {
      // Bytes next to the written range must be untouched.
      const uint64_t before = std::min<uint64_t>(offset, 4096);
      const uint64_t after = std::min<uint64_t>(options.region_bytes - offset - length, 4096);
      problem = check_canary(region, offset - before, before);
      if (problem.empty()) problem = check_canary(region, offset + length, after);
    }
    if (offset <= options.region_bytes && length <= options.region_bytes - offset) {
      fill_canary(region, offset, length);  // ready for the next write
    }
    Message answer;
    answer.tag = Message::kVerified;
    copy_text(&answer, problem);
    send(answer);
  }
  report.fail("target: no kDone from the initiator (%s)",
              channel_closed() ? "channel closed" : "timeout");
}

// --------------------------------------------------------------- run_group

void run_group(int ranks, const SessionOptions& options, const std::function<void(Session&)>& root,
               const std::function<void(Session&, Report&)>& child) {
  REQUIRE(ranks >= 2);
  RootChannels channels(ranks);
  std::deque<ChildProcess> children;  // a deque never moves its elements
  for (int r = 1; r < ranks; ++r) {
    int fds[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    channels.fds[r] = fds[0];
    std::fflush(nullptr);  // do not duplicate buffered output into the child
    const pid_t pid = fork();
    if (pid == 0) {
      // Only its own channel stays open, so that a child sees rank 0 go away.
      for (int fd : channels.fds) {
        if (fd >= 0) close(fd);
      }
      run_child(r, ranks, fds[1], options, child);
    }
    close(fds[1]);
    REQUIRE_MESSAGE(pid >= 0, "fork failed");
    children.emplace_back(pid);
  }

  {
    Session session(0, ranks, channels.fds, options);
    const std::string problem = session.setup();
    REQUIRE_MESSAGE(problem.empty(), problem);
    root(session);

    Message done;
    done.tag = Message::kDone;
    for (int r = 1; r < ranks; ++r) session.send_to(r, done);
    for (int r = 1; r < ranks; ++r) {
      Message result;
      bool reported = false;
      while (session.receive_from(r, &result, deadline())) {
        if (result.tag == Message::kResult) {
          reported = true;
          break;
        }
      }
      CHECK_MESSAGE(reported, "rank "
                                  << r << " did not report back ("
                                  << (session.channel_closed() ? "it exited or crashed" : "timeout")
                                  << ")");
      if (reported) CHECK_MESSAGE(result.text[0] == '\0', "rank " << r << ": " << result.text);
    }
    CHECK_MESSAGE(session.poll_errors.empty(), "poll() failed: " << session.poll_errors);
  }
  for (int r = 1; r < ranks; ++r) {
    const int status = children[r - 1].wait(deadline());
    CHECK_MESSAGE(status != -1, "rank " << r << " did not exit");
    if (status != -1) {
      CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                    "rank " << r << " ended with status " << status);
    }
  }
}

std::string verify_remote(Session& session, uint64_t offset, uint64_t length, uint64_t seed,
                          bool strict) {
  Message request;
  request.tag = Message::kVerify;
  request.args[0] = offset;
  request.args[1] = length;
  request.args[2] = seed;
  request.args[3] = strict ? 1 : 0;
  session.send(request);
  Message answer;
  if (!session.receive(&answer, deadline())) return "no answer from the target";
  if (answer.tag == Message::kResult) return std::string("target gave up: ") + answer.text;
  if (answer.tag != Message::kVerified) return "unexpected answer from the target";
  return answer.text;
}

std::string remote_store(Session& session, uint64_t offset, uint64_t value, uint32_t width) {
  Message request;
  request.tag = Message::kStore;
  request.args[0] = offset;
  request.args[1] = value;
  request.args[2] = width;
  session.send(request);
  Message answer;
  if (!session.receive(&answer, deadline())) return "no answer from the target";
  if (answer.tag != Message::kStored) return "unexpected answer from the target";
  return answer.text;
}

std::string remote_load(Session& session, uint64_t offset, uint64_t* value) {
  Message request;
  request.tag = Message::kLoad;
  request.args[0] = offset;
  session.send(request);
  Message answer;
  if (!session.receive(&answer, deadline())) return "no answer from the target";
  if (answer.tag != Message::kLoaded) return "unexpected answer from the target";
  *value = answer.args[0];
  return answer.text;
}

}  // namespace courier::conformance
