// The fake verbs device between processes: a forked child is another host
// with its own HCA; the target's memory changes with no call from it.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "test_support.hpp"

using namespace courier::fake_verbs::testing;

namespace {

constexpr int kTargetAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

struct PeerInfo {
  QpAddress address;
  uint64_t buffer = 0;
  uint32_t rkey = 0;
};

template <class T>
void send_value(int fd, const T& value) {
  REQUIRE(write(fd, &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value)));
}

template <class T>
bool receive_value(int fd, T& value) {
  return read(fd, &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value));
}

// Runs `child` in a forked process (before this process opens any device,
// so it forks with one thread) and `parent` here; the child's exit status
// is its verdict, and its failures are printed on stderr.
void with_child(const std::function<int(int fd)>& child,
                const std::function<void(int fd)>& parent) {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  std::fflush(nullptr);  // or the child flushes the parent's buffered output again
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    int status = 99;
    try {
      status = child(fds[1]);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "child: %s\n", error.what());
    }
    _exit(status);
  }
  close(fds[1]);
  parent(fds[0]);
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

#define CHILD_EXPECT(condition)                                                   \
  do {                                                                            \
    if (!(condition)) {                                                           \
      std::fprintf(stderr, "child: %s:%d: %s\n", __FILE__, __LINE__, #condition); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

}  // namespace

TEST_CASE("across processes: write, write with immediate and fetch-add reach a passive target") {
  with_child(
      [](int fd) {
        OpenDevice device("cx7");
        Endpoint endpoint(device, IBV_QPT_RC);
        Buffer memory(device.pd, 8192, kTargetAccess);
        memory.words()[512] = 100;
        send_value(fd, PeerInfo{endpoint.address(), memory.address(), memory.mr->rkey});
        PeerInfo initiator;
        CHILD_EXPECT(receive_value(fd, initiator));
        endpoint.connect(initiator.address);
        CHILD_EXPECT(post_receive(endpoint.qp, 31) == 0);
        send_value(fd, 'r');  // ready
        const auto wc = poll(endpoint.cq, 1);
        CHILD_EXPECT(wc.size() == 1);
        CHILD_EXPECT(wc[0].status == IBV_WC_SUCCESS);
        CHILD_EXPECT(wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
        CHILD_EXPECT(wc[0].wr_id == 31);
        CHILD_EXPECT(wc[0].imm_data == 0xabcd);
        CHILD_EXPECT(wc[0].src_qp == initiator.address.qpn);
        for (int i = 0; i < 4096; ++i)
          CHILD_EXPECT(memory.data()[i] == static_cast<uint8_t>(i % 251));
        char done = 0;
        CHILD_EXPECT(receive_value(fd, done));  // the parent's atomic completed
        CHILD_EXPECT(memory.words()[512] == 105);
        return 0;
      },
      [](int fd) {
        PeerInfo target;
        REQUIRE(receive_value(fd, target));
        OpenDevice device("cx7");
        Endpoint endpoint(device, IBV_QPT_RC);
        Buffer source(device.pd, 8192, IBV_ACCESS_LOCAL_WRITE);
        for (int i = 0; i < 4096; ++i) source.data()[i] = static_cast<uint8_t>(i % 251);
        endpoint.connect(target.address);
        send_value(fd, PeerInfo{endpoint.address(), 0, 0});
        char ready = 0;
        REQUIRE(receive_value(fd, ready));
        REQUIRE(post_write(endpoint.qp, source, 0, 4096, target.buffer, target.rkey, 1) == 0);
        REQUIRE(post_write(endpoint.qp, source, 0, 0, target.buffer, target.rkey, 2, true,
                           0xabcd) == 0);
        REQUIRE(post_atomic(endpoint.qp, source, IBV_WR_ATOMIC_FETCH_AND_ADD, target.buffer + 4096,
                            target.rkey, 5, 0, 3) == 0);
        const auto wc = poll(endpoint.cq, 3);
        REQUIRE(wc.size() == 3);
        for (uint64_t i = 0; i < 3; ++i) {
          CHECK(wc[i].status == IBV_WC_SUCCESS);
          CHECK(wc[i].wr_id == i + 1);
        }
        CHECK(source.words()[0] == 100);
        send_value(fd, 'd');
      });
}

TEST_CASE("a peer process that died: writes to it end in RETRY_EXC_ERR, never hang") {
  with_child(
      [](int fd) {
        OpenDevice device("cx7");
        Endpoint endpoint(device, IBV_QPT_RC);
        Buffer memory(device.pd, 4096, kTargetAccess);
        send_value(fd, PeerInfo{endpoint.address(), memory.address(), memory.mr->rkey});
        PeerInfo initiator;
        CHILD_EXPECT(receive_value(fd, initiator));
        endpoint.connect(initiator.address);
        send_value(fd, 'r');
        char first_write_done = 0;
        CHILD_EXPECT(receive_value(fd, first_write_done));
        CHILD_EXPECT(memory.words()[0] == 0x600d);
        _exit(0);  // dies with its device open, as a crashed process would
      },
      [](int fd) {
        PeerInfo target;
        REQUIRE(receive_value(fd, target));
        OpenDevice device("cx7");
        Endpoint endpoint(device, IBV_QPT_RC);
        Buffer source(device.pd, 64, IBV_ACCESS_LOCAL_WRITE);
        source.words()[0] = 0x600d;
        endpoint.connect(target.address);
        send_value(fd, PeerInfo{endpoint.address(), 0, 0});
        char ready = 0;
        REQUIRE(receive_value(fd, ready));
        REQUIRE(post_write(endpoint.qp, source, 0, 8, target.buffer, target.rkey, 1) == 0);
        auto wc = poll(endpoint.cq, 1);
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].status == IBV_WC_SUCCESS);
        send_value(fd, 'w');
        char eof = 0;
        CHECK(read(fd, &eof, 1) == 0);  // the child is gone
        REQUIRE(post_write(endpoint.qp, source, 0, 8, target.buffer, target.rkey, 2) == 0);
        wc = poll(endpoint.cq, 1);
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].status == IBV_WC_RETRY_EXC_ERR);
      });
}

TEST_CASE("UD across processes over InfiniBand: GRH-less datagram reports the source LID") {
  with_child(
      [](int fd) {
        OpenDevice device("cx7-ib");
        Endpoint endpoint(device, IBV_QPT_UD);
        endpoint.connect({});
        Buffer receive_buffer(device.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
        CHILD_EXPECT(post_receive(endpoint.qp, 8, &receive_buffer, 0, 4096) == 0);
        send_value(fd, PeerInfo{endpoint.address(), 0, 0});
        uint16_t sender_lid = 0;
        CHILD_EXPECT(receive_value(fd, sender_lid));
        const auto wc = poll(endpoint.cq, 1);
        CHILD_EXPECT(wc.size() == 1);
        CHILD_EXPECT(wc[0].status == IBV_WC_SUCCESS);
        CHILD_EXPECT(wc[0].byte_len == 40 + 5);
        CHILD_EXPECT((wc[0].wc_flags & IBV_WC_GRH) == 0);
        CHILD_EXPECT(wc[0].slid == sender_lid);
        CHILD_EXPECT(std::memcmp(receive_buffer.data() + 40, "hello", 5) == 0);
        return 0;
      },
      [](int fd) {
        PeerInfo target;
        REQUIRE(receive_value(fd, target));
        OpenDevice device("cx7-ib");
        Endpoint endpoint(device, IBV_QPT_UD);
        endpoint.connect({});
        Buffer send_buffer(device.pd, 64, IBV_ACCESS_LOCAL_WRITE);
        std::memcpy(send_buffer.data(), "hello", 5);
        ibv_ah_attr ah_attr{};
        ah_attr.port_num = 1;
        ah_attr.dlid = target.address.lid;
        ibv_ah* ah = ibv_create_ah(device.pd, &ah_attr);
        REQUIRE(ah);
        send_value(fd, device.port.lid);
        ibv_sge sge{send_buffer.address(), 5, send_buffer.mr->lkey};
        ibv_send_wr wr{};
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = target.address.qpn;
        wr.wr.ud.remote_qkey = 0x11111111;
        ibv_send_wr* bad = nullptr;
        REQUIRE(ibv_post_send(endpoint.qp, &wr, &bad) == 0);
        const auto wc = poll(endpoint.cq, 1);
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].status == IBV_WC_SUCCESS);
        // Wait for the child's verdict before the AH goes.
        char eof = 0;
        CHECK(read(fd, &eof, 1) == 0);
        CHECK(ibv_destroy_ah(ah) == 0);
      });
}
