#include "ce_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

namespace courier::nic_ce {

int64_t enqueue(SegmentLayout& segment, const Message& message) {
  uint64_t position = segment.enqueue_position.load(std::memory_order_relaxed);
  for (;;) {
    InboxSlot& slot = segment.inbox[position & (kInboxSlots - 1)];
    const uint64_t sequence = slot.sequence.load(std::memory_order_acquire);
    const auto lag = static_cast<int64_t>(sequence - position);
    if (lag == 0) {
      if (segment.enqueue_position.compare_exchange_weak(position, position + 1,
                                                         std::memory_order_relaxed)) {
        slot.kind = message.kind;
        slot.sender = message.sender;
        slot.key = message.key;
        slot.offset = message.offset;
        slot.length = message.length;
        slot.imm = message.imm;
        std::memcpy(slot.payload, message.payload, sizeof slot.payload);
        slot.sequence.store(position + 1, std::memory_order_release);
        return static_cast<int64_t>(position);
      }
    } else if (lag < 0) {
      return -1;  // the slot still holds the message of the previous lap
    } else {
      position = segment.enqueue_position.load(std::memory_order_relaxed);
    }
  }
}

bool dequeue(SegmentLayout& segment, uint64_t position, Message* out) {
  InboxSlot& slot = segment.inbox[position & (kInboxSlots - 1)];
  if (slot.sequence.load(std::memory_order_acquire) != position + 1) return false;
  out->kind = slot.kind;
  out->sender = slot.sender;
  out->key = slot.key;
  out->offset = slot.offset;
  out->length = slot.length;
  out->imm = slot.imm;
  std::memcpy(out->payload, slot.payload, sizeof out->payload);
  slot.sequence.store(position + kInboxSlots, std::memory_order_release);
  return true;
}

namespace {

int map_segment(const std::string& name, bool create, SegmentLayout** out, std::string* error) {
  const int flags = create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR;
  const int fd = shm_open(name.c_str(), flags, 0600);
  if (fd < 0) {
    const int err = errno;
    *error = "shm_open(" + name + "): " + std::strerror(err);
    return -err;
  }
  if (create && ftruncate(fd, sizeof(SegmentLayout)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    *error = "ftruncate(" + name + "): " + std::strerror(err);
    return -err;
  }
  void* p = mmap(nullptr, sizeof(SegmentLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (create) shm_unlink(name.c_str());
    *error = "mmap(" + name + "): " + std::strerror(err);
    return -err;
  }
  *out = static_cast<SegmentLayout*>(p);
  return 0;
}

}  // namespace

int Segment::create(const std::string& name, Segment* out, std::string* error) {
  SegmentLayout* layout = nullptr;
  if (int rc = map_segment(name, true, &layout, error); rc != 0) return rc;
  // Fresh pages are zero: generations 0 (free), positions 0. Each inbox
  // slot starts free for its first position.
  for (uint32_t i = 0; i < kInboxSlots; ++i) layout->inbox[i].sequence.store(i);
  layout->owner_pid = static_cast<uint32_t>(getpid());
  std::atomic_thread_fence(std::memory_order_release);
  layout->magic = kSegmentMagic;
  *out = Segment();
  out->name_ = name;
  out->layout_ = layout;
  out->owner_ = true;
  return 0;
}

int Segment::open(const std::string& name, Segment* out, std::string* error) {
  SegmentLayout* layout = nullptr;
  if (int rc = map_segment(name, false, &layout, error); rc != 0) return rc;
  if (layout->magic != kSegmentMagic) {
    munmap(layout, sizeof(SegmentLayout));
    *error = name + " is not a nic-ce endpoint segment (wrong magic)";
    return -EPROTO;
  }
  *out = Segment();
  out->name_ = name;
  out->layout_ = layout;
  return 0;
}

Segment::~Segment() {
  if (layout_ != nullptr) munmap(layout_, sizeof(SegmentLayout));
  if (owner_) shm_unlink(name_.c_str());
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (layout_ != nullptr) munmap(layout_, sizeof(SegmentLayout));
    if (owner_) shm_unlink(name_.c_str());
    name_ = std::move(other.name_);
    layout_ = std::exchange(other.layout_, nullptr);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

}  // namespace courier::nic_ce
