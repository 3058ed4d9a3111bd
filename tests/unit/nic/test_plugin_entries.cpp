// The C entry points every Courier NIC plugin shares (nic/plugin_entries.hpp),
// over a family of test objects that can be told to throw: ep_close refuses an
// endpoint whose regions are still registered, an exception on the control
// path becomes an error code with a reason, and a backend without a device
// report gets no describe entry.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "nic/plugin_entries.hpp"

namespace {

thread_local std::string t_error;

[[gnu::format(printf, 2, 3)]] int set_error(int status, const char* format, ...) {
  char text[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  t_error = text;
  return status;
}

const std::string& last_error() { return t_error; }

// What an endpoint call does instead of its work.
enum class Fault { none, runtime_error, bad_alloc };

void raise(Fault fault, const char* what) {
  if (fault == Fault::runtime_error) throw std::runtime_error(what);
  if (fault == Fault::bad_alloc) throw std::bad_alloc();
}

struct Traits {
  const char* name;
};

class Endpoint;

class MemoryRegion {
 public:
  explicit MemoryRegion(Endpoint* owner) : owner_(owner) {}
  void* owner() const { return owner_; }

 private:
  Endpoint* owner_;
};

class Endpoint {
 public:
  Fault name_fault = Fault::none;
  Fault deregister_fault = Fault::none;

  int name(void* buf, size_t* len) const {
    raise(name_fault, "the name was lost");
    if (!buf || !len || *len < 1) return set_error(-EINVAL, "ep_name: no room");
    *static_cast<char*>(buf) = 'e';
    *len = 1;
    return 0;
  }
  int connect(uint32_t, const void*, size_t) { return 0; }
  int register_memory(void*, size_t, uint32_t, std::unique_ptr<MemoryRegion>* out,
                      courier_nic_rkey_v1*) {
    *out = std::make_unique<MemoryRegion>(this);
    ++registered_;
    return 0;
  }
  int deregister_memory(MemoryRegion* region) {
    raise(deregister_fault, "the region was lost");
    delete region;
    --registered_;
    return 0;
  }
  uint32_t registered_regions() const { return registered_; }
  int post_write(const courier_nic_write_v1&) { return 0; }
  int poll(courier_nic_completion_v1*, uint32_t) { return 0; }
  int post_atomic(const courier_nic_atomic_v1&) { return 0; }

 private:
  uint32_t registered_ = 0;
};

// A backend with nothing to report beyond query().
class Backend {
 public:
  static int create(const Traits&, const courier_host_services_v1*, std::unique_ptr<Backend>* out) {
    *out = std::make_unique<Backend>();
    return 0;
  }
  int query(courier_nic_props_v1*) const { return 0; }
  int open_endpoint(const courier_nic_ep_attr_v1&, std::unique_ptr<Endpoint>* out) const {
    *out = std::make_unique<Endpoint>();
    return 0;
  }
};

// The same with a device report.
class DescribingBackend : public Backend {
 public:
  static int create(const Traits&, const courier_host_services_v1*,
                    std::unique_ptr<DescribingBackend>* out) {
    *out = std::make_unique<DescribingBackend>();
    return 0;
  }
  std::string describe() const { return "device: test\n"; }
};

template <class B>
struct Family {
  using Traits = ::Traits;
  using Backend = B;
  using Endpoint = ::Endpoint;
  using MemoryRegion = ::MemoryRegion;
  static constexpr auto set_error = &::set_error;
  static constexpr auto last_error = &::last_error;
};

const Traits kTraits = {"entries-test"};

const courier_nic_plugin_v1 kPlain = courier::nic::make_plugin_struct<Family<Backend>, kTraits>(
    "test", nullptr, 0, courier::nic::Atomics::offered);
const courier_nic_plugin_v1 kDescribing =
    courier::nic::make_plugin_struct<Family<DescribingBackend>, kTraits>(
        "test", nullptr, 0, courier::nic::Atomics::offered);
const courier_nic_plugin_v1 kNoAtomics = courier::nic::make_plugin_struct<Family<Backend>, kTraits>(
    "test", nullptr, 0, courier::nic::Atomics::none);

// A backend and one endpoint of kPlain.
struct Opened {
  void* backend = nullptr;
  void* ep = nullptr;
  Opened() {
    REQUIRE(kPlain.init(nullptr, &backend) == 0);
    courier_nic_ep_attr_v1 attr{};
    attr.struct_size = sizeof attr;
    REQUIRE(kPlain.ep_open(backend, &attr, &ep) == 0);
  }
  ~Opened() {
    if (ep) kPlain.ep_close(ep);
    kPlain.fini(backend);
  }
  Opened(const Opened&) = delete;
  Opened& operator=(const Opened&) = delete;
  Endpoint& endpoint() const { return *static_cast<Endpoint*>(ep); }
  void* register_region() const {
    void* mr = nullptr;
    courier_nic_rkey_v1 rkey{};
    char byte = 0;
    REQUIRE(kPlain.mr_register(ep, &byte, 1, COURIER_MEM_HOST, &mr, &rkey) == 0);
    return mr;
  }
};

}  // namespace

TEST_CASE("a plugin without atomics has no post_atomic entry; one with them has it") {
  // (As bools: doctest cannot print function pointers.)
  const bool none_has_it = kNoAtomics.post_atomic != nullptr;
  const bool offered_has_it = kPlain.post_atomic != nullptr;
  const bool same_writes = kNoAtomics.post_write == kPlain.post_write;
  CHECK_FALSE(none_has_it);
  CHECK(offered_has_it);
  CHECK(same_writes);
}

TEST_CASE("ep_close refuses an endpoint whose regions are still registered") {
  Opened opened;
  void* first = opened.register_region();
  void* second = opened.register_region();

  CHECK(kPlain.ep_close(opened.ep) == -EBUSY);
  CHECK(last_error() == "ep_close: 2 memory regions are still registered");
  CHECK(kPlain.mr_deregister(first) == 0);
  CHECK(kPlain.ep_close(opened.ep) == -EBUSY);
  CHECK(last_error() == "ep_close: 1 memory regions are still registered");

  CHECK(kPlain.mr_deregister(second) == 0);
  CHECK(kPlain.ep_close(opened.ep) == 0);
  opened.ep = nullptr;
}

TEST_CASE("an exception in ep_name or mr_deregister becomes an error code with a reason") {
  Opened opened;
  char name[8];
  size_t len = sizeof name;
  opened.endpoint().name_fault = Fault::runtime_error;
  CHECK(kPlain.ep_name(opened.ep, name, &len) == -EIO);
  CHECK(last_error() == "ep_name: the name was lost");
  opened.endpoint().name_fault = Fault::bad_alloc;
  CHECK(kPlain.ep_name(opened.ep, name, &len) == -ENOMEM);
  CHECK(last_error() == "ep_name: out of memory");
  opened.endpoint().name_fault = Fault::none;
  CHECK(kPlain.ep_name(opened.ep, name, &len) == 0);
  CHECK(len == 1);

  void* mr = opened.register_region();
  opened.endpoint().deregister_fault = Fault::runtime_error;
  CHECK(kPlain.mr_deregister(mr) == -EIO);
  CHECK(last_error() == "mr_deregister: the region was lost");
  opened.endpoint().deregister_fault = Fault::bad_alloc;
  CHECK(kPlain.mr_deregister(mr) == -ENOMEM);
  CHECK(last_error() == "mr_deregister: out of memory");
  // A failed deregistration leaves the region registered, and the endpoint busy.
  CHECK(opened.endpoint().registered_regions() == 1);
  CHECK(kPlain.ep_close(opened.ep) == -EBUSY);
  opened.endpoint().deregister_fault = Fault::none;
  CHECK(kPlain.mr_deregister(mr) == 0);
}

TEST_CASE("NULL handles are refused with a reason, not dereferenced") {
  size_t len = 8;
  CHECK(kPlain.ep_close(nullptr) == -EINVAL);
  CHECK(last_error() == "ep_close: NULL endpoint");
  CHECK(kPlain.ep_name(nullptr, nullptr, &len) == -EINVAL);
  CHECK(last_error() == "ep_name: NULL endpoint");
  CHECK(kPlain.mr_deregister(nullptr) == -EINVAL);
  CHECK(last_error() == "mr_deregister: NULL region");
}

TEST_CASE("only a backend with a device report gets a describe entry") {
  CHECK_FALSE(static_cast<bool>(kPlain.describe));
  REQUIRE(static_cast<bool>(kDescribing.describe));
  void* backend = nullptr;
  REQUIRE(kDescribing.init(nullptr, &backend) == 0);
  std::vector<char> report(64);
  size_t len = report.size();
  CHECK(kDescribing.describe(backend, report.data(), &len) == 0);
  CHECK(std::string(report.data()) == "device: test\n");
  CHECK(len == sizeof "device: test\n");
  kDescribing.fini(backend);

  // The rest of the table does not depend on it.
  for (const courier_nic_plugin_v1* plugin : {&kPlain, &kDescribing}) {
    CHECK(std::string(plugin->header.name) == "entries-test");
    CHECK(plugin->header.struct_size == sizeof(courier_nic_plugin_v1));
    CHECK(static_cast<bool>(plugin->ep_close));
    CHECK(static_cast<bool>(plugin->post_atomic));
  }
}
