// The shared-memory segment each nic-ce endpoint owns: how peers on the same
// host find its registered regions and leave it messages.
//
//   header | registration table | inbox
//
// Registrations (written by the owner, read by peers): where a region lives,
// its length and, for GPU memory, the CUDA IPC handle of its allocation. A
// slot is published seqlock-style: generation 0 = free, the owner writes the
// fields, then the generation (release); a reader checks the generation
// before and after reading. The rkey names (slot, generation), so a stale key
// is refused instead of reaching a reused slot.
//
// Inbox (many writers, one reader: the owner's proxy thread): a bounded ring
// of fixed slots, each with a sequence word (free for position p when
// sequence == p, full when p + 1). Messages carry immediate data after a
// copy landed, and the bytes of writes to host-memory regions, which the
// owner copies into place when it polls. `consumed` tells senders how far
// the owner got, which is when their message counts as delivered.
// docs/nic-ce.md has the full layout.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace courier::nic_ce {

inline constexpr uint32_t kSegmentMagic = 0x31454343;  // "CCE1"
inline constexpr uint32_t kRegistrationSlots = 1024;
inline constexpr uint32_t kInboxSlots = 4096;  // a power of two
inline constexpr uint32_t kInlineBytes = 64;   // payload of one inbox message

struct Registration {
  std::atomic<uint32_t> generation;  // 0: free
  uint32_t mem_kind;                 // COURIER_MEM_HOST or COURIER_MEM_CUDA
  uint64_t address;                  // region start in the owner's address space
  uint64_t length;
  uint64_t alloc_base;  // CUDA: start of the allocation the IPC handle maps
  uint8_t ipc_handle[64];
};

enum class MessageKind : uint32_t {
  imm = 1,         // a write landed: deliver `imm` (length = the write's bytes)
  host_write = 2,  // copy payload[0..length) to offset of registration `key`
};

struct alignas(128) InboxSlot {
  std::atomic<uint64_t> sequence;
  MessageKind kind;
  uint32_t sender;  // rank of the writer
  uint64_t key;     // host_write: the rkey's key (slot | generation << 32)
  uint64_t offset;  // host_write: offset in the region
  uint64_t length;  // host_write: payload bytes; imm: the write's total bytes
  uint64_t imm;
  uint8_t payload[kInlineBytes];
};

struct SegmentLayout {
  uint32_t magic;
  uint32_t owner_pid;
  Registration registrations[kRegistrationSlots];
  alignas(64) std::atomic<uint64_t> enqueue_position;
  alignas(64) std::atomic<uint64_t> consumed;
  InboxSlot inbox[kInboxSlots];
};

// A message to enqueue (what InboxSlot holds, without the sequence word).
struct Message {
  MessageKind kind = MessageKind::imm;
  uint32_t sender = 0;
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t imm = 0;
  uint8_t payload[kInlineBytes] = {};
};

// Enqueues into `segment`'s inbox; returns the message's position, or -1
// when the inbox is full.
int64_t enqueue(SegmentLayout& segment, const Message& message);
// The owner's side: takes the message at `position` if it is there.
bool dequeue(SegmentLayout& segment, uint64_t position, Message* out);

// A mapped segment: created (owner) or opened by name (peer). RAII.
class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Returns 0 or -errno with *error set.
  static int create(const std::string& name, Segment* out, std::string* error);
  static int open(const std::string& name, Segment* out, std::string* error);

  SegmentLayout* get() const { return layout_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  SegmentLayout* layout_ = nullptr;
  bool owner_ = false;
};

}  // namespace courier::nic_ce
