// Per-operation contexts.
//
// libfabric hands back, in each completion, the `context` pointer given when
// the operation was posted. Providers that set FI_CONTEXT or FI_CONTEXT2 in
// fi_info::mode additionally own the memory behind that pointer (one or two
// struct fi_context) until the operation completes. OpContext satisfies both:
// it starts with a struct fi_context2 and carries what Courier needs back
// (the caller's cookie) behind it.
//
// The pool is allocated once when the endpoint opens, sized to the depth the
// caller asked for, so posting and polling never allocate. Running out of
// contexts is the endpoint's natural back-pressure: post_write and
// post_atomic answer -EAGAIN and the caller polls. Writes and atomics share
// one pool, so tx_depth bounds both together.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <vector>

namespace courier::ofi {

struct OpContext {
  enum class Kind : uint32_t { kWrite, kAtomic, kReceive };

  fi_context2 provider;  // must stay first: the provider may write into it
  uint64_t cookie = 0;   // the caller's cookie (writes and atomics)
  uint32_t peer = 0;     // destination rank (writes and atomics), for error messages
  Kind kind = Kind::kWrite;
  bool in_flight = false;       // acquired: owned by the provider until it completes
  bool abandoned = false;       // reported to the caller as timed out; see ofi_cq.cpp
  uint32_t watchdog_scans = 0;  // write-watchdog scans that found it in flight
  uint32_t next_free = 0;       // free-list link while not in use
};

class ContextPool {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  ContextPool() = default;
  ContextPool(uint32_t size, OpContext::Kind kind) : slots_(size) {
    for (uint32_t i = 0; i < size; ++i) {
      slots_[i].kind = kind;
      slots_[i].next_free = i + 1 < size ? i + 1 : kNone;
    }
    free_head_ = size > 0 ? 0 : kNone;
  }

  // A free context, or nullptr when `size` operations are in flight.
  OpContext* acquire() {
    if (free_head_ == kNone) return nullptr;
    OpContext* context = &slots_[free_head_];
    free_head_ = context->next_free;
    context->in_flight = true;
    context->abandoned = false;
    context->watchdog_scans = 0;
    ++in_use_;
    return context;
  }

  void release(OpContext* context) {
    context->in_flight = false;
    context->next_free = free_head_;
    free_head_ = static_cast<uint32_t>(context - slots_.data());
    --in_use_;
  }

  // True when `pointer` is one of this pool's contexts: completions whose
  // context is not ours (or NULL) are recognised without dereferencing them.
  bool owns(const void* pointer) const {
    const auto p = reinterpret_cast<uintptr_t>(pointer);
    const auto first = reinterpret_cast<uintptr_t>(slots_.data());
    const auto end = reinterpret_cast<uintptr_t>(slots_.data() + slots_.size());
    return p >= first && p < end && (p - first) % sizeof(OpContext) == 0;
  }

  OpContext& at(uint32_t index) { return slots_[index]; }
  uint32_t index_of(const OpContext* context) const {
    return static_cast<uint32_t>(context - slots_.data());
  }
  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t in_use() const { return in_use_; }

 private:
  std::vector<OpContext> slots_;
  uint32_t free_head_ = kNone;
  uint32_t in_use_ = 0;
};

}  // namespace courier::ofi
