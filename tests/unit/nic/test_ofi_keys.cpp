// The memory keys nic/ofi asks providers for (nic/ofi/ofi_mr.hpp): where the
// provider uses them as they are, they start at a random point of its key
// space and stay unique per domain; where it picks its own (FI_MR_PROV_KEY),
// they count from 1. And through a real endpoint over tcp: the keys a
// window gets are not the small numbers a counter from 1 would give.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "nic/ofi/ofi_ep.hpp"
#include "nic/ofi/ofi_error.hpp"
#include "nic/ofi/ofi_info.hpp"
#include "nic/ofi/ofi_mr.hpp"

using courier::ofi::RequestedKeys;

TEST_CASE("requested keys count up from their start, within the provider's key size") {
  RequestedKeys keys(0, 8, 41);
  CHECK(keys.next() == 41);
  CHECK(keys.next() == 42);

  // 2-byte keys: the start is cut to 16 bits, and the count wraps there.
  RequestedKeys small(0, 2, 0xabcdfffe);
  CHECK(small.next() == 0xfffe);
  CHECK(small.next() == 0xffff);
  CHECK(small.next() == 0);

  // fi_mr_key's "no key" value is never asked for.
  RequestedKeys full(0, 8, FI_KEY_NOTAVAIL - 1);
  CHECK(full.next() == FI_KEY_NOTAVAIL - 1);
  CHECK(full.next() == 0);

  // A provider that did not say (0) gets 64-bit keys.
  RequestedKeys unsaid(0, 0, uint64_t{1} << 40);
  CHECK(unsaid.next() == uint64_t{1} << 40);
}

TEST_CASE("under FI_MR_PROV_KEY the provider picks the keys, and requested ones count from 1") {
  RequestedKeys keys(FI_MR_PROV_KEY, 8, 0x1234567890);
  CHECK(keys.next() == 1);
  CHECK(keys.next() == 2);
}

TEST_CASE("two domains start their keys at different random points") {
  // From std::random_device: equal 64-bit starts would be a 2^-64 chance.
  courier::ofi::InfoPtr info(fi_allocinfo());
  REQUIRE(info);
  info->domain_attr->mr_mode = 0;
  info->domain_attr->mr_key_size = 8;
  RequestedKeys first(*info), second(*info);
  CHECK(first.next() != second.next());
}

TEST_CASE("a tcp endpoint's windows get unpredictable, distinct keys") {
  courier::ofi::ProviderProfile profile;
  REQUIRE_MESSAGE(courier::ofi::probe_provider("tcp;ofi_rxm", &profile) == 0,
                  courier::ofi::last_error());
  // tcp takes the requested keys as they are: the case this is about.
  REQUIRE((profile.mr_mode & FI_MR_PROV_KEY) == 0);
  std::unique_ptr<courier::ofi::Endpoint> a, b;
  courier::ofi::EndpointOptions options;
  REQUIRE(courier::ofi::Endpoint::open(profile, options, &a) == 0);
  REQUIRE(courier::ofi::Endpoint::open(profile, options, &b) == 0);

  std::vector<unsigned char> memory(4 * 4096);
  std::set<uint64_t> keys;
  std::vector<std::unique_ptr<courier::ofi::MemoryRegion>> regions;
  for (courier::ofi::Endpoint* ep : {a.get(), b.get()}) {
    for (int i = 0; i < 4; ++i) {
      std::unique_ptr<courier::ofi::MemoryRegion> region;
      courier_nic_rkey_v1 rkey{};
      REQUIRE(ep->register_memory(memory.data() + i * 4096, 4096, COURIER_MEM_HOST, &region,
                                  &rkey) == 0);
      // A counter from 1 would give 1..4 on each endpoint; a random start
      // lands below 2^32 with a 2^-32 chance.
      CHECK(rkey.key > UINT32_MAX);
      keys.insert(rkey.key);
      regions.push_back(std::move(region));
    }
  }
  CHECK(keys.size() == 8);
  for (auto& region : regions) {
    auto* owner = static_cast<courier::ofi::Endpoint*>(region->owner());
    CHECK(owner->deregister_memory(region.release()) == 0);
  }
}
