// Multi-rank checks of courier::Context under courier-run, one scenario per
// argument:
//   bad-commands         commands naming a missing rank, an unregistered
//                        window or bytes beyond a window fail on their
//                        channel with a logged reason; the channel and the
//                        proxy keep working afterwards.
//   mismatched-proxies   ranks started with different COURIER_PROXY_THREADS
//                        fail on every rank with a message naming it.
//   source-writes        WRITEs that read a source registration
//                        (Context::set_source) instead of their window land
//                        at the peer byte for byte, from two sources and
//                        after one is replaced; a WRITE from a source never
//                        set, or past a source's end, fails its channel
//                        naming the source.
//   neighbour-writes     every rank WRITEs to the next rank only (sparse
//                        traffic); each window then holds its left
//                        neighbour's bytes. With COURIER_IB_CONNECT=lazy a
//                        job larger than the device's queue-pair limit runs.
//   all-writes           every rank WRITEs to every rank (dense traffic);
//                        a channel that fails prints its first error and
//                        the rank exits 1 (the lazy queue-pair limit test).
//   malformed-atomics    (COURIER_ATOMICS=imm, COURIER_FAULTS=malform=1)
//                        rank 0's emulated atomics leave malformed (offset
//                        outside the window, misaligned, unknown op): rank 1
//                        rejects, counts and reports each, writes nothing;
//                        rank 0's commands fail naming rank 1.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "courier/context.hpp"
#include "gpu/fifo_push.hpp"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    fmt::print(stderr, "FAILED: {}\n", what);
    ++failures;
  }
}

// A WRITE of `length` bytes to `offset` of `window` at `rank`, read from
// `src_offset` of the same window here, or of source `source` - 1.
courier::TransferCmd write_cmd(uint32_t rank, uint32_t window, uint32_t offset, uint32_t length,
                               uint8_t source = 0, uint32_t src_offset = 0) {
  courier::WriteCmdArgs a;
  a.dst_rank = rank;
  a.window = window;
  a.source = source;
  a.src_offset = src_offset;
  a.dst_offset = offset;
  a.length = length;
  courier::TransferCmd cmd;
  expect(courier::encode_write(a, &cmd) == courier::CmdStatus::ok, "encoding a WRITE");
  return cmd;
}

// Pushes `cmd` then DRAIN on channel `c`; returns the DRAIN status.
courier::PushStatus push_and_drain(courier::Context& ctx, uint32_t c, courier::TransferCmd cmd) {
  courier::DeviceChannel ch = ctx.channel(c);
  courier::PushStatus status = courier::device::push(ch, cmd, nullptr);
  if (status != courier::PushStatus::ok) return status;
  return courier::device::drain(ch);
}

int bad_commands() {
  courier::Context ctx;
  courier::DeviceBuffer buffer = ctx.alloc(4096);
  uint32_t window = ctx.register_window(buffer.data(), buffer.size());
  ctx.barrier();
  if (ctx.rank() == 0) {
    const int world = ctx.world_size();
    struct Case {
      const char* what;
      courier::TransferCmd cmd;
    } cases[] = {
        {"a WRITE to a rank outside the job", write_cmd(world, window, 0, 8)},
        {"a WRITE to an unregistered window", write_cmd(1, window + 1, 0, 8)},
        {"a WRITE past the end of the remote window", write_cmd(1, window, 4090, 8)},
        {"a WRITE reading past the end of the local window", write_cmd(1, window, 0, 8192)},
    };
    uint32_t c = 0;
    for (const Case& k : cases) {
      courier::PushStatus status = push_and_drain(ctx, c, k.cmd);
      courier::ChannelStats stats = ctx.channel_stats(c);
      expect(status == courier::PushStatus::channel_failed,
             fmt::format("{}: DRAIN returned '{}'", k.what, courier::to_string(status)));
      expect(stats.errors == 1, fmt::format("{}: {} errors recorded", k.what, stats.errors));
      expect(stats.first_error.find("command 0 failed") != std::string::npos,
             fmt::format("{}: first_error is '{}'", k.what, stats.first_error));
      c = (c + 1) % ctx.num_channels();
    }
    // A fresh channel still moves data afterwards.
    std::string text = "still works";
    ctx.copy(buffer.data(), text.data(), text.size());
    courier::PushStatus status = push_and_drain(
        ctx, ctx.num_channels() - 1, write_cmd(1, window, 100, static_cast<uint32_t>(text.size())));
    expect(status == courier::PushStatus::ok,
           fmt::format("a good WRITE afterwards: '{}'", courier::to_string(status)));
  }
  ctx.barrier();
  if (ctx.rank() == 1) {
    std::string got(11, '\0');
    ctx.copy(got.data(), static_cast<char*>(buffer.data()) + 100, got.size());
    expect(got == "still works", "rank 1 received '" + got + "'");
  }
  ctx.barrier();
  fmt::print("rank {}: {} failed checks\n", ctx.rank(), failures);
  return failures == 0 ? 0 : 1;
}

int source_writes() {
  courier::Context ctx;
  courier::DeviceBuffer landing = ctx.alloc(4096);
  const uint32_t window = ctx.register_window(landing.data(), landing.size());
  ctx.barrier();
  const std::string first = "from source zero", second = "from source two",
                    third = "a replaced source zero";
  if (ctx.rank() == 0) {
    courier::DeviceBuffer a = ctx.alloc(256), b = ctx.alloc(256), c = ctx.alloc(256);
    ctx.copy(static_cast<std::byte*>(a.data()) + 8, first.data(), first.size());
    ctx.copy(b.data(), second.data(), second.size());
    ctx.copy(c.data(), third.data(), third.size());
    ctx.set_source(0, a.data(), a.size());
    ctx.set_source(2, b.data(), b.size());
    ctx.set_source(0, a.data(), a.size());  // the same range again: nothing to do
    const uint32_t n = ctx.num_channels();
    auto ok = [&](uint32_t ch, const courier::TransferCmd& cmd, const std::string& what) {
      const courier::PushStatus status = push_and_drain(ctx, ch % n, cmd);
      expect(status == courier::PushStatus::ok,
             fmt::format("{}: DRAIN returned '{}'", what, courier::to_string(status)));
    };
    ok(0, write_cmd(1, window, 0, static_cast<uint32_t>(first.size()), 1, 8), "source 0");
    ok(1, write_cmd(1, window, 100, static_cast<uint32_t>(second.size()), 3, 0), "source 2");
    ctx.set_source(0, c.data(), c.size());  // replaced: its channels are drained
    ok(2, write_cmd(1, window, 200, static_cast<uint32_t>(third.size()), 1, 0),
       "source 0 replaced");
    // (The log names the source: "reads source 1 of this rank, which is
    // not set", "reads [250, +8) of source 2, which has 256 bytes".)
    struct Case {
      const char* what;
      courier::TransferCmd cmd;
    } cases[] = {
        {"a WRITE from source 1, never set", write_cmd(1, window, 300, 8, 2, 0)},
        {"a WRITE reading past the end of source 2", write_cmd(1, window, 300, 8, 3, 250)},
    };
    uint32_t ch = 3;
    for (const Case& k : cases) {
      const courier::PushStatus status = push_and_drain(ctx, ch % n, k.cmd);
      const std::string error = ctx.channel_stats(ch % n).first_error;
      expect(status == courier::PushStatus::channel_failed,
             fmt::format("{}: DRAIN returned '{}'", k.what, courier::to_string(status)));
      expect(error.find("command 0 failed") != std::string::npos,
             fmt::format("{}: first_error is '{}'", k.what, error));
      ++ch;
    }
    bool refused = false;
    try {
      ctx.set_source(3, a.data(), a.size());
    } catch (const courier::Error& e) {
      refused = std::string(e.what()).find("source 3 is outside") != std::string::npos;
    }
    expect(refused, "set_source(3, ...) is refused naming the source");
  }
  ctx.barrier();
  if (ctx.rank() == 1) {
    auto at = [&](size_t offset, size_t bytes) {
      std::string got(bytes, '\0');
      ctx.copy(got.data(), static_cast<char*>(landing.data()) + offset, bytes);
      return got;
    };
    expect(at(0, first.size()) == first, "rank 1 received '" + at(0, first.size()) + "' at 0");
    expect(at(100, second.size()) == second,
           "rank 1 received '" + at(100, second.size()) + "' at 100");
    expect(at(200, third.size()) == third,
           "rank 1 received '" + at(200, third.size()) + "' at 200");
    expect(at(300, 8) == std::string(8, '\0'), "the failed WRITEs landed nothing");
  }
  ctx.barrier();
  fmt::print("rank {}: {} failed checks\n", ctx.rank(), failures);
  return failures == 0 ? 0 : 1;
}

int malformed_atomics() {
  courier::Context ctx;
  // The window sits between two guard zones that must stay untouched too.
  constexpr size_t kGuard = 4096, kWindow = 64;
  courier::DeviceBuffer buffer = ctx.alloc(kGuard + kWindow + kGuard);
  std::memset(buffer.data(), 0, buffer.size());
  auto* window_base = static_cast<std::byte*>(buffer.data()) + kGuard;
  const uint32_t window = ctx.register_window(window_base, kWindow);
  ctx.barrier();
  constexpr uint32_t kAtomics = 3;  // one of each kind of malformation
  if (ctx.rank() == 0) {
    for (uint32_t i = 0; i < kAtomics; ++i) {
      courier::TransferCmd cmd;
      courier::encode_atomic(1, window, 8, courier::AtomicOp::add_u64, 5, &cmd);
      const uint32_t c = i % ctx.num_channels();
      courier::PushStatus status = push_and_drain(ctx, c, cmd);
      expect(
          status == courier::PushStatus::channel_failed,
          fmt::format("malformed atomic {}: DRAIN returned '{}'", i, courier::to_string(status)));
      const std::string error = ctx.channel_stats(c).first_error;
      expect(error.find("failed") != std::string::npos,
             fmt::format("malformed atomic {}: first_error is '{}'", i, error));
    }
  }
  ctx.barrier();
  if (ctx.rank() == 1) {
    const courier::Context::AtomicStats stats = ctx.atomic_stats();
    expect(stats.add_u64 == "imm", "ADD_U64 is carried out by '" + stats.add_u64 + "', not imm");
    expect(stats.atomics_rejected == kAtomics,
           fmt::format("rank 1 rejected {} of {} malformed atomics", stats.atomics_rejected,
                       kAtomics));
    expect(stats.atomics_applied == 0,
           fmt::format("rank 1 applied {} malformed atomics", stats.atomics_applied));
    size_t touched = 0;
    for (size_t i = 0; i < buffer.size(); ++i) {
      if (static_cast<std::byte*>(buffer.data())[i] != std::byte{0}) ++touched;
    }
    expect(touched == 0, fmt::format("{} bytes in or around the window changed", touched));
  }
  ctx.barrier();
  fmt::print("rank {}: {} failed checks\n", ctx.rank(), failures);
  return failures == 0 ? 0 : 1;
}

// Writes 64 bytes of this rank's number to each rank in `to` (offset: this
// rank's slot), then checks that each rank in `from` left its bytes here.
int ring_or_all(bool all) {
  courier::Context ctx;
  const int world = ctx.world_size(), me = ctx.rank();
  constexpr uint32_t kSlot = 64;
  courier::DeviceBuffer buffer = ctx.alloc(size_t{kSlot} * static_cast<size_t>(world) * 2);
  auto* bytes = static_cast<std::byte*>(buffer.data());
  std::memset(bytes, 0, buffer.size());
  // The source: [world * kSlot, +kSlot) holds this rank's pattern.
  std::memset(bytes + size_t{kSlot} * world, me + 1, kSlot);
  const uint32_t window = ctx.register_window(buffer.data(), buffer.size());
  ctx.barrier();
  int failed = 0;
  for (int step = 1; step < world && (all || step == 1); ++step) {
    const int to = (me + step) % world;
    const uint32_t c = static_cast<uint32_t>(to) % ctx.num_channels();
    courier::PushStatus status =
        push_and_drain(ctx, c,
                       write_cmd(static_cast<uint32_t>(to), window, kSlot * me, kSlot, 0,
                                 kSlot * static_cast<uint32_t>(world)));
    if (status != courier::PushStatus::ok) {
      fmt::print(stderr, "rank {}: writing to rank {} failed: {} ({})\n", me, to,
                 courier::to_string(status), ctx.channel_stats(c).first_error);
      ++failed;
      break;
    }
  }
  if (failed != 0) return 1;
  ctx.barrier();
  for (int step = 1; step < world && (all || step == 1); ++step) {
    const int from = (me - step + world) % world;
    size_t wrong = 0;
    for (uint32_t i = 0; i < kSlot; ++i) {
      if (bytes[size_t{kSlot} * from + i] != static_cast<std::byte>(from + 1)) ++wrong;
    }
    expect(wrong == 0, fmt::format("rank {}: {} of rank {}'s bytes wrong", me, wrong, from));
  }
  ctx.barrier();
  ctx.deregister_window(window);
  fmt::print("rank {}: {} writes checked, {} failed checks\n", me, all ? world - 1 : 1, failures);
  return failures == 0 ? 0 : 1;
}

int mismatched_proxies() {
  const char* rank = std::getenv("COURIER_RANK");
  courier::ContextOptions options;
  options.env.push_back({"COURIER_PROXY_THREADS", rank != nullptr && rank[0] == '1' ? "2" : "1"});
  try {
    courier::Context ctx(options);
  } catch (const courier::Error& e) {
    std::string what = e.what();
    fmt::print("rank {}: refused as expected: {}\n", rank != nullptr ? rank : "?", what);
    return what.find("COURIER_PROXY_THREADS") != std::string::npos ? 0 : 1;
  }
  fmt::print(stderr, "FAILED: ranks with different COURIER_PROXY_THREADS were accepted\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "bad-commands") return bad_commands();
    if (scenario == "mismatched-proxies") return mismatched_proxies();
    if (scenario == "malformed-atomics") return malformed_atomics();
    if (scenario == "source-writes") return source_writes();
    if (scenario == "neighbour-writes") return ring_or_all(false);
    if (scenario == "all-writes") return ring_or_all(true);
  } catch (const courier::Error& e) {
    fmt::print(stderr, "context_check: {}\n", e.what());
    return 1;
  }
  fmt::print(stderr,
             "usage: context_check bad-commands|mismatched-proxies|malformed-atomics|"
             "source-writes|neighbour-writes|all-writes\n");
  return 2;
}
