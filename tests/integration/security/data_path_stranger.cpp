// data_path_stranger PID: a process that is not part of a Courier job (no
// job token, no bootstrap, plain libfabric) attacks the tcp data path of the
// job's rank PID, as anyone who can reach that rank's host could:
//
//  1. it finds the rank's listening TCP sockets (/proc, as `ss -ltnp` does;
//     from another host a port scan finds them);
//  2. it opens tcp;ofi_rxm endpoints of its own and inserts the listeners'
//     addresses into their address vectors;
//  3. it posts 8-byte RMA writes of 0xee bytes at offset 0 with guessed
//     memory keys: 0 to 1000 to the first listener, 0 to 63 to the others,
//     which covers the keys a domain hands out counting from 1 (nic-ofi's
//     requests before its keys became random), until the rank answered each
//     one or one landed.
//
// Exit status: 0 when the rank refused every write to every listener; 1 when
// a write completed without error (it landed in a window); 2 when some key
// got no answer (so nothing was shown for it), there was no listener, or the
// stranger failed itself. The rank checks its window afterwards
// (data_path_check).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "listeners.hpp"

namespace {

// Keys 0..1000 to the first listener, 0..63 to the others: a rank registers a
// handful of regions per endpoint, so keys counting from 1 stay far below 64
// (each guess costs a connection, see attack).
constexpr uint64_t kLastKey = 1000;
constexpr uint64_t kLastKeyOthers = 63;
constexpr size_t kWriteBytes = 8;
// A bound on waiting for the rank, so that a stranger that gets no answer
// ends inconclusive (status 2) instead of hanging the test.
constexpr auto kGiveUp = std::chrono::seconds(30);

void say(const std::string& line) {
  std::printf("data_path_stranger: %s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void fail(const std::string& what, long rc) {
  say(what + ": " + fi_strerror(static_cast<int>(-rc)));
  std::exit(2);
}

struct Counts {
  uint64_t landed = 0;       // completed without error: the write reached a window
  uint64_t refused = 0;      // the rank refused it (bad key, no access, out of range)
  uint64_t unanswered = 0;   // keys never answered either way (connection trouble)
  uint64_t connections = 0;  // the stranger's own, one after another
  std::string first_failure;
};

// The stranger's tcp;ofi_rxm fabric and domain, and the registered source of
// its writes, shared by its endpoints.
class Provider {
 public:
  Provider() {
    fi_info* hints = fi_allocinfo();
    if (!hints) fail("fi_allocinfo", -FI_ENOMEM);
    hints->caps = FI_RMA | FI_WRITE;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    // A completion then means the rank applied (or refused) the write.
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->addr_format = FI_SOCKADDR_IN;
    hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
    long rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc != 0) fail("fi_getinfo(tcp;ofi_rxm)", rc);
    if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) != 0) fail("fi_fabric", rc);
    if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) fail("fi_domain", rc);
    std::memset(source_, 0xee, sizeof source_);
    rc = fi_mr_reg(domain_, source_, sizeof source_, FI_WRITE, 0, 0, 0, &source_mr_, nullptr);
    if (rc != 0) fail("fi_mr_reg", rc);
  }
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  fi_info* info() const { return info_; }
  fid_domain* domain() const { return domain_; }
  void* source() { return source_; }
  void* source_desc() const { return fi_mr_desc(source_mr_); }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_mr* source_mr_ = nullptr;
  unsigned char source_[kWriteBytes];
};

// One endpoint of the stranger's own, with its address vector and
// completion queue: one connection to the rank.
class Connection {
 public:
  explicit Connection(Provider& provider) : provider_(provider) {
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    long rc = fi_av_open(provider.domain(), &av_attr, &av_, nullptr);
    if (rc != 0) fail("fi_av_open", rc);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.size = 64;
    if ((rc = fi_cq_open(provider.domain(), &cq_attr, &cq_, nullptr)) != 0) fail("fi_cq_open", rc);
    if ((rc = fi_endpoint(provider.domain(), provider.info(), &ep_, nullptr)) != 0) {
      fail("fi_endpoint", rc);
    }
    if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) fail("fi_ep_bind(av)", rc);
    if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0) fail("fi_ep_bind(cq)", rc);
    if ((rc = fi_enable(ep_)) != 0) fail("fi_enable", rc);
  }
  ~Connection() {
    fi_close(&ep_->fid);
    fi_close(&cq_->fid);
    fi_close(&av_->fid);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  fi_addr_t insert(const courier::test::Listener& target) {
    fi_addr_t address = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(av_, &target.address, 1, &address, 0, nullptr) != 1) {
      fail("fi_av_insert(" + target.text + ")", -FI_EINVAL);
    }
    return address;
  }
  // An 8-byte write of 0xee bytes to offset 0 of the region with `key`; the
  // key comes back as the completion's context.
  ssize_t post(fi_addr_t address, uint64_t key) {
    return fi_write(ep_, provider_.source(), kWriteBytes, provider_.source_desc(), address, 0, key,
                    reinterpret_cast<void*>(static_cast<uintptr_t>(key)));
  }
  struct Answer {
    uint64_t key;
    int err;  // 0: the write completed
  };
  // Reads completions; with none, reading drives the provider's progress.
  std::vector<Answer> read() {
    std::vector<Answer> answers;
    fi_cq_entry entries[16];
    const ssize_t n = fi_cq_read(cq_, entries, 16);
    for (ssize_t i = 0; i < n; ++i) {
      answers.push_back(
          {static_cast<uint64_t>(reinterpret_cast<uintptr_t>(entries[i].op_context)), 0});
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry error{};
      if (fi_cq_readerr(cq_, &error, 0) == 1) {
        answers.push_back(
            {static_cast<uint64_t>(reinterpret_cast<uintptr_t>(error.op_context)), error.err});
      }
    }
    return answers;
  }

 private:
  Provider& provider_;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
};

// tcp;ofi_rxm answers a write the target refused (unknown key, range outside
// the region, no access) with -FI_ECANCELED, an atomic with -FI_EACCES.
bool refused_by_target(int err) { return err == FI_ECANCELED || err == FI_EACCES; }

// Every key from 0 to `last_key` at offset 0 of `target`, until each was
// answered or one landed. After refusing a write, the rank drops the
// connection (libfabric 1.17: what follows on it fails with -FI_ENOTCONN,
// also for a new address vector entry), so each endpoint carries one write
// on one connection, and a write whose connection failed otherwise goes out
// again on a new endpoint (up to 20 times per key); kConnections endpoints
// work side by side.
constexpr size_t kConnections = 8;

void attack(Provider& provider, const courier::test::Listener& target, uint64_t last_key,
            Counts* counts) {
  std::vector<uint64_t> pending;
  for (uint64_t key = last_key + 1; key-- > 0;) pending.push_back(key);  // popped from the back
  std::vector<int> attempts(last_key + 1, 0);
  struct Slot {
    std::unique_ptr<Connection> connection;
    fi_addr_t address = FI_ADDR_NOTAVAIL;
    bool busy = false;
  };
  std::vector<Slot> slots(kConnections);
  auto last_answer = std::chrono::steady_clock::now();
  const auto busy = [&] {
    return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.busy; });
  };
  while (!pending.empty() || busy()) {
    for (Slot& slot : slots) {
      if (!slot.busy && !pending.empty()) {
        if (!slot.connection) {
          slot.connection = std::make_unique<Connection>(provider);
          slot.address = slot.connection->insert(target);
          ++counts->connections;
        }
        const uint64_t key = pending.back();
        const ssize_t rc = slot.connection->post(slot.address, key);
        if (rc == 0) {
          pending.pop_back();
          ++attempts[key];
          slot.busy = true;
        } else if (rc != -FI_EAGAIN) {
          fail("fi_write to " + target.text, rc);
        }
      }
      if (!slot.connection) continue;
      // Reading the queue also drives the provider's progress (connecting).
      for (const Connection::Answer& a : slot.connection->read()) {
        slot.busy = false;
        last_answer = std::chrono::steady_clock::now();
        if (a.err == 0) {
          ++counts->landed;
          say(target.text + ": a write with key " + std::to_string(a.key) + " landed");
          return;  // shown: no need to damage the rank further
        }
        // Either way the connection is no good any more.
        slot.connection.reset();
        if (refused_by_target(a.err)) {
          ++counts->refused;
          continue;
        }
        if (counts->first_failure.empty()) counts->first_failure = fi_strerror(a.err);
        if (attempts[a.key] < 20) {
          pending.push_back(a.key);
        } else {
          ++counts->unanswered;
        }
      }
    }
    if (std::chrono::steady_clock::now() - last_answer > kGiveUp) {
      say("no answer from " + target.text + " for 30 s; giving up on it");
      counts->unanswered += pending.size();
      for (const Slot& slot : slots) counts->unanswered += slot.busy ? 1 : 0;
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: data_path_stranger PID\n", stderr);
    return 2;
  }
  const pid_t pid = static_cast<pid_t>(std::atoi(argv[1]));
  // Each guess needs an endpoint of its own (see attack). ofi_rxm fills 128
  // receive buffers per endpoint by default, ~80 ms of CPU here; 16 make it
  // ~10 ms. A stranger that sends 8-byte writes needs no more.
  setenv("FI_OFI_RXM_MSG_RX_SIZE", "16", 1);
  setenv("FI_OFI_RXM_MSG_TX_SIZE", "16", 1);
  std::vector<courier::test::Listener> targets;
  for (const courier::test::Listener& l : courier::test::tcp_listeners(pid)) {
    if (l.address.ss_family == AF_INET) targets.push_back(l);  // the tcp provider's first choice
  }
  if (targets.empty()) {
    say("process " + std::to_string(pid) + " listens on no IPv4 TCP socket");
    return 2;
  }
  Provider provider;
  bool refused_everywhere = true;
  uint64_t landed = 0;
  for (const courier::test::Listener& target : targets) {
    const uint64_t last_key = &target == &targets.front() ? kLastKey : kLastKeyOthers;
    Counts counts;
    attack(provider, target, last_key, &counts);
    say(target.text + ": writes with keys 0.." + std::to_string(last_key) + " at offset 0: " +
        std::to_string(counts.landed) + " landed, " + std::to_string(counts.refused) +
        " refused by the rank, " + std::to_string(counts.unanswered) + " unanswered (" +
        std::to_string(counts.connections) + " connections" +
        (counts.first_failure.empty() ? "" : " after '" + counts.first_failure + "'") + ")");
    refused_everywhere = refused_everywhere && counts.refused == last_key + 1;
    landed += counts.landed;
    if (landed > 0) break;
  }
  if (landed > 0) {
    say(std::to_string(landed) + " writes landed in the rank's windows");
    return 1;
  }
  if (!refused_everywhere) {
    say("some keys were never answered: nothing was shown for them");
    return 2;
  }
  say("every write was refused");
  return 0;
}
