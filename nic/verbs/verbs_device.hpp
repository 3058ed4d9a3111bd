// Finding and opening the RDMA device a verbs backend drives.
//
// A backend serves one family of devices (ConnectX for nic-cx7, Broadcom
// NetXtreme for nic-bnxt), recognised by the vendor ID the device reports.
// Device::open picks the device named by COURIER_IB_DEVICE, or else the first
// device of the family with an active port, and keeps its context and
// protection domain for every endpoint of the backend.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::verbs {

enum class GidType { ib, roce_v1, roce_v2 };
const char* to_string(GidType type);

struct GidEntry {
  uint32_t index = 0;
  ibv_gid gid{};
  GidType type = GidType::ib;
};

struct PortInfo {
  uint8_t number = 0;
  ibv_port_state state = IBV_PORT_NOP;
  uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  uint16_t lid = 0;
  ibv_mtu active_mtu = IBV_MTU_1024;
  std::vector<GidEntry> gids;  // valid entries only
  bool ethernet() const { return link_layer == IBV_LINK_LAYER_ETHERNET; }
};

// What a device says about itself: everything the backends decide on and
// everything a hardware-validation report needs.
struct DeviceInfo {
  std::string name;
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  std::string fw_ver;
  uint64_t node_guid = 0;
  ibv_atomic_cap atomic_cap = IBV_ATOMIC_NONE;
  bool odp = false;          // IBV_ODP_SUPPORT in the general ODP caps
  uint32_t rc_odp_caps = 0;  // IBV_ODP_SUPPORT_* for RC queue pairs
  int max_qp = 0;
  int max_qp_wr = 0;
  int max_cqe = 0;
  int max_sge = 0;
  int max_qp_rd_atom = 0;       // RDMA reads/atomics a QP accepts in flight as target
  int max_qp_init_rd_atom = 0;  // ... and issues in flight as initiator
  uint64_t max_mr_size = 0;
  std::vector<PortInfo> ports;

  // ODP usable for what the backends register: RC writes and atomics.
  bool odp_for_rc() const;
  const PortInfo* first_active_port() const;
};

// Queries attributes, ports and GID tables of an open device.
int query_device(ibv_context* context, DeviceInfo* out);

// A device family a backend serves.
struct DeviceFamily {
  const char* label;                 // "NVIDIA/Mellanox ConnectX", for messages
  std::vector<uint32_t> vendor_ids;  // ibv_device_attr.vendor_id values
};

// Human-readable lines describing a device (courier-info, hardware reports).
std::vector<std::string> describe_device(const DeviceInfo& info, uint8_t selected_port,
                                         int selected_gid);

// Every device of the family this process can open, with its description;
// devices of other families are listed in *others (name and vendor) so a
// rejection can say what was found instead.
int list_family_devices(const DeviceFamily& family, std::vector<DeviceInfo>* mine,
                        std::vector<std::string>* others);

// An open device: context plus protection domain, closed in the destructor.
class Device {
 public:
  // `wanted`: a device name (COURIER_IB_DEVICE), or "" for the first device
  // named in `paired` (COURIER_PAIRED_NICS: comma-separated, from topology)
  // that is of the family and has an active port, else the first such device.
  // Returns -errno and sets last_error with the reason (no device, wrong
  // family, no active port, ...).
  static int open(const DeviceFamily& family, const std::string& wanted, const std::string& paired,
                  std::unique_ptr<Device>* out);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  const DeviceInfo& info() const { return info_; }
  const PortInfo& port() const { return port_; }

 private:
  Device() = default;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  DeviceInfo info_;
  PortInfo port_;
};

}  // namespace courier::verbs
