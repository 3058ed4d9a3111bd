// Multi-rank checks of courier::Context under courier-run, one scenario per
// argument:
//   bad-commands         commands naming a missing rank, an unregistered
//                        window or bytes beyond a window fail on their
//                        channel with a logged reason; the channel and the
//                        proxy keep working afterwards.
//   mismatched-proxies   ranks started with different COURIER_PROXY_THREADS
//                        fail on every rank with a message naming it.
#include <fmt/format.h>

#include <cstdlib>
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

courier::TransferCmd write_cmd(uint32_t rank, uint32_t window, uint32_t offset, uint32_t length) {
  courier::WriteCmdArgs a;
  a.dst_rank = rank;
  a.window = window;
  a.src_offset = 0;
  a.dst_offset = offset;
  a.length = length;
  courier::TransferCmd cmd;
  courier::encode_write(a, &cmd);
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
  } catch (const courier::Error& e) {
    fmt::print(stderr, "context_check: {}\n", e.what());
    return 1;
  }
  fmt::print(stderr, "usage: context_check bad-commands|mismatched-proxies\n");
  return 2;
}
