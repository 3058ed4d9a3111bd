// Compiles gpu/fifo_push.hpp for a GPU (nvcc, sm_90): the producer code the
// gpu-host backend runs on CPU threads must build unchanged for CUDA.
#include "gpu/fifo_push.hpp"

__global__ void push_write_and_drain(courier::DeviceChannel ch, int* status) {
  courier::WriteCmdArgs a;
  a.dst_rank = 1;
  a.length = 7168;
  a.flags = courier::kCmdFlagImm;
  courier::TransferCmd cmd;
  if (courier::encode_write(a, &cmd) != courier::CmdStatus::ok) return;
  uint64_t ticket = 0;
  courier::PushStatus s = courier::device::push(ch, cmd, &ticket);
  if (s == courier::PushStatus::ok) s = courier::device::drain(ch);
  status[threadIdx.x] = static_cast<int>(s) + courier::device::is_complete(ch, ticket);
}
