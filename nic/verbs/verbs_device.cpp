#include "verbs_device.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "verbs_error.hpp"

namespace courier::verbs {
namespace {

// GID tables are short in practice (a few entries per IP address); this
// bounds the probe on devices reporting a large table.
constexpr int kMaxGidsProbed = 256;

// Frees the list from ibv_get_device_list.
struct DeviceList {
  ibv_device** devices = nullptr;
  int count = 0;
  DeviceList() {
    errno = 0;
    devices = ibv_get_device_list(&count);
    if (!devices) count = 0;
  }
  ~DeviceList() {
    if (devices) ibv_free_device_list(devices);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
};

bool gid_is_zero(const ibv_gid& gid) {
  static const ibv_gid zero{};
  return std::memcmp(&gid, &zero, sizeof gid) == 0;
}

std::string gid_text(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

const char* mtu_text(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return "256";
    case IBV_MTU_512:
      return "512";
    case IBV_MTU_1024:
      return "1024";
    case IBV_MTU_2048:
      return "2048";
    case IBV_MTU_4096:
      return "4096";
    default:
      return "?";
  }
}

const char* atomic_text(ibv_atomic_cap cap) {
  switch (cap) {
    case IBV_ATOMIC_HCA:
      return "HCA (atomic among the device's own operations)";
    case IBV_ATOMIC_GLOB:
      return "GLOB (atomic with CPU operations too)";
    default:
      return "none";
  }
}

int query_port(ibv_context* context, uint8_t number, PortInfo* out) {
  ibv_port_attr attr{};
  const int rc = ibv_query_port(context, number, &attr);
  if (rc != 0) {
    return set_error(-(rc > 0 ? rc : EIO), "%s port %u: %s", ibv_get_device_name(context->device),
                     number, describe_verbs_error("ibv_query_port", rc).c_str());
  }
  out->number = number;
  out->state = attr.state;
  out->link_layer = attr.link_layer;
  out->lid = attr.lid;
  out->active_mtu = attr.active_mtu;
  const int table = std::min<int>(attr.gid_tbl_len, kMaxGidsProbed);
  for (int index = 0; index < table; ++index) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(context, number, index, &entry, 0) != 0) continue;  // empty slot
    if (gid_is_zero(entry.gid)) continue;
    GidEntry gid;
    gid.index = static_cast<uint32_t>(index);
    gid.gid = entry.gid;
    gid.type = entry.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::roce_v2
               : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::roce_v1
                                                        : GidType::ib;
    out->gids.push_back(gid);
  }
  return 0;
}

}  // namespace

const char* to_string(GidType type) {
  switch (type) {
    case GidType::roce_v1:
      return "RoCE v1";
    case GidType::roce_v2:
      return "RoCE v2";
    default:
      return "IB";
  }
}

bool DeviceInfo::odp_for_rc() const {
  const uint32_t needed = IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_ATOMIC;
  return odp && (rc_odp_caps & needed) == needed;
}

const PortInfo* DeviceInfo::first_active_port() const {
  for (const PortInfo& port : ports) {
    if (port.state == IBV_PORT_ACTIVE) return &port;
  }
  return nullptr;
}

int query_device(ibv_context* context, DeviceInfo* out) {
  const char* name = ibv_get_device_name(context->device);
  ibv_device_attr_ex attr{};
  const int rc = ibv_query_device_ex(context, nullptr, &attr);
  if (rc != 0) {
    return set_error(-(rc > 0 ? rc : EIO), "%s: %s", name,
                     describe_verbs_error("ibv_query_device_ex", rc).c_str());
  }
  const ibv_device_attr& a = attr.orig_attr;
  out->name = name;
  out->vendor_id = a.vendor_id;
  out->vendor_part_id = a.vendor_part_id;
  out->fw_ver = a.fw_ver;
  out->node_guid = a.node_guid;
  out->atomic_cap = a.atomic_cap;
  out->odp = (attr.odp_caps.general_caps & IBV_ODP_SUPPORT) != 0;
  out->rc_odp_caps = attr.odp_caps.per_transport_caps.rc_odp_caps;
  out->max_qp = a.max_qp;
  out->max_qp_wr = a.max_qp_wr;
  out->max_cqe = a.max_cqe;
  out->max_sge = a.max_sge;
  out->max_qp_rd_atom = a.max_qp_rd_atom;
  out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
  out->max_mr_size = a.max_mr_size;
  out->ports.clear();
  for (uint8_t number = 1; number <= a.phys_port_cnt; ++number) {
    PortInfo port;
    const int prc = query_port(context, number, &port);
    if (prc != 0) return prc;
    out->ports.push_back(std::move(port));
  }
  return 0;
}

std::vector<std::string> describe_device(const DeviceInfo& info, uint8_t selected_port,
                                         int selected_gid) {
  std::vector<std::string> lines;
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: vendor 0x%04x part %u fw %s, atomics %s, ODP %s (rc caps 0x%x), max_qp %d, "
                "max_qp_wr %d, max_cqe %d, max_mr_size %llu",
                info.name.c_str(), info.vendor_id, info.vendor_part_id, info.fw_ver.c_str(),
                atomic_text(info.atomic_cap), info.odp ? "yes" : "no", info.rc_odp_caps,
                info.max_qp, info.max_qp_wr, info.max_cqe,
                static_cast<unsigned long long>(info.max_mr_size));
  lines.emplace_back(line);
  for (const PortInfo& port : info.ports) {
    std::snprintf(line, sizeof line, "  port %u: %s, %s, lid %u, active mtu %s%s", port.number,
                  ibv_port_state_str(port.state),
                  port.ethernet() ? "Ethernet (RoCE)" : "InfiniBand", port.lid,
                  mtu_text(port.active_mtu), port.number == selected_port ? " (selected)" : "");
    lines.emplace_back(line);
    for (const GidEntry& gid : port.gids) {
      const bool chosen =
          port.number == selected_port && static_cast<int>(gid.index) == selected_gid;
      std::snprintf(line, sizeof line, "    gid[%u] %s %s%s", gid.index, gid_text(gid.gid).c_str(),
                    to_string(gid.type), chosen ? " (selected)" : "");
      lines.emplace_back(line);
    }
  }
  return lines;
}

int list_family_devices(const DeviceFamily& family, std::vector<DeviceInfo>* mine,
                        std::vector<std::string>* others) {
  DeviceList list;
  if (list.count == 0) {
    const int code = errno;
    if (code != 0 && code != ENOENT && code != ENODEV) {
      return set_error(-ENODEV, "no RDMA device found (ibv_get_device_list: %s; %s)",
                       std::strerror(code),
                       code == ENOSYS ? "the kernel has no RDMA support loaded"
                                      : "is rdma-core's provider for the NIC installed?");
    }
    return set_error(-ENODEV, "no RDMA device found (ibv_get_device_list lists none)");
  }
  for (int i = 0; i < list.count; ++i) {
    const char* name = ibv_get_device_name(list.devices[i]);
    ibv_context* context = ibv_open_device(list.devices[i]);
    if (!context) {
      others->push_back(std::string(name) + " (cannot be opened: " + std::strerror(errno) + ")");
      continue;
    }
    DeviceInfo info;
    const int rc = query_device(context, &info);
    ibv_close_device(context);
    if (rc != 0) {
      others->push_back(std::string(name) + " (" + last_error() + ")");
      continue;
    }
    const auto& ids = family.vendor_ids;
    if (std::find(ids.begin(), ids.end(), info.vendor_id) != ids.end()) {
      mine->push_back(std::move(info));
    } else {
      char text[160];
      std::snprintf(text, sizeof text, "%s (vendor 0x%04x)", name, info.vendor_id);
      others->push_back(text);
    }
  }
  return 0;
}

int Device::open(const DeviceFamily& family, const std::string& wanted, const std::string& paired,
                 std::unique_ptr<Device>* out) {
  std::vector<DeviceInfo> mine;
  std::vector<std::string> others;
  int rc = list_family_devices(family, &mine, &others);
  if (rc != 0) return rc;
  std::string found;
  for (const std::string& other : others) found += (found.empty() ? "" : ", ") + other;

  const DeviceInfo* chosen = nullptr;
  if (!wanted.empty()) {
    for (const DeviceInfo& info : mine) {
      if (info.name == wanted) chosen = &info;
    }
    if (!chosen) {
      std::string names;
      for (const DeviceInfo& info : mine) names += (names.empty() ? "" : ", ") + info.name;
      return set_error(-ENODEV, "COURIER_IB_DEVICE=%s: no such %s device (%s: %s%s%s)",
                       wanted.c_str(), family.label, family.label,
                       names.empty() ? "none" : names.c_str(),
                       found.empty() ? "" : "; other: ", found.c_str());
    }
    if (!chosen->first_active_port()) {
      return set_error(-ENETDOWN, "COURIER_IB_DEVICE=%s: the device has no active port",
                       wanted.c_str());
    }
  } else {
    // Topology's pairing first (nearest NIC to this rank's GPU), in its order.
    size_t start = 0;
    while (!chosen && start < paired.size()) {
      size_t end = paired.find(',', start);
      if (end == std::string::npos) end = paired.size();
      const std::string name = paired.substr(start, end - start);
      for (const DeviceInfo& info : mine) {
        if (info.name == name && info.first_active_port()) chosen = &info;
      }
      start = end + 1;
    }
    for (const DeviceInfo& info : mine) {
      if (chosen) break;
      if (info.first_active_port()) chosen = &info;
    }
    if (!chosen) {
      if (mine.empty()) {
        return set_error(-ENODEV, "no %s device among the RDMA devices (found: %s)", family.label,
                         found.c_str());
      }
      return set_error(-ENETDOWN, "no %s device with an active port (%zu found, all down)",
                       family.label, mine.size());
    }
  }

  // Open the chosen device again by name: the list probe closed it.
  DeviceList list;
  std::unique_ptr<Device> device(new (std::nothrow) Device);
  if (!device) return set_error(-ENOMEM, "open %s: out of memory", chosen->name.c_str());
  for (int i = 0; i < list.count && !device->context_; ++i) {
    if (chosen->name == ibv_get_device_name(list.devices[i])) {
      device->context_ = ibv_open_device(list.devices[i]);
      if (!device->context_) {
        return set_error(-(errno ? errno : EIO), "%s: ibv_open_device failed: %s",
                         chosen->name.c_str(), std::strerror(errno));
      }
    }
  }
  if (!device->context_) {
    return set_error(-ENODEV, "%s disappeared while Courier was opening it", chosen->name.c_str());
  }
  rc = query_device(device->context_, &device->info_);
  if (rc != 0) return rc;
  const PortInfo* port = device->info_.first_active_port();
  if (!port) return set_error(-ENETDOWN, "%s: no active port", chosen->name.c_str());
  device->port_ = *port;
  device->pd_ = ibv_alloc_pd(device->context_);
  if (!device->pd_) {
    return set_error(-(errno ? errno : ENOMEM), "%s: ibv_alloc_pd failed: %s", chosen->name.c_str(),
                     std::strerror(errno));
  }
  *out = std::move(device);
  return 0;
}

Device::~Device() {
  if (pd_) ibv_dealloc_pd(pd_);
  if (context_) ibv_close_device(context_);
}

}  // namespace courier::verbs
