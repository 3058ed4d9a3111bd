// The only place that includes hwloc (DESIGN: topology/ sees hwloc).
#include <fmt/format.h>
#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <regex>

#include "courier/error.hpp"
#include "topology/discovery.hpp"

namespace courier::topology {

namespace {

constexpr unsigned kNvidia = 0x10de, kAmd = 0x1002, kIntel = 0x8086;

using Topology = std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)>;

std::vector<int32_t> cpus_of(hwloc_const_bitmap_t set) {
  std::vector<int32_t> cpus;
  if (set == nullptr) return cpus;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) cpus.push_back(i);
  return cpus;
}

std::string vendor_name(unsigned vendor) {
  if (vendor == kNvidia) return "nvidia";
  if (vendor == kAmd) return "amd";
  if (vendor == kIntel) return "intel";
  return fmt::format("{:04x}", vendor);
}

// The RDMA device's driver family: its name without the trailing index
// (nic_0 -> nic). rdma-core may rename a device after where it sits
// (rdma_rename: ib, roce, iw or rdma, then p<bus>s<slot>[f<function>],
// o<index> or x<MAC>): such a name says nothing of the driver, so "" (the
// PCI IDs still identify the device).
std::string driver_of(const std::string& name) {
  static const std::regex kRenamed(
      "(ib|roce|iw|rdma)(P[0-9]+)?(p[0-9]+s[0-9]+(f[0-9]+)?|o[0-9]+|x[0-9a-f]{12})");
  if (std::regex_match(name, kRenamed)) return {};
  size_t end = name.size();
  while (end > 0 && std::isdigit(static_cast<unsigned char>(name[end - 1]))) --end;
  while (end > 0 && name[end - 1] == '_') --end;
  return name.substr(0, end);
}

int numa_of(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (anchor == nullptr || anchor->nodeset == nullptr) return -1;
  const int first = hwloc_bitmap_first(anchor->nodeset);
  // Anchored above several nodes (the whole machine): no single local node.
  return hwloc_bitmap_weight(anchor->nodeset) == 1 ? first : -1;
}

class Walker {
 public:
  Walker(hwloc_topology_t topo, Machine& m) : topo_(topo), m_(m) {}

  void walk(hwloc_obj_t obj, int parent) {
    int here = parent;
    if (obj->type == HWLOC_OBJ_MACHINE && parent < 0) {
      here = add(TreeNode::Kind::machine, -1, "Machine", -1);
    } else if (obj->type == HWLOC_OBJ_PACKAGE) {
      here = add(TreeNode::Kind::package, parent, fmt::format("Package {}", obj->os_index),
                 numa_of(topo_, obj));
    } else if (obj->type == HWLOC_OBJ_BRIDGE) {
      const bool host = obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
      std::string label = host ? "Host bridge" : "PCIe switch";
      if (!host) label += " " + pci_text(obj);
      here = add(host ? TreeNode::Kind::host_bridge : TreeNode::Kind::pci_switch, parent, label,
                 numa_of(topo_, obj));
    } else if (obj->type == HWLOC_OBJ_PCI_DEVICE) {
      here = device(obj, parent);
    }
    for (hwloc_obj_t c = obj->first_child; c != nullptr; c = c->next_sibling) walk(c, here);
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) walk(c, here);
  }

 private:
  int add(TreeNode::Kind kind, int parent, std::string label, int numa) {
    m_.tree.push_back({kind, parent, std::move(label), numa});
    return static_cast<int>(m_.tree.size()) - 1;
  }

  static std::string pci_text(hwloc_obj_t obj) {
    if (obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI) {
      return {};
    }
    const auto& p = obj->attr->pcidev;
    return PciAddress{p.domain, p.bus, p.dev, p.func}.text();
  }

  // A PCI device: a GPU (a display, 3D or processing-accelerator controller
  // of a GPU vendor, or one with a compute OS device: CUDA, OpenCL, ...; not
  // a BMC's VGA, which has only a DRM card), an RDMA NIC (one with an
  // OpenFabrics OS device), or something else (kept for distances).
  int device(hwloc_obj_t obj, int parent) {
    const auto& p = obj->attr->pcidev;
    const PciAddress pci{p.domain, p.bus, p.dev, p.func};
    std::string rdma, compute, named;
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
      const std::string name = c->name;
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && rdma.empty()) rdma = name;
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC && compute.empty()) compute = name;
      // The management library's name (nvml0, rsmi0) says more than a DRM
      // render node, which says more than a DRM card.
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU && name.rfind("card", 0) != 0) {
        const bool library = name.rfind("nvml", 0) == 0 || name.rfind("rsmi", 0) == 0;
        if (named.empty() || (library && named.rfind("render", 0) == 0)) named = name;
      }
    }
    const unsigned base_class = p.class_id >> 8;
    const bool gpu_vendor = p.vendor_id == kNvidia || p.vendor_id == kAmd;
    const int numa = numa_of(topo_, obj);
    if (!rdma.empty()) {
      const int node = add(TreeNode::Kind::nic, parent, rdma, numa);
      Nic nic;
      nic.name = rdma;
      nic.driver = driver_of(rdma);
      nic.pci = pci;
      nic.pci_vendor = p.vendor_id;
      nic.pci_device = p.device_id;
      nic.numa = numa;
      nic.node = node;
      m_.nics.push_back(nic);
      return node;
    }
    if ((gpu_vendor && (base_class == 0x03 || base_class == 0x12)) || !compute.empty()) {
      const int node = add(TreeNode::Kind::gpu, parent, pci.text(), numa);
      Gpu g;
      g.name = !compute.empty() ? compute : named;
      g.vendor = vendor_name(p.vendor_id);
      const char* model = hwloc_obj_get_info_by_name(obj, "PCIDevice");
      g.model = model != nullptr ? model : fmt::format("{:04x}:{:04x}", p.vendor_id, p.device_id);
      g.pci = pci;
      g.numa = numa;
      g.node = node;
      m_.gpus.push_back(g);
      return node;
    }
    return add(TreeNode::Kind::other_pci, parent, pci.text(), numa);
  }

  hwloc_topology_t topo_;
  Machine& m_;
};

std::vector<int32_t> affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int32_t> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

// "nic_2" < "nic_10", "rdmap72s0" < "rdmap100s0".
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      const unsigned long na = std::stoul(a.substr(i, ei - i)),
                          nb = std::stoul(b.substr(j, ej - j));
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

bool has_io(hwloc_topology_t topo) {
  return hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PCI_DEVICE) > 0 ||
         hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_OS_DEVICE) > 0;
}

}  // namespace

bool have_hwloc() { return true; }

Machine discover(const std::string& xml_path) {
  const bool recorded = !xml_path.empty();
  const std::string what = recorded ? fmt::format("COURIER_TOPOLOGY_XML={}", xml_path) : "hwloc";
  if (recorded) {
    std::FILE* f = std::fopen(xml_path.c_str(), "r");
    if (f == nullptr) {
      throw Error(fmt::format("{}: cannot read the file: {}", what, std::strerror(errno)));
    }
    std::fclose(f);
  }
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error(what + ": hwloc_topology_init failed");
  Topology topo(raw, hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  // PCI devices from Linux's sysfs, not through libpciaccess ("pci"
  // component): that one keeps global state hwloc never frees, which every
  // process creating a Context would leak (and sanitizers report).
  if (!recorded)
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  const std::string invalid = fmt::format(
      "{}: not a valid hwloc XML topology (hwloc could not load it; record one with `lstopo "
      "--of xml --whole-io FILE`)",
      what);
  if (recorded && hwloc_topology_set_xml(raw, xml_path.c_str()) != 0) throw Error(invalid);
  if (hwloc_topology_load(raw) != 0) {
    throw Error(recorded
                    ? invalid
                    : fmt::format("hwloc could not read this machine: {}", std::strerror(errno)));
  }
  if (recorded && !has_io(raw)) {
    throw Error(
        fmt::format("{}: the file has no I/O objects (no PCI or OS devices), so GPUs and "
                    "NICs cannot be paired; record it with `lstopo --of xml --whole-io "
                    "FILE`",
                    what));
  }
  Machine m;
  m.source = recorded ? fmt::format("XML file {}", xml_path) : "this machine (hwloc)";
  Walker(raw, m).walk(hwloc_get_root_obj(raw), -1);
  const int nodes = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i) {
    hwloc_obj_t n = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    NumaNode node;
    node.os_index = static_cast<int>(n->os_index);
    node.cpus = cpus_of(n->cpuset);
    hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(raw, HWLOC_OBJ_PACKAGE, n);
    node.package = package != nullptr ? static_cast<int>(package->os_index) : -1;
    m.numa.push_back(std::move(node));
  }
  m.allowed_cpus = cpus_of(hwloc_topology_get_allowed_cpuset(raw));
  if (!recorded) {  // also what a launcher's binding allows
    const std::vector<int32_t> mine = affinity();
    std::vector<int32_t> both;
    std::set_intersection(m.allowed_cpus.begin(), m.allowed_cpus.end(), mine.begin(), mine.end(),
                          std::back_inserter(both));
    if (!mine.empty()) m.allowed_cpus = both;
  }
  std::stable_sort(m.gpus.begin(), m.gpus.end(),
                   [](const Gpu& a, const Gpu& b) { return a.pci < b.pci; });
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    if (m.gpus[i].name.empty()) m.gpus[i].name = fmt::format("gpu{}", i);
  }
  // NICs by name, numbers compared as numbers (nic_2 before nic_10).
  std::stable_sort(m.nics.begin(), m.nics.end(),
                   [](const Nic& a, const Nic& b) { return natural_less(a.name, b.name); });
  return m;
}

}  // namespace courier::topology
