// The CUDA runtime's current device is per thread, and the proxy thread that
// drives an endpoint is not the one that opened it: every entry that creates
// streams, maps IPC handles or copies first makes the endpoint's GPU current.
#pragma once

namespace courier::nic_ce {

// Makes `device` the calling thread's current device (a no-op when it
// already is). Returns 0 or -errno with last_error() set.
int use_device(int device);

}  // namespace courier::nic_ce
