// Device profiles of the fake verbs device: what each simulated HCA model
// reports and supports, and the FAKE_VERBS_DEVICES list that picks them.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace courier::fake_verbs {

struct Profile {
  std::string name;         // as written in FAKE_VERBS_DEVICES, e.g. "cx7-ib"
  std::string device_stem;  // "mlx5_" or "bnxt_re"; the device name adds an index
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  std::string fw_ver;
  uint64_t guid_prefix = 0;  // the HCA number fills the low 24 bits
  ibv_atomic_cap atomic_cap = IBV_ATOMIC_NONE;
  bool on_demand_paging = false;
  uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
  int max_qp = 0;
  int max_qp_wr = 0;
  int max_cqe = 0;
  int max_sge = 0;
  int max_qp_rd_atom = 0;
  uint32_t max_inline_data = 0;
  uint64_t max_mr_size = 0;
  uint8_t active_speed = 0;  // IB speed code as the port reports it

  bool roce() const { return link_layer == IBV_LINK_LAYER_ETHERNET; }
  // RoCE ports list fe80::/64 and IPv4-mapped GIDs, each as RoCE v1 and v2;
  // InfiniBand ports list one fe80::/64 GID.
  int gid_table_length() const { return roce() ? 256 : 8; }
  int valid_gids() const { return roce() ? 4 : 1; }
};

// The profile called `name`, or nothing if no profile has that name.
std::optional<Profile> profile_named(std::string_view name);

// Parses a FAKE_VERBS_DEVICES value ("cx7,bnxt"; "none" or "" for no
// devices). An unknown name is reported on stderr and skipped.
std::vector<Profile> profiles_from_list(std::string_view list);

// The profiles the environment asks for: FAKE_VERBS_DEVICES, or "cx7,bnxt"
// when it is unset.
std::vector<Profile> profiles_from_environment();

}  // namespace courier::fake_verbs
