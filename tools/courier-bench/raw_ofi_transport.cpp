// The raw-libfabric baseline of courier-bench transport.
//
// This is the one place outside nic/ allowed to include libfabric: it IS the
// plain libfabric program Courier is compared against. For a fair comparison
// it opens its endpoint exactly as the nic-ofi backend does (same provider
// mapping, same hints including the FI_DELIVERY_COMPLETE choice, same
// fabric/domain/AV/CQ/endpoint settings, same memory-registration calls), by
// calling the same helpers in nic/ofi. Only the data path differs: here it
// is a bare loop of fi_write/fi_writedata and fi_cq_read.
#include "raw_ofi_transport.hpp"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <thread>

#include "core/bootstrap/bootstrap.hpp"
#include "courier/error.hpp"
#include "nic/ofi/ofi_error.hpp"
#include "nic/ofi/ofi_fabric.hpp"
#include "nic/ofi/ofi_info.hpp"
#include "nic/ofi/ofi_mr.hpp"

namespace courier::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Completions read per fi_cq_read, as the Courier proxy does
// (COURIER_DRAIN_BATCH).
constexpr size_t kPollBatch = 32;
// A measured run that has not finished after this long is broken.
constexpr std::chrono::seconds kTimeout{120};

[[noreturn]] void fail(const std::string& what) { throw Error("transport --raw: " + what); }

[[noreturn]] void fail_fi(const char* call, long rc) { fail(ofi::describe_fi_error(call, rc)); }

// Reads one error entry and fails with the provider's explanation.
[[noreturn]] void fail_cq_error(fid_cq* cq) {
  fi_cq_err_entry error{};
  if (fi_cq_readerr(cq, &error, 0) != 1) fail("fi_cq_read reported an error, but none was queued");
  char detail[256] = "";
  const char* text = fi_cq_strerror(cq, error.prov_errno, error.err_data, detail, sizeof detail);
  fail(std::string("completion error: ") + fi_strerror(error.err) + " (" +
       (text ? text : "no detail") + ")");
}

// What each rank publishes through the bootstrap.
struct Card {
  char name[ofi::kMaxNameBytes];
  uint64_t key;
  uint64_t base;
};

// Host memory with the alignment RDMA NICs like; freed with std::free.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// The barrier that ends a size: this rank's completion queue keeps being
// read meanwhile. Providers with manual progress (shm, tcp;ofi_rxm) only
// complete the sender's writes while the receiver reads its queue, so under
// "write" rank 1 waits here while rank 0 writes, and with delivery-complete
// semantics the last acknowledgements may still be owed when a rank enters.
// Only the barrier at the END of a size may do this: at its start, the helper
// could swallow immediate-data completions of the next measurement. The
// helper is the only thread touching libfabric meanwhile (FI_THREAD_DOMAIN
// holds: start and join order it with the main thread).
void barrier_with_progress(Bootstrap& bootstrap, fid_cq* cq) {
  std::atomic<bool> stop{false};
  std::thread progress([&] {
    fi_cq_data_entry entries[kPollBatch];
    while (!stop.load(std::memory_order_relaxed)) {
      const ssize_t got = fi_cq_read(cq, entries, kPollBatch);
      if (got == -FI_EAVAIL) {
        fi_cq_err_entry error{};
        fi_cq_readerr(cq, &error, 0);
      } else if (got <= 0) {
        std::this_thread::yield();
      }
    }
  });
  try {
    bootstrap.barrier();
  } catch (...) {
    stop = true;
    progress.join();
    throw;
  }
  stop = true;
  progress.join();
}

// The endpoint, its registered buffer and the peer's coordinates.
struct RawEndpoint {
  ofi::ProviderProfile profile;
  ofi::EndpointStack stack;
  std::unique_ptr<void, AlignedFree> buffer;
  std::unique_ptr<ofi::MemoryRegion> mr;  // declared after the stack: closed first
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
  uint64_t peer_key = 0;
  uint64_t peer_base = 0;
};

void open_raw_endpoint(const RawTransportOptions& o, size_t largest, uint32_t depth,
                       Bootstrap& bootstrap, RawEndpoint* out) {
  const ofi::ProviderAlias* alias = ofi::find_provider_alias(o.provider);
  if (!alias) fail("unknown provider '" + o.provider + "': expected shm or tcp");
  if (ofi::probe_provider(alias->prov_name, &out->profile) != 0) fail(ofi::last_error());
  if (ofi::open_endpoint_stack(out->profile, depth, depth, &out->stack) != 0) {
    fail(ofi::last_error());
  }

  const size_t bytes = (largest + 4095) / 4096 * 4096;
  out->buffer.reset(std::aligned_alloc(4096, bytes));
  if (!out->buffer) fail("cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(out->buffer.get(), 0, bytes);
  if (ofi::MemoryRegion::create(out->stack.domain.get(), out->stack.ep.get(), out->profile.mr_mode,
                                out->buffer.get(), bytes, FI_WRITE | FI_REMOTE_WRITE,
                                ofi::RequestedKeys(*out->stack.info).next(), nullptr,
                                &out->mr) != 0) {
    fail(ofi::last_error());
  }

  Card mine{};
  size_t name_len = sizeof mine.name;
  if (ofi::get_endpoint_name(out->stack, mine.name, &name_len) != 0) fail(ofi::last_error());
  mine.key = out->mr->key();
  mine.base = out->mr->base();
  const std::vector<std::byte> all =
      bootstrap.allgather(std::as_bytes(std::span<const Card, 1>(&mine, 1)));
  if (all.size() != 2 * sizeof(Card)) fail("unexpected allgather size");

  std::vector<fi_addr_t> addresses;
  if (ofi::insert_peers(out->stack, 2, all.data(), sizeof(Card), &addresses) != 0) {
    fail(ofi::last_error());
  }
  Card theirs;
  const int peer_rank = 1 - bootstrap.rank();
  std::memcpy(&theirs, all.data() + peer_rank * sizeof(Card), sizeof theirs);
  out->peer = addresses[peer_rank];
  out->peer_key = theirs.key;
  out->peer_base = theirs.base;
}

// Rank 0: posts `count` writes of `size` bytes keeping at most `window` in
// flight, reading completions in batches, until all have completed.
// Returns the seconds from the first post to the last completion.
double write_loop(RawEndpoint& e, size_t size, uint64_t count, uint32_t window, bool imm) {
  fid_ep* ep = e.stack.ep.get();
  fid_cq* cq = e.stack.cq.get();
  void* buffer = e.buffer.get();
  void* desc = e.mr->desc();
  const uint64_t remote_addr = e.peer_base;  // offset 0 of the peer's buffer

  // One context per write in flight (FI_CONTEXT/FI_CONTEXT2), recycled as
  // completions return them.
  std::vector<fi_context2> contexts(window);
  std::vector<fi_context2*> free_contexts;
  for (fi_context2& c : contexts) free_contexts.push_back(&c);

  fi_cq_data_entry entries[kPollBatch];
  uint64_t posted = 0, completed = 0;
  const auto start = Clock::now();
  const auto give_up = start + kTimeout;
  while (completed < count) {
    while (posted < count && !free_contexts.empty()) {
      fi_context2* context = free_contexts.back();
      const ssize_t rc =
          imm ? fi_writedata(ep, buffer, size, desc, posted & 0xFFFFFFFFu, e.peer, remote_addr,
                             e.peer_key, context)
              : fi_write(ep, buffer, size, desc, e.peer, remote_addr, e.peer_key, context);
      if (rc == -FI_EAGAIN) break;
      if (rc != 0) fail_fi(imm ? "fi_writedata" : "fi_write", rc);
      free_contexts.pop_back();
      ++posted;
    }
    const ssize_t got = fi_cq_read(cq, entries, kPollBatch);
    if (got > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        free_contexts.push_back(static_cast<fi_context2*>(entries[i].op_context));
      }
      completed += static_cast<uint64_t>(got);
    } else if (got == -FI_EAVAIL) {
      fail_cq_error(cq);
    } else if (got != -FI_EAGAIN) {
      fail_fi("fi_cq_read", got);
    } else if (Clock::now() > give_up) {
      fail("rank 0 timed out with " + std::to_string(count - completed) + " writes outstanding");
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Rank 1 under write_imm: reads its queue until `count` writes with remote
// CQ data have landed.
void receive_loop(RawEndpoint& e, uint64_t count) {
  fid_cq* cq = e.stack.cq.get();
  fi_cq_data_entry entries[kPollBatch];
  uint64_t received = 0;
  const auto give_up = Clock::now() + kTimeout;
  while (received < count) {
    const ssize_t got = fi_cq_read(cq, entries, kPollBatch);
    if (got > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        if (entries[i].flags & FI_REMOTE_CQ_DATA) ++received;
      }
    } else if (got == -FI_EAVAIL) {
      fail_cq_error(cq);
    } else if (got != -FI_EAGAIN) {
      fail_fi("fi_cq_read", got);
    } else if (Clock::now() > give_up) {
      fail("rank 1 received " + std::to_string(received) + " of " + std::to_string(count) +
           " immediate-data writes");
    }
  }
}

}  // namespace

// Restricts the calling thread (and threads it starts) to `cpus` while it
// lives; restores the previous mask afterwards.
class ScopedAffinity {
 public:
  explicit ScopedAffinity(const std::vector<int32_t>& cpus) {
    if (cpus.empty() || pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) != 0) {
      return;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int32_t cpu : cpus) CPU_SET(cpu, &set);
    active_ = pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
  }
  ~ScopedAffinity() {
    if (active_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;

 private:
  cpu_set_t saved_{};
  bool active_ = false;
};

std::vector<BenchResult> run_raw_transport(const RawTransportOptions& o, Bootstrap& bootstrap) {
  ScopedAffinity placement(o.cpus);
  if (bootstrap.size() != 2) fail("needs exactly 2 ranks");
  if (o.sizes.empty()) fail("no sizes given");
  if (o.window == 0) fail("window must be at least 1");
  if (o.op != "write" && o.op != "write_imm") fail("unknown op '" + o.op + "'");
  const bool imm = o.op == "write_imm";
  const size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());

  RawEndpoint endpoint;
  open_raw_endpoint(o, largest, o.window, bootstrap, &endpoint);
  if (largest > endpoint.profile.max_msg_size) {
    fail("size " + std::to_string(largest) + " exceeds the provider's max_msg_size");
  }

  std::vector<BenchResult> results;
  const uint64_t warmup = std::max<uint64_t>(o.iters / 10, 16);  // as Courier's side
  for (size_t size : o.sizes) {
    bootstrap.barrier();  // nothing is in flight here (see barrier_with_progress)
    if (bootstrap.rank() == 0) {
      write_loop(endpoint, size, warmup, o.window, imm);
      const double seconds = write_loop(endpoint, size, o.iters, o.window, imm);
      BenchResult r;
      r.bench = "transport";
      r.path = "raw";
      r.op = o.op;
      r.provider = o.provider;
      r.size = size;
      r.window = o.window;
      r.iters = o.iters;
      r.threads = 1;
      r.seconds = seconds;
      r.msgs_per_s = static_cast<double>(o.iters) / seconds;
      r.gbytes_per_s = r.msgs_per_s * static_cast<double>(size) / 1e9;
      results.push_back(r);
    } else if (imm) {
      receive_loop(endpoint, warmup + o.iters);
    }
    // Rank 1 under "write" waits here; its helper thread provides the
    // progress rank 0's writes need.
    barrier_with_progress(bootstrap, endpoint.stack.cq.get());
  }
  return results;
}

}  // namespace courier::bench
