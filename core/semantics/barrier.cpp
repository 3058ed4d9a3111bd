#include "core/semantics/barrier.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "core/proxy/cookie_codec.hpp"

namespace courier {

namespace {

// One channel's block of the host's shared segment.
constexpr size_t kArrivedOffset = 0;    // uint64: local arrivals ever
constexpr size_t kReleasedOffset = 64;  // uint64: barriers released on this host; bit 63: failed
constexpr size_t kEpochsOffset = 128;   // uint64 per local index: epoch of its latest arrival
constexpr uint64_t kFailedBit = uint64_t{1} << 63;

std::atomic_ref<uint64_t> word(std::byte* block, size_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(block + offset));
}

}  // namespace

BarrierTopology make_barrier_topology(uint32_t rank, const std::vector<std::string>& host_keys) {
  BarrierTopology t;
  t.rank = rank;
  const uint32_t world = static_cast<uint32_t>(host_keys.size());
  std::vector<uint32_t> local_index(world, 0);
  std::vector<uint32_t> leader(world, 0);
  for (uint32_t r = 0; r < world; ++r) {
    uint32_t before = 0;
    leader[r] = r;
    for (uint32_t q = 0; q < r; ++q) {
      if (host_keys[q] == host_keys[r]) {
        if (before == 0) leader[r] = q;
        ++before;
      }
    }
    local_index[r] = before;
    if (before == 0) t.host_leaders.push_back(r);
  }
  t.host_leader = leader[rank];
  t.local_index = local_index[rank];
  t.local_size =
      static_cast<uint32_t>(std::count(host_keys.begin(), host_keys.end(), host_keys[rank]));
  for (uint32_t r = 0; r < world; ++r) {
    if (local_index[r] == t.local_index) t.rail.push_back(r);
  }
  return t;
}

size_t barrier_block_bytes(uint32_t local_size) {
  return (kEpochsOffset + size_t{local_size} * 8 + 63) / 64 * 64;
}

BarrierEngine::BarrierEngine(ProxyTransport& transport, const BarrierTopology* topology,
                             uint64_t* staging, const uint64_t* landing, uint32_t channels)
    : transport_(transport),
      topo_(topology),
      staging_(staging),
      landing_(landing),
      channels_(channels) {
  generation_[0].assign(channels, 0);
  generation_[1].assign(channels, 0);
}

BarrierEngine::Arrivals& BarrierEngine::arrivals(uint32_t channel, Scope scope,
                                                 uint16_t generation) {
  for (Arrivals& a : arrivals_) {
    if (a.channel == channel && a.scope == scope && a.generation == generation) return a;
  }
  Arrivals fresh;
  fresh.channel = channel;
  fresh.scope = scope;
  fresh.generation = generation;
  arrivals_.push_back(fresh);
  return arrivals_.back();
}

void BarrierEngine::forget(uint32_t channel, Scope scope, uint16_t generation) {
  std::erase_if(arrivals_, [&](const Arrivals& a) {
    return a.channel == channel && a.scope == scope && a.generation == generation;
  });
}

bool BarrierEngine::send(uint32_t peer, ControlKind kind, uint32_t channel, uint16_t generation,
                         uint64_t epoch) {
  const uint64_t slot = uint64_t{peer} * channels_ + channel;
  staging_[slot] = epoch;
  WriteRequest write;
  write.peer = peer;
  write.src_window = kBarrierStagingWindow;
  write.src_offset = slot * 8;
  write.dst_window = kBarrierLandingWindow;
  write.dst_offset = (uint64_t{topo_->rank} * channels_ + channel) * 8;
  write.length = 8;
  write.with_imm = true;
  write.imm = encode_barrier_imm(kind, channel, generation);
  std::string error;
  const uint64_t cookie = cookie::of_internal(cookie::SemanticKind::barrier, peer, 0);
  return transport_.post_write(write, cookie, &error) == COURIER_OK;
}

void BarrierEngine::on_message(uint32_t peer, const DecodedImm& imm) {
  const bool rail = imm.control >= ControlKind::rail_arrive;
  Arrivals& a = arrivals(imm.channel, rail ? Scope::rail : Scope::world, imm.seq);
  const uint64_t epoch = landing_[uint64_t{peer} * channels_ + imm.channel];
  switch (imm.control) {
    case ControlKind::barrier_arrive:
    case ControlKind::rail_arrive:
      if (std::find(a.from.begin(), a.from.end(), peer) != a.from.end()) break;  // duplicate
      a.from.push_back(peer);
      ++a.count;
      if (a.count == 1) {
        a.epoch = epoch;  // the leader compares its own with this one
      } else if (epoch != a.epoch && a.mismatch.empty()) {
        a.mismatch = fmt::format("rank {} arrived with epoch {}, another rank with {}", peer, epoch,
                                 a.epoch);
      }
      break;
    case ControlKind::barrier_release:
    case ControlKind::rail_release:
      a.released = true;
      break;
    case ControlKind::barrier_release_failed:
    case ControlKind::rail_release_failed:
      a.released = true;
      a.mismatch = fmt::format("rank {} (the leader) found the epochs differing", peer);
      break;
    default:
      break;
  }
}

BarrierEngine::Step BarrierEngine::advance(uint32_t channel, Scope scope, uint64_t epoch,
                                           std::string* error) {
  if (channel >= channels_ || channel > 0x3ff) {
    *error = fmt::format("BARRIER on channel {}: barriers work on channels 0..{}", channel,
                         std::min<uint32_t>(channels_, 1024) - 1);
    return Step::failed;
  }
  auto it = std::find_if(in_progress_.begin(), in_progress_.end(), [&](const Progress& p) {
    return p.channel == channel && p.scope == scope;
  });
  if (it == in_progress_.end()) {
    Progress fresh;
    fresh.channel = channel;
    fresh.scope = scope;
    fresh.generation = generation_[static_cast<int>(scope)][channel];
    fresh.epoch = epoch;
    in_progress_.push_back(fresh);
    it = in_progress_.end() - 1;
  }
  const Step step = scope == Scope::world ? advance_world(*it, error) : advance_rail(*it, error);
  if (step != Step::waiting) {
    ++generation_[static_cast<int>(scope)][channel];
    forget(channel, scope, static_cast<uint16_t>(it->generation));
    in_progress_.erase(it);
  }
  return step;
}

BarrierEngine::Step BarrierEngine::advance_world(Progress& p, std::string* error) {
  const BarrierTopology& t = *topo_;
  std::byte* block = t.segment + p.channel * t.block_bytes;
  const uint64_t target = p.generation + 1;
  const uint16_t gen16 = static_cast<uint16_t>(p.generation);
  const bool host_leader = t.rank == t.host_leader;
  const bool global_leader = t.rank == t.host_leaders.front();
  const bool many_hosts = t.host_leaders.size() > 1;
  for (;;) {
    switch (p.phase) {
      case 0:  // node-local arrival through the shared segment
        word(block, kEpochsOffset + t.local_index * 8).store(p.epoch, std::memory_order_relaxed);
        word(block, kArrivedOffset).fetch_add(1, std::memory_order_acq_rel);
        p.phase = host_leader ? 1 : 5;
        continue;
      case 1: {  // host leader: every local rank arrived?
        if (word(block, kArrivedOffset).load(std::memory_order_acquire) < target * t.local_size) {
          return Step::waiting;
        }
        for (uint32_t i = 0; i < t.local_size; ++i) {
          const uint64_t theirs =
              word(block, kEpochsOffset + i * 8).load(std::memory_order_relaxed);
          if (theirs != p.epoch && !p.failed) {
            p.failed = true;
            p.error = fmt::format(
                "BARRIER epochs differ: local rank {} of this host arrived with {}, this rank "
                "with {}",
                i, theirs, p.epoch);
          }
        }
        if (!many_hosts) {
          p.phase = 4;
        } else if (global_leader) {
          p.phase = 2;
        } else {
          if (!send(t.host_leaders.front(), ControlKind::barrier_arrive, p.channel, gen16,
                    p.epoch)) {
            return Step::waiting;  // transport full: try again
          }
          p.phase = 3;
        }
        continue;
      }
      case 2: {  // global leader: every other host leader arrived?
        Arrivals& a = arrivals(p.channel, Scope::world, gen16);
        if (a.count < t.host_leaders.size() - 1) return Step::waiting;
        if (!p.failed && (!a.mismatch.empty() || a.epoch != p.epoch)) {
          p.failed = true;
          p.error = a.mismatch.empty()
                        ? fmt::format(
                              "BARRIER epochs differ: another host arrived with {}, this "
                              "rank with {}",
                              a.epoch, p.epoch)
                        : "BARRIER epochs differ: " + a.mismatch;
        }
        while (p.sent + 1 < t.host_leaders.size()) {
          const ControlKind kind =
              p.failed ? ControlKind::barrier_release_failed : ControlKind::barrier_release;
          if (!send(t.host_leaders[p.sent + 1], kind, p.channel, gen16, p.epoch)) {
            return Step::waiting;
          }
          ++p.sent;
        }
        p.phase = 4;
        continue;
      }
      case 3: {  // host leader: released by the global leader?
        Arrivals& a = arrivals(p.channel, Scope::world, gen16);
        if (!a.released) return Step::waiting;
        if (!a.mismatch.empty() && !p.failed) {
          p.failed = true;
          p.error = "BARRIER epochs differ: " + a.mismatch;
        }
        p.phase = 4;
        continue;
      }
      case 4:  // host leader: release the host
        word(block, kReleasedOffset)
            .store(target | (p.failed ? kFailedBit : 0), std::memory_order_release);
        if (p.failed) *error = p.error;
        return p.failed ? Step::failed : Step::done;
      case 5: {  // everyone else: wait for the host leader's release
        const uint64_t released = word(block, kReleasedOffset).load(std::memory_order_acquire);
        if ((released & ~kFailedBit) < target) return Step::waiting;
        if (released & kFailedBit) {
          *error = fmt::format(
              "BARRIER epochs differ between ranks (this rank: {}; the host "
              "leader, rank {}, logged which)",
              p.epoch, t.host_leader);
          return Step::failed;
        }
        return Step::done;
      }
      default:
        return Step::failed;
    }
  }
}

BarrierEngine::Step BarrierEngine::advance_rail(Progress& p, std::string* error) {
  const BarrierTopology& t = *topo_;
  const uint16_t gen16 = static_cast<uint16_t>(p.generation);
  const bool leader = t.rank == t.rail.front();
  for (;;) {
    switch (p.phase) {
      case 0:
        if (leader) {
          p.phase = 1;
        } else {
          if (!send(t.rail.front(), ControlKind::rail_arrive, p.channel, gen16, p.epoch)) {
            return Step::waiting;
          }
          p.phase = 2;
        }
        continue;
      case 1: {  // leader: collect, then release the rail
        Arrivals& a = arrivals(p.channel, Scope::rail, gen16);
        if (a.count < t.rail.size() - 1) return Step::waiting;
        if (!p.failed && t.rail.size() > 1 && (!a.mismatch.empty() || a.epoch != p.epoch)) {
          p.failed = true;
          p.error = a.mismatch.empty()
                        ? fmt::format(
                              "rail BARRIER epochs differ: a member arrived with {}, "
                              "the leader with {}",
                              a.epoch, p.epoch)
                        : "rail BARRIER epochs differ: " + a.mismatch;
        }
        while (p.sent + 1 < t.rail.size()) {
          const ControlKind kind =
              p.failed ? ControlKind::rail_release_failed : ControlKind::rail_release;
          if (!send(t.rail[p.sent + 1], kind, p.channel, gen16, p.epoch)) return Step::waiting;
          ++p.sent;
        }
        if (p.failed) *error = p.error;
        return p.failed ? Step::failed : Step::done;
      }
      case 2: {  // member: released?
        Arrivals& a = arrivals(p.channel, Scope::rail, gen16);
        if (!a.released) return Step::waiting;
        if (!a.mismatch.empty()) {
          *error = "rail BARRIER: " + a.mismatch;
          return Step::failed;
        }
        return Step::done;
      }
      default:
        return Step::failed;
    }
  }
}

}  // namespace courier
