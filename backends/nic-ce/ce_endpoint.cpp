#include "ce_endpoint.hpp"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "ce_atomic_kernel.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

namespace {

constexpr uint32_t kNameMagic = 0x4E454343;  // "CCEN"
constexpr uint32_t kMaxHostWritesPerPoll = 256;
constexpr uint64_t kMaxHostTargetWrite = 1 << 20;  // host-memory targets go through the inbox
// Copies per batch: enough for a kernel's burst (a block's piece of each
// destination region), few enough to start the first copies early.
constexpr size_t kMaxBatchCopies = 256;
// Batches on a peer's stream before new copies wait: one runs, the next is
// queued behind it, so the copy engine never waits for the proxy.
constexpr uint32_t kMaxLaunchedBatches = 2;
constexpr uint64_t kMaxLingers = 8;  // COURIER_CE_LINGER_US: the longest a copy waits

uint64_t monotonic_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

constexpr uint64_t make_key(uint32_t slot, uint32_t generation) {
  return (uint64_t{generation} << 32) | slot;
}

bool fetching(uint32_t op) {
  return op == COURIER_NIC_ATOMIC_FETCH_ADD_U64 || op == COURIER_NIC_ATOMIC_FETCH_ADD_U32 ||
         op == COURIER_NIC_ATOMIC_CAS_U64 || op == COURIER_NIC_ATOMIC_CAS_U32;
}

// cuMemGetAddressRange through the runtime (nothing links against libcuda).
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
AddressRangeFn address_range_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<AddressRangeFn>(fn);
}

// The CUDA runtime's current device is per thread, and the proxy thread
// that drives an endpoint is not the one that opened it: make sure streams,
// IPC mappings and copies belong to this endpoint's GPU.
thread_local int t_current_device = -1;

int use_device(int device) {
  if (t_current_device == device) return 0;
  cudaError_t rc = cudaSetDevice(device);
  if (rc != cudaSuccess) return set_cuda_error(rc, "cudaSetDevice(" + std::to_string(device) + ")");
  t_current_device = device;
  return 0;
}

}  // namespace

IpcMappings::~IpcMappings() {
  for (auto& [handle, mapping] : mapped_) cudaIpcCloseMemHandle(mapping.base);
}

void IpcMappings::forget_owner(const SegmentLayout* owner) {
  std::lock_guard lock(mutex_);
  for (auto& [handle, mapping] : mapped_) {
    std::erase_if(mapping.users, [&](const User& u) { return u.owner == owner; });
  }
}

void IpcMappings::sweep() {
  std::lock_guard lock(mutex_);
  close_withdrawn();
}

void IpcMappings::close_withdrawn() {
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    auto& users = it->second.users;
    std::erase_if(users, [](const User& u) {
      return u.owner->registrations[u.slot].generation.load(std::memory_order_acquire) !=
             u.generation;
    });
    if (users.empty()) {
      cudaIpcCloseMemHandle(it->second.base);
      it = mapped_.erase(it);
    } else {
      ++it;
    }
  }
}

int IpcMappings::open(int device, const uint8_t (&handle)[64], const SegmentLayout* owner,
                      uint32_t slot, uint32_t generation, std::byte** base, std::string* why) {
  const User user{owner, slot, generation};
  std::string key(reinterpret_cast<const char*>(handle), sizeof handle);
  std::lock_guard lock(mutex_);
  auto it = mapped_.find(key);
  if (it == mapped_.end()) {
    if (use_device(device) != 0) {
      *why = last_error();
      return -EIO;
    }
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle, sizeof h);
    void* mapped = nullptr;
    cudaError_t rc = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
    if (rc != cudaSuccess) {
      *why = std::string("cudaIpcOpenMemHandle of the peer's region: ") + cudaGetErrorString(rc) +
             " (" + cudaGetErrorName(rc) + ")" +
             (rc == cudaErrorAlreadyMapped
                  ? "; a stale mapping of freed memory is still open: the peer's old region "
                    "must be deregistered everywhere before the new one is registered"
                  : "");
      return -EIO;
    }
    it = mapped_.emplace(std::move(key), Mapping{static_cast<std::byte*>(mapped), {}}).first;
  }
  if (std::find(it->second.users.begin(), it->second.users.end(), user) == it->second.users.end()) {
    it->second.users.push_back(user);
  }
  *base = it->second.base;
  return 0;
}

int Endpoint::open(const EndpointOptions& options, std::unique_ptr<Endpoint>* out) {
  std::unique_ptr<Endpoint> ep(new Endpoint(options));
  char name[56];
  std::snprintf(name, sizeof name, "/courier-ce-%d-%p", static_cast<int>(getpid()),
                static_cast<void*>(ep.get()));
  std::string error;
  if (int rc = Segment::create(name, &ep->own_, &error); rc != 0) return set_error(rc, error);
  if (int status = use_device(options.device); status != 0) return status;
  cudaError_t rc = prepare_atomic_kernel();
  if (rc != cudaSuccess) return set_cuda_error(rc, "loading the atomic kernel");
  const uint32_t slots = std::max<uint32_t>(options.tx_depth, 1);
  void* staging = nullptr;
  rc = cudaHostAlloc(&staging, slots * sizeof(uint64_t),
                     cudaHostAllocMapped | cudaHostAllocPortable);
  if (rc != cudaSuccess) return set_cuda_error(rc, "cudaHostAlloc of atomic result slots");
  ep->staging_ = static_cast<uint64_t*>(staging);
  for (uint32_t i = slots; i > 0; --i) ep->free_staging_.push_back(static_cast<int32_t>(i - 1));
  *out = std::move(ep);
  return 0;
}

Endpoint::~Endpoint() {
  if (options_.trace) print_trace();
  use_device(options_.device);
  for (Peer& peer : peers_) {
    if (peer.stream != nullptr) {
      cudaStreamSynchronize(peer.stream);
      cudaStreamDestroy(peer.stream);
    }
    for (Op& op : peer.ops) {
      if (op.event != nullptr) cudaEventDestroy(op.event);
    }
    if (!peer.self && options_.mappings != nullptr) options_.mappings->forget_owner(peer.layout);
  }
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
  if (control_stream_ != nullptr) cudaStreamDestroy(control_stream_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

int Endpoint::name(void* buf, size_t* len) const {
  if (buf == nullptr || len == nullptr) return set_error(-EINVAL, "ep_name: NULL argument");
  if (*len < sizeof(EndpointName)) {
    *len = sizeof(EndpointName);
    return set_error(-ENOSPC, "ep_name: the buffer is smaller than " +
                                  std::to_string(sizeof(EndpointName)) + " bytes");
  }
  EndpointName name{};
  name.magic = kNameMagic;
  name.pid = static_cast<uint32_t>(getpid());
  std::snprintf(name.segment, sizeof name.segment, "%s", own_.name().c_str());
  std::memcpy(buf, &name, sizeof name);
  *len = sizeof name;
  return 0;
}

int Endpoint::connect(uint32_t num_peers, const void* names, size_t stride) {
  if (names == nullptr || num_peers == 0 || stride < sizeof(EndpointName)) {
    return set_error(-EINVAL, "ep_connect: no names, or a stride below the name size");
  }
  if (!peers_.empty()) return set_error(-EALREADY, "ep_connect: already connected");
  std::vector<Peer> peers(num_peers);
  int32_t self = -1;
  for (uint32_t r = 0; r < num_peers; ++r) {
    EndpointName name;
    std::memcpy(&name, static_cast<const std::byte*>(names) + r * stride, sizeof name);
    name.segment[sizeof name.segment - 1] = '\0';
    if (name.magic != kNameMagic) {
      return set_error(-EINVAL, "ep_connect: rank " + std::to_string(r) +
                                    "'s name is not a nic-ce endpoint name");
    }
    if (own_.name() == name.segment) {
      peers[r].self = true;
      peers[r].layout = own_.get();
      self = static_cast<int32_t>(r);
      continue;
    }
    std::string error;
    if (int rc = Segment::open(name.segment, &peers[r].segment, &error); rc != 0) {
      return set_error(rc, "ep_connect: rank " + std::to_string(r) + " (pid " +
                               std::to_string(name.pid) + ") cannot be reached: " + error +
                               "; nic-ce connects only processes of one host");
    }
    peers[r].layout = peers[r].segment.get();
  }
  if (self < 0)
    return set_error(-EINVAL, "ep_connect: this endpoint's own name is not in the table");
  rank_ = self;
  peers_ = std::move(peers);
  return 0;
}

int Endpoint::register_region(void* address, size_t length, uint32_t mem_kind, LocalRegion** mr,
                              courier_nic_rkey_v1* rkey) {
  if (address == nullptr || length == 0 || mr == nullptr || rkey == nullptr) {
    return set_error(-EINVAL, "mr_register: NULL address, zero length or NULL output");
  }
  if (mem_kind != COURIER_MEM_HOST && mem_kind != COURIER_MEM_CUDA) {
    return set_error(-EOPNOTSUPP, "mr_register: memory kind " + std::to_string(mem_kind) +
                                      " is not supported (host and CUDA memory are)");
  }
  if (int rc = use_device(options_.device); rc != 0) return rc;
  // Registration is control path, with no kernel of ours waiting on a
  // transfer: the time to close mappings of regions peers withdrew
  // (closing one synchronizes the device).
  options_.mappings->sweep();
  SegmentLayout& own = *own_.get();
  uint32_t slot = kRegistrationSlots;
  for (uint32_t i = 0; i < kRegistrationSlots; ++i) {
    if (own.registrations[i].generation.load(std::memory_order_relaxed) == 0) {
      slot = i;
      break;
    }
  }
  if (slot == kRegistrationSlots) {
    return set_error(-ENOSPC, "mr_register: all " + std::to_string(kRegistrationSlots) +
                                  " registration slots are in use");
  }
  Registration& reg = own.registrations[slot];
  reg.mem_kind = mem_kind;
  reg.address = reinterpret_cast<uint64_t>(address);
  reg.length = length;
  reg.alloc_base = reg.address;
  std::memset(reg.ipc_handle, 0, sizeof reg.ipc_handle);
  if (mem_kind == COURIER_MEM_CUDA) {
    static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof reg.ipc_handle);
    AddressRangeFn range = address_range_fn();
    CUdeviceptr base = 0;
    size_t bytes = 0;
    if (range == nullptr ||
        range(&base, &bytes, reinterpret_cast<CUdeviceptr>(address)) != CUDA_SUCCESS) {
      return set_error(
          -EINVAL,
          "mr_register: the address is not CUDA device memory (cuMemGetAddressRange refused it)");
    }
    if (reg.address + length > base + bytes) {
      return set_error(-EINVAL, "mr_register: the region runs past the end of its CUDA allocation");
    }
    cudaIpcMemHandle_t handle{};
    cudaError_t rc = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
    if (rc != cudaSuccess) return set_cuda_error(rc, "mr_register: cudaIpcGetMemHandle");
    std::memcpy(reg.ipc_handle, &handle, sizeof handle);
    reg.alloc_base = base;
  }
  generation_ = generation_ == 0xFFFFFFFFu ? 1 : generation_ + 1;
  reg.generation.store(generation_, std::memory_order_release);
  regions_.push_back(std::make_unique<LocalRegion>(
      LocalRegion{this, slot, generation_, mem_kind, static_cast<std::byte*>(address), length}));
  *mr = regions_.back().get();
  rkey->key = make_key(slot, generation_);
  rkey->base = reg.address;
  return 0;
}

int Endpoint::deregister(LocalRegion* mr) {
  auto it = std::find_if(regions_.begin(), regions_.end(),
                         [&](const auto& region) { return region.get() == mr; });
  if (it == regions_.end()) return set_error(-EINVAL, "mr_deregister: unknown region");
  own_.get()->registrations[mr->slot].generation.store(0, std::memory_order_release);
  regions_.erase(it);
  return 0;
}

int Endpoint::read_registration(const Peer& peer, uint64_t key, RemoteRegion* out,
                                std::string* why) const {
  const auto slot = static_cast<uint32_t>(key & 0xFFFFFFFFu);
  const auto generation = static_cast<uint32_t>(key >> 32);
  if (slot >= kRegistrationSlots || generation == 0) {
    *why = "the remote key names no registration";
    return -EINVAL;
  }
  const Registration& reg = peer.layout->registrations[slot];
  if (reg.generation.load(std::memory_order_acquire) != generation) {
    *why = "the remote key is stale or invalid (the region is not registered)";
    return -EINVAL;
  }
  out->slot = slot;
  out->generation = generation;
  out->mem_kind = reg.mem_kind;
  out->address = reg.address;
  out->length = reg.length;
  out->alloc_base = reg.alloc_base;
  std::memcpy(out->ipc_handle, reg.ipc_handle, sizeof out->ipc_handle);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (reg.generation.load(std::memory_order_relaxed) != generation) {
    *why = "the remote region was deregistered meanwhile";
    return -EINVAL;
  }
  return 0;
}

int Endpoint::map_remote(Peer& peer, const RemoteRegion& region, uint64_t offset, std::byte** out,
                         std::string* why) {
  std::byte* base = nullptr;
  if (peer.self) {
    base = reinterpret_cast<std::byte*>(region.alloc_base);
  } else if (int rc = options_.mappings->open(options_.device, region.ipc_handle, peer.layout,
                                              region.slot, region.generation, &base, why);
             rc != 0) {
    return rc;
  }
  *out = base + (region.address - region.alloc_base) + offset;
  return 0;
}

int Endpoint::check_local(const LocalRegion* mr, uint64_t offset, uint64_t length,
                          const char* what) const {
  if (mr == nullptr || mr->owner != this) {
    return set_error(-EINVAL,
                     std::string(what) + ": the local region is not registered on this endpoint");
  }
  if (offset > mr->length || length > mr->length - offset) {
    return set_error(-EINVAL, std::string(what) + ": [" + std::to_string(offset) + ", +" +
                                  std::to_string(length) + ") is outside the local region of " +
                                  std::to_string(mr->length) + " bytes");
  }
  return 0;
}

// A synchronous copy on the endpoint's own non-blocking stream: the legacy
// default stream would wait for every kernel of the context, including a
// producer that waits for this endpoint.
cudaError_t Endpoint::copy_now(void* dst, const void* src, size_t bytes) {
  if (control_stream_ == nullptr) {
    cudaError_t rc = cudaStreamCreateWithFlags(&control_stream_, cudaStreamNonBlocking);
    if (rc != cudaSuccess) return rc;
  }
  cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, control_stream_);
  return rc == cudaSuccess ? cudaStreamSynchronize(control_stream_) : rc;
}

int Endpoint::ensure_stream(Peer& peer) {
  if (peer.stream != nullptr) return 0;
  cudaError_t rc = cudaStreamCreateWithFlags(&peer.stream, cudaStreamNonBlocking);
  return rc == cudaSuccess ? 0 : set_cuda_error(rc, "cudaStreamCreate");
}

void Endpoint::queue_failed(Peer& peer, uint64_t cookie, int status) {
  Op op;
  op.state = State::done;
  op.cookie = cookie;
  op.status = status;
  peer.ops.push_back(op);
  ++in_flight_;
}

namespace {
// COURIER_CE_TRACE: adds the time of the enclosing scope to *sum.
class TraceTimer {
 public:
  TraceTimer(bool on, uint64_t* sum, uint64_t* calls) : sum_(on ? sum : nullptr) {
    if (sum_ == nullptr) return;
    ++*calls;
    start_ = monotonic_ns();
  }
  ~TraceTimer() {
    if (sum_ != nullptr) *sum_ += monotonic_ns() - start_;
  }
  TraceTimer(const TraceTimer&) = delete;
  TraceTimer& operator=(const TraceTimer&) = delete;

 private:
  uint64_t* sum_;
  uint64_t start_ = 0;
};
}  // namespace

int Endpoint::post_write(const courier_nic_write_v1& w) {
  TraceTimer timer(options_.trace, &trace_post_ns_, &trace_posts_);
  if (rank_ < 0) return set_error(-ENOTCONN, "post_write: the endpoint is not connected");
  if (w.peer >= peers_.size()) {
    return set_error(-EINVAL, "post_write: peer " + std::to_string(w.peer) + " is not one of the " +
                                  std::to_string(peers_.size()) + " connected ranks");
  }
  if ((w.flags & ~uint32_t{COURIER_NIC_WRITE_IMM}) != 0) {
    return set_error(-EINVAL, "post_write: unknown flags");
  }
  const auto* mr = static_cast<const LocalRegion*>(w.local_mr);
  if (int rc = check_local(mr, w.local_offset, w.length, "post_write"); rc != 0) return rc;
  if (in_flight_ >= options_.tx_depth) return -EAGAIN;
  if (int rc = use_device(options_.device); rc != 0) return rc;
  Peer& peer = peers_[w.peer];
  RemoteRegion region;
  std::string why;
  if (read_registration(peer, w.remote.key, &region, &why) != 0 ||
      (w.remote_offset > region.length || w.length > region.length - w.remote_offset)) {
    if (why.empty()) {
      why = "[" + std::to_string(w.remote_offset) + ", +" + std::to_string(w.length) +
            ") is outside the remote region of " + std::to_string(region.length) + " bytes";
    }
    set_error(-EINVAL, "write to rank " + std::to_string(w.peer) + ": " + why);
    queue_failed(peer, w.cookie, -EINVAL);
    return 0;
  }
  const bool imm = (w.flags & COURIER_NIC_WRITE_IMM) != 0;
  Message notify;
  notify.kind = MessageKind::imm;
  notify.sender = static_cast<uint32_t>(rank_);
  notify.length = w.length;
  notify.imm = w.imm & 0xFFFFFFFFu;  // 4 bytes of immediate data, as on verbs
  const std::byte* src = mr->address + w.local_offset;

  if (region.mem_kind == COURIER_MEM_CUDA) {
    Op op;
    op.cookie = w.cookie;
    if (w.length > 0) {
      std::byte* dst = nullptr;
      if (map_remote(peer, region, w.remote_offset, &dst, &why) != 0) {
        set_error(-EIO, "write to rank " + std::to_string(w.peer) + ": " + why);
        queue_failed(peer, w.cookie, -EIO);
        return 0;
      }
      op.dst = dst;
      op.src = src;
      op.bytes = w.length;
      op.state = State::deferred;
    } else {
      op.state = imm ? State::message_ready : State::done;
    }
    op.device_source = mr->mem_kind == COURIER_MEM_CUDA;
    op.has_message = imm;
    op.message = notify;
    if (options_.linger_ns != 0 || options_.trace) op.posted_ns = last_post_ns_ = monotonic_ns();
    peer.ops.push_back(op);  // poll() starts it
    ++in_flight_;
    return 0;
  }

  // A host-memory target: the bytes travel through the peer's inbox.
  if (w.length > kMaxHostTargetWrite) {
    set_error(-EMSGSIZE, "write to rank " + std::to_string(w.peer) + ": " +
                             std::to_string(w.length) + " bytes into host memory exceed nic-ce's " +
                             std::to_string(kMaxHostTargetWrite) + "-byte limit for such targets");
    queue_failed(peer, w.cookie, -EMSGSIZE);
    return 0;
  }
  std::vector<std::byte> bytes(w.length);
  if (w.length > 0) {
    if (mr->mem_kind == COURIER_MEM_CUDA) {
      cudaError_t rc = copy_now(bytes.data(), src, w.length);
      if (rc != cudaSuccess) {
        set_cuda_error(rc, "write to rank " + std::to_string(w.peer) + ": reading the source");
        queue_failed(peer, w.cookie, -EIO);
        return 0;
      }
    } else {
      std::memcpy(bytes.data(), src, w.length);
    }
  }
  for (uint64_t done = 0; done < w.length; done += kInlineBytes) {
    Op piece;
    piece.state = State::message_ready;
    piece.report = false;
    piece.has_message = true;
    piece.message.kind = MessageKind::host_write;
    piece.message.sender = static_cast<uint32_t>(rank_);
    piece.message.key = w.remote.key;
    piece.message.offset = w.remote_offset + done;
    piece.message.length = std::min<uint64_t>(kInlineBytes, w.length - done);
    std::memcpy(piece.message.payload, bytes.data() + done, piece.message.length);
    peer.ops.push_back(piece);
  }
  Op last;
  last.cookie = w.cookie;
  if (imm) {
    last.state = State::message_ready;
    last.has_message = true;
    last.message = notify;
  } else if (w.length > 0) {
    peer.ops.back().report = true;  // the last piece completes the write
    peer.ops.back().cookie = w.cookie;
    ++in_flight_;
    return 0;
  } else {
    last.state = State::done;
  }
  peer.ops.push_back(last);
  ++in_flight_;
  return 0;
}

int Endpoint::post_atomic(const courier_nic_atomic_v1& a) {
  if (!options_.atomics) {
    return set_error(-EINVAL,
                     "post_atomic: the endpoint was opened without COURIER_NIC_EP_ATOMICS");
  }
  if (rank_ < 0) return set_error(-ENOTCONN, "post_atomic: the endpoint is not connected");
  const uint32_t width = courier_nic_atomic_width(a.op);
  if (width == 0)
    return set_error(-EOPNOTSUPP,
                     "post_atomic: op " + std::to_string(a.op) + " is not one atomic op");
  if (a.peer >= peers_.size()) {
    return set_error(-EINVAL, "post_atomic: peer " + std::to_string(a.peer) + " is not connected");
  }
  if (a.remote_offset % width != 0) {
    return set_error(-EINVAL, "post_atomic: remote offset " + std::to_string(a.remote_offset) +
                                  " is not aligned to " + std::to_string(width) + " bytes");
  }
  const auto* result = static_cast<const LocalRegion*>(a.result_mr);
  if (fetching(a.op)) {
    if (int rc = check_local(result, a.result_offset, width, "post_atomic result"); rc != 0)
      return rc;
    if (a.result_offset % width != 0)
      return set_error(-EINVAL, "post_atomic: result offset is misaligned");
  }
  if (in_flight_ >= options_.tx_depth || free_staging_.empty()) return -EAGAIN;
  if (int rc = use_device(options_.device); rc != 0) return rc;
  Peer& peer = peers_[a.peer];
  RemoteRegion region;
  std::string why;
  if (read_registration(peer, a.remote.key, &region, &why) != 0 ||
      a.remote_offset > region.length || width > region.length - a.remote_offset) {
    if (why.empty()) why = "the atomic's word is outside the remote region";
    set_error(-EINVAL, std::string(courier_nic_atomic_name(a.op)) + " on rank " +
                           std::to_string(a.peer) + ": " + why);
    queue_failed(peer, a.cookie, -EINVAL);
    return 0;
  }
  if (region.mem_kind != COURIER_MEM_CUDA) {
    set_error(-EOPNOTSUPP, std::string(courier_nic_atomic_name(a.op)) + " on rank " +
                               std::to_string(a.peer) +
                               ": nic-ce carries out atomics on GPU memory only, and the target "
                               "region is host memory");
    queue_failed(peer, a.cookie, -EOPNOTSUPP);
    return 0;
  }
  std::byte* target = nullptr;
  if (map_remote(peer, region, a.remote_offset, &target, &why) != 0) {
    set_error(-EIO, "atomic on rank " + std::to_string(a.peer) + ": " + why);
    queue_failed(peer, a.cookie, -EIO);
    return 0;
  }
  Op op;
  op.cookie = a.cookie;
  op.atomic = true;
  if (options_.trace) op.posted_ns = monotonic_ns();
  op.atomic_op = a.op;
  op.dst = target;
  op.operand = a.operand;
  op.compare = a.compare;
  op.staging = free_staging_.back();
  free_staging_.pop_back();
  if (fetching(a.op)) {
    op.result = result->address + a.result_offset;
    op.result_kind = result->mem_kind;
  }
  peer.ops.push_back(op);
  ++in_flight_;
  return 0;
}

int Endpoint::launch(Peer& peer, Op& op) {
  const uint64_t submit_ns = options_.trace ? monotonic_ns() : 0;
  if (int rc = ensure_stream(peer); rc != 0) return rc;
  cudaError_t rc = cudaSuccess;
  if (op.atomic) {
    rc = launch_atomic(peer.stream, op.atomic_op, op.dst, op.operand, op.compare,
                       staging_ + op.staging);
  } else {
    rc = cudaMemcpyAsync(op.dst, op.src, op.bytes, cudaMemcpyDefault, peer.stream);
  }
  if (rc != cudaSuccess)
    return set_cuda_error(rc, op.atomic ? "launching an atomic" : "cudaMemcpyAsync");
  if (int status = record_event(peer, op); status != 0) return status;
  trace_launch(op, 1, op.atomic ? 0 : 1, op.bytes, op.posted_ns, op.posted_ns, submit_ns);
  return 0;
}

int Endpoint::record_event(Peer& peer, Op& op) {
  cudaError_t rc = cudaSuccess;
  if (free_events_.empty()) {
    cudaEvent_t event = nullptr;
    rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (rc != cudaSuccess) return set_cuda_error(rc, "cudaEventCreate");
    free_events_.push_back(event);
  }
  op.event = free_events_.back();
  free_events_.pop_back();
  rc = cudaEventRecord(op.event, peer.stream);
  if (rc != cudaSuccess) return set_cuda_error(rc, "cudaEventRecord");
  ++peer.launched;
  return 0;
}

void Endpoint::finish_atomic(Op& op) {
  if (op.result != nullptr) {
    const uint64_t old = staging_[op.staging];
    const uint32_t width = courier_nic_atomic_width(op.atomic_op);
    if (op.result_kind == COURIER_MEM_CUDA) {
      cudaError_t rc = copy_now(op.result, &old, width);
      if (rc != cudaSuccess) op.status = set_cuda_error(rc, "storing an atomic's old value");
    } else {
      std::memcpy(op.result, &old, width);  // little-endian: the low bytes
    }
  }
  free_staging_.push_back(op.staging);
  op.staging = -1;
}

void Endpoint::finish_launched(Op& op, int status) {
  if (status != 0) {
    op.status = status;
    op.state = State::done;
    if (op.staging >= 0) {
      free_staging_.push_back(op.staging);
      op.staging = -1;
    }
    return;
  }
  if (op.atomic) finish_atomic(op);
  op.state = op.has_message ? State::message_ready : State::done;
}

void Endpoint::advance(Peer& peer) {
  TraceTimer timer(options_.trace, &trace_advance_ns_, &trace_advances_);
  complete_launched(peer);
  deliver_messages(peer);
  launch_deferred(peer);
}

// The peer's stream runs its operations in launch order: once one has not
// finished, none after it has, and their events need no query (a query
// costs about a microsecond, and a dispatch keeps a thousand in flight).
void Endpoint::complete_launched(Peer& peer) {
  waiting_.clear();
  for (Op& op : peer.ops) {
    if (op.state == State::deferred) break;
    if (op.state != State::running) continue;
    if (op.event == nullptr) {  // completes with its batch's last copy
      waiting_.push_back(&op);
      continue;
    }
    const cudaError_t rc = cudaEventQuery(op.event);
    if (rc == cudaErrorNotReady) break;
    free_events_.push_back(op.event);
    op.event = nullptr;
    --peer.launched;
    trace_complete(op);
    const int status = rc == cudaSuccess
                           ? 0
                           : set_cuda_error(rc, op.atomic          ? "an atomic kernel"
                                                : waiting_.empty() ? "a peer copy"
                                                                   : "a batch of peer copies");
    for (Op* earlier : waiting_) finish_launched(*earlier, status);
    waiting_.clear();
    finish_launched(op, status);
  }
}

void Endpoint::deliver_messages(Peer& peer) {
  bool earlier_landed = true;  // every earlier operation landed (or its message is queued)
  for (Op& op : peer.ops) {
    // Nothing after an operation not yet started can have a message out.
    if (op.state == State::deferred) break;
    if (op.state == State::message_ready && earlier_landed) {
      const int64_t position = enqueue(*peer.layout, op.message);
      if (position >= 0) {
        op.position = position;
        op.state = State::message_sent;
      }
    }
    if (op.state == State::message_sent && peer.layout->consumed.load(std::memory_order_acquire) >
                                               static_cast<uint64_t>(op.position)) {
      op.state = State::done;
    }
    if (op.state != State::done && op.state != State::message_sent) earlier_landed = false;
  }
}

void Endpoint::launch_deferred(Peer& peer) {
  bool message_pending = false;  // an earlier message is not yet delivered
  // Copies queued moments ago wait for the ones that follow them, but for
  // at most kMaxLingers lingers: a steady stream of writes must not hold
  // its first copies back until the transmit queue is full.
  const uint64_t now = options_.linger_ns != 0 ? monotonic_ns() : 0;
  const bool lingering =
      options_.batch_copies && options_.linger_ns != 0 && now - last_post_ns_ < options_.linger_ns;
  for (Op& op : peer.ops) {
    if (op.state != State::deferred) {
      message_pending |= op.state == State::message_ready || op.state == State::message_sent;
      continue;
    }
    if (message_pending) break;  // nothing may overtake an undelivered message
    // Batching: while enough is on the stream, the rest waits and gathers.
    if (options_.batch_copies && batch_.empty() && peer.launched >= kMaxLaunchedBatches) break;
    const bool batchable = options_.batch_copies && !op.atomic && op.device_source;
    if (batchable && lingering && batch_.empty() &&
        now - op.posted_ns < kMaxLingers * options_.linger_ns) {
      break;
    }
    if (!batchable) {
      flush_batch(peer);
      if (int rc = launch(peer, op); rc != 0) {
        finish_launched(op, rc);
      } else {
        op.state = State::running;
      }
      continue;
    }
    batch_.push_back(&op);
    // A write with immediate data needs its own event (its message follows
    // it).
    if (op.has_message || batch_.size() == kMaxBatchCopies) flush_batch(peer);
  }
  flush_batch(peer);
}

bool Endpoint::plan_batch() {
  batch_dst_.clear();
  batch_src_.clear();
  batch_bytes_.clear();
  const size_t n = batch_.size();
  // Copies in one batch run in any order: none may write bytes another
  // reads or writes. Sorted by destination, neighbours must not overlap;
  // and no source range may meet a destination range (a sweep over both
  // sorted lists).
  order_.resize(n);
  for (size_t i = 0; i < n; ++i) order_[i] = i;
  auto dst = [&](size_t i) { return reinterpret_cast<uintptr_t>(batch_[i]->dst); };
  auto src = [&](size_t i) { return reinterpret_cast<uintptr_t>(batch_[i]->src); };
  auto bytes = [&](size_t i) { return uintptr_t{batch_[i]->bytes}; };
  std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return dst(a) < dst(b); });
  for (size_t k = 1; k < n; ++k) {
    if (dst(order_[k]) < dst(order_[k - 1]) + bytes(order_[k - 1])) return false;
  }
  by_source_ = order_;
  std::sort(by_source_.begin(), by_source_.end(),
            [&](size_t a, size_t b) { return src(a) < src(b); });
  for (size_t i = 0, j = 0; i < n && j < n;) {
    const size_t d = order_[i], r = by_source_[j];
    if (dst(d) < src(r) + bytes(r) && src(r) < dst(d) + bytes(d)) return false;
    if (dst(d) + bytes(d) <= src(r) + bytes(r)) {
      ++i;
    } else {
      ++j;
    }
  }
  // One copy per run contiguous at both ends: a kernel's pieces of one
  // region become one copy again, whatever order they were pushed in.
  for (size_t k = 0; k < n; ++k) {
    const Op& op = *batch_[order_[k]];
    if (!batch_dst_.empty() &&
        static_cast<std::byte*>(batch_dst_.back()) + batch_bytes_.back() == op.dst &&
        static_cast<const std::byte*>(batch_src_.back()) + batch_bytes_.back() == op.src) {
      batch_bytes_.back() += op.bytes;
    } else {
      batch_dst_.push_back(op.dst);
      batch_src_.push_back(op.src);
      batch_bytes_.push_back(op.bytes);
    }
  }
  return true;
}

void Endpoint::flush_batch(Peer& peer) {
  if (batch_.empty()) return;
  const uint64_t submit_ns = options_.trace ? monotonic_ns() : 0;
  int status = ensure_stream(peer);
  if (status == 0) {
    const cudaError_t rc = submit_batch(peer);
    if (rc != cudaSuccess) {
      status = set_cuda_error(
          rc, batch_.size() == 1
                  ? "cudaMemcpyAsync"
                  : "submitting a batch of " + std::to_string(batch_.size()) + " peer copies");
    }
  }
  if (status == 0) status = record_event(peer, *batch_.back());
  if (status == 0 && options_.trace) {
    uint64_t bytes = 0, first = UINT64_MAX, last = 0;
    for (const Op* op : batch_) {
      bytes += op->bytes;
      first = std::min(first, op->posted_ns);
      last = std::max(last, op->posted_ns);
    }
    trace_launch(*batch_.back(), static_cast<uint32_t>(batch_.size()),
                 static_cast<uint32_t>(batch_copies_), bytes, first, last, submit_ns);
  }
  for (Op* op : batch_) {
    if (status != 0) {
      finish_launched(*op, status);
    } else {
      op->state = State::running;
    }
  }
  batch_.clear();
}

cudaError_t Endpoint::submit_batch(Peer& peer) {
  batch_copies_ = batch_.size();
  if (batch_.size() == 1 || !plan_batch()) {
    // Ranges that meet (or a single copy): one copy each, in post order.
    for (const Op* op : batch_) {
      cudaError_t rc = cudaMemcpyAsync(op->dst, op->src, op->bytes, cudaMemcpyDefault, peer.stream);
      if (rc != cudaSuccess) return rc;
    }
    return cudaSuccess;
  }
  copies_merged_ += batch_.size() - batch_dst_.size();
  const size_t n = batch_dst_.size();
  batch_copies_ = n;
  if (n > 1 && batch_call_) {
#if CUDART_VERSION >= 12080
    // The sources are read in stream order: a kernel before this copy on
    // the stream may still be writing them (they are not ephemeral).
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attributes.srcLocHint.type = cudaMemLocationTypeDevice;
    attributes.srcLocHint.id = options_.device;
    attributes.dstLocHint.type = cudaMemLocationTypeDevice;
    attributes.dstLocHint.id = options_.device;
    size_t attribute_index = 0;
#if CUDART_VERSION >= 13000
    cudaError_t rc = cudaMemcpyBatchAsync(batch_dst_.data(), batch_src_.data(), batch_bytes_.data(),
                                          n, &attributes, &attribute_index, 1, peer.stream);
#else
    size_t failed_index = 0;
    cudaError_t rc = cudaMemcpyBatchAsync(batch_dst_.data(), const_cast<void**>(batch_src_.data()),
                                          batch_bytes_.data(), n, &attributes, &attribute_index, 1,
                                          &failed_index, peer.stream);
#endif
    if (rc == cudaSuccess) return rc;
    if (rc != cudaErrorNotSupported && rc != cudaErrorInvalidValue) return rc;
    // A driver without the batch call: copy one by one from now on.
    cudaGetLastError();
    batch_call_ = false;
#else
    batch_call_ = false;
#endif
  }
  for (size_t i = 0; i < n; ++i) {
    cudaError_t rc = cudaMemcpyAsync(batch_dst_[i], batch_src_[i], batch_bytes_[i],
                                     cudaMemcpyDefault, peer.stream);
    if (rc != cudaSuccess) return rc;
  }
  return cudaSuccess;
}

namespace {
constexpr size_t kTraceEntries = 256;
}  // namespace

void Endpoint::trace_launch(Op& op, uint32_t writes, uint32_t copies, uint64_t bytes,
                            uint64_t first_posted_ns, uint64_t last_posted_ns, uint64_t submit_ns) {
  if (!options_.trace) return;
  if (trace_.size() < kTraceEntries) trace_.resize(kTraceEntries);
  const uint64_t slot = trace_next_++ % kTraceEntries;
  trace_[slot] = TraceEntry{.launched_ns = monotonic_ns(),
                            .completed_ns = 0,
                            .writes = writes,
                            .copies = copies,
                            .bytes = bytes,
                            .first_posted_ns = first_posted_ns,
                            .last_posted_ns = last_posted_ns,
                            .submit_ns = submit_ns};
  op.trace_slot = static_cast<int64_t>(slot);
  trace_writes_ += writes;
  trace_copies_ += copies;
  ++trace_launches_;
}

void Endpoint::trace_complete(const Op& op) {
  if (!options_.trace || op.trace_slot < 0) return;
  trace_[static_cast<size_t>(op.trace_slot)].completed_ns = monotonic_ns();
}

void Endpoint::print_trace() const {
  std::fprintf(stderr,
               "nic-ce trace: %llu writes in %llu copies, %llu launches (batching %s); the last "
               "launches, us since the first shown: launched, completed (seen by poll), writes, "
               "copies, KiB, first and last write posted, submitting began\n",
               static_cast<unsigned long long>(trace_writes_),
               static_cast<unsigned long long>(trace_copies_),
               static_cast<unsigned long long>(trace_launches_),
               options_.batch_copies ? "on" : "off");
  std::fprintf(
      stderr,
      "  post_write: %llu calls, %.0f ns each; advancing a peer: %llu calls, %.0f ns each\n",
      static_cast<unsigned long long>(trace_posts_),
      trace_posts_ > 0 ? static_cast<double>(trace_post_ns_) / trace_posts_ : 0.0,
      static_cast<unsigned long long>(trace_advances_),
      trace_advances_ > 0 ? static_cast<double>(trace_advance_ns_) / trace_advances_ : 0.0);
  const uint64_t n = std::min<uint64_t>(trace_next_, kTraceEntries);
  const uint64_t first = trace_next_ - n;
  const uint64_t t0 = n > 0 ? trace_[first % kTraceEntries].launched_ns : 0;
  for (uint64_t i = first; i < trace_next_; ++i) {
    const TraceEntry& e = trace_[i % kTraceEntries];
    auto since = [&](uint64_t ns) { return ns != 0 ? (static_cast<double>(ns) - t0) / 1e3 : -1.0; };
    std::fprintf(stderr, "  %10.1f %10.1f %5u %5u %10.1f %10.1f %10.1f %10.1f\n",
                 since(e.launched_ns), since(e.completed_ns), e.writes, e.copies, e.bytes / 1024.0,
                 since(e.first_posted_ns), since(e.last_posted_ns), since(e.submit_ns));
  }
}

void Endpoint::apply_host_write(const Message& m) {
  const auto slot = static_cast<uint32_t>(m.key & 0xFFFFFFFFu);
  const auto generation = static_cast<uint32_t>(m.key >> 32);
  const LocalRegion* region = nullptr;
  for (const auto& r : regions_) {
    if (r->slot == slot && r->generation == generation) region = r.get();
  }
  // The sender checked the key and the bounds against this registration;
  // a message that fails them now (deregistered meanwhile) is dropped.
  if (region == nullptr || region->mem_kind != COURIER_MEM_HOST || m.length > kInlineBytes ||
      m.offset > region->length || m.length > region->length - m.offset) {
    ++dropped_host_writes_;
    return;
  }
  std::memcpy(region->address + m.offset, m.payload, m.length);
}

uint32_t Endpoint::drain_inbox(courier_nic_completion_v1* out, uint32_t max) {
  SegmentLayout& own = *own_.get();
  uint32_t n = 0;
  uint32_t writes = 0;
  Message m;
  while (n < max && writes < kMaxHostWritesPerPoll && dequeue(own, consume_position_, &m)) {
    if (m.kind == MessageKind::host_write) {
      apply_host_write(m);
      ++writes;
    } else {
      courier_nic_completion_v1& c = out[n++];
      c = {};
      c.kind = COURIER_NIC_COMP_RX_IMM;
      c.status = 0;
      c.peer = m.sender;
      c.imm = m.imm;
      c.length = m.length;
    }
    ++consume_position_;
    // After the bytes are in place: the sender's write counts as delivered.
    own.consumed.store(consume_position_, std::memory_order_release);
  }
  return n;
}

int Endpoint::poll(courier_nic_completion_v1* out, uint32_t max) {
  if (out == nullptr && max > 0) return set_error(-EINVAL, "poll: NULL output");
  uint32_t n = 0;
  for (Peer& peer : peers_) {
    if (peer.ops.empty()) continue;
    if (int rc = use_device(options_.device); rc != 0) return rc;
    advance(peer);
    while (n < max && !peer.ops.empty() && peer.ops.front().state == State::done) {
      const Op& op = peer.ops.front();
      if (op.report) {
        courier_nic_completion_v1& c = out[n++];
        c = {};
        c.kind = COURIER_NIC_COMP_TX;
        c.status = op.status;
        c.cookie = op.cookie;
        --in_flight_;
      }
      peer.ops.pop_front();
    }
  }
  if (rank_ >= 0) n += drain_inbox(out + n, max - n);
  return static_cast<int>(n);
}

}  // namespace courier::nic_ce
