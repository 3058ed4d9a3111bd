#include "fake_profile.hpp"

#include <cstdio>
#include <cstdlib>

namespace courier::fake_verbs {
namespace {

Profile connectx7() {
  Profile p;
  p.name = "cx7";
  p.device_stem = "mlx5_";
  p.vendor_id = 0x02c9;
  p.vendor_part_id = 4129;
  p.fw_ver = "28.39.1002";
  p.guid_prefix = 0x0002c90300000000ULL;  // Mellanox OUI 00:02:c9
  p.atomic_cap = IBV_ATOMIC_HCA;
  p.on_demand_paging = false;
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  p.max_qp = 131072;
  p.max_qp_wr = 32768;
  p.max_cqe = 4194303;
  p.max_sge = 30;
  p.max_qp_rd_atom = 16;
  p.max_inline_data = 256;
  p.max_mr_size = UINT64_MAX;
  p.active_speed = 128;  // NDR
  return p;
}

Profile broadcom_thor2() {
  Profile p;
  p.name = "bnxt";
  p.device_stem = "bnxt_re";
  p.vendor_id = 0x14e4;
  p.vendor_part_id = 0x1760;
  p.fw_ver = "229.1.123.0";
  p.guid_prefix = 0x000af70000000000ULL;  // Broadcom OUI 00:0a:f7
  p.atomic_cap = IBV_ATOMIC_HCA;
  p.on_demand_paging = true;
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  p.max_qp = 65536;
  p.max_qp_wr = 8192;
  p.max_cqe = 16777215;
  p.max_sge = 6;
  p.max_qp_rd_atom = 126;
  p.max_inline_data = 96;
  p.max_mr_size = UINT64_MAX;
  p.active_speed = 64;  // HDR-class lane rate (200G)
  return p;
}

}  // namespace

std::optional<Profile> profile_named(std::string_view name) {
  if (name == "cx7") return connectx7();
  if (name == "cx7-ib") {
    Profile p = connectx7();
    p.name = "cx7-ib";
    p.link_layer = IBV_LINK_LAYER_INFINIBAND;
    return p;
  }
  if (name == "cx7-noatomic") {
    Profile p = connectx7();
    p.name = "cx7-noatomic";
    p.atomic_cap = IBV_ATOMIC_NONE;
    return p;
  }
  if (name == "bnxt") return broadcom_thor2();
  if (name == "bnxt-noodp") {
    Profile p = broadcom_thor2();
    p.name = "bnxt-noodp";
    p.on_demand_paging = false;
    return p;
  }
  return std::nullopt;
}

std::vector<Profile> profiles_from_list(std::string_view list) {
  std::vector<Profile> profiles;
  if (list == "none") return profiles;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    if (auto profile = profile_named(item)) {
      profiles.push_back(std::move(*profile));
    } else {
      std::fprintf(stderr,
                   "fake verbs: FAKE_VERBS_DEVICES names unknown profile '%.*s' (known: cx7, "
                   "cx7-ib, cx7-noatomic, bnxt, bnxt-noodp); skipped\n",
                   static_cast<int>(item.size()), item.data());
    }
  }
  return profiles;
}

std::vector<Profile> profiles_from_environment() {
  const char* value = std::getenv("FAKE_VERBS_DEVICES");
  std::vector<Profile> profiles = profiles_from_list(value ? value : "cx7,bnxt");
  // FAKE_VERBS_MAX_QP=N: every device holds at most N queue pairs (of any
  // type) per process, as a small adapter would.
  if (const char* limit = std::getenv("FAKE_VERBS_MAX_QP")) {
    char* end = nullptr;
    const long n = std::strtol(limit, &end, 10);
    if (end == limit || *end != '\0' || n < 1 || n > (1L << 24)) {
      std::fprintf(stderr, "fake verbs: FAKE_VERBS_MAX_QP='%s' is not a number in 1..16777216\n",
                   limit);
    } else {
      for (Profile& p : profiles) p.max_qp = static_cast<int>(n);
    }
  }
  return profiles;
}

}  // namespace courier::fake_verbs
