// What Courier knows about a machine's layout (docs/topology.md): NUMA nodes
// and their CPUs, GPUs and RDMA NICs, and the tree that joins them (packages,
// PCIe host bridges and switches), as hwloc reports it live or from a
// recorded XML file. Plain data: only topology/hwloc_discovery.cpp sees hwloc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace courier::topology {

struct PciAddress {
  uint32_t domain = 0, bus = 0, device = 0, function = 0;
  std::string text() const;  // "0000:18:00.0"
  bool operator<(const PciAddress& o) const;
};

// One object of the machine's tree: enough to measure PCIe distance and to
// draw the machine.
struct TreeNode {
  enum class Kind { machine, package, host_bridge, pci_switch, gpu, nic, other_pci };
  Kind kind = Kind::machine;
  int parent = -1;  // index into Machine::tree; -1 for the root
  std::string label;
  int numa = -1;  // NUMA node (os index) a package or device is local to
};

struct Gpu {
  std::string name;    // hwloc's OS device name (cuda0, rsmi0, ...) or "gpu<N>"
  std::string vendor;  // "nvidia", "amd", or the PCI vendor id
  std::string model;   // PCI device name when hwloc knows it
  PciAddress pci;
  int numa = -1;
  int node = -1;  // its TreeNode
};

struct Nic {
  std::string name;  // the RDMA device (OpenFabrics OS device): nic_0, rdmap16s27, ...
  // The name without its index (nic for nic_0); "" when the name says
  // nothing of the driver (rdma-core's names after the PCI path: rdmap16s27).
  std::string driver;
  PciAddress pci;
  uint16_t pci_vendor = 0, pci_device = 0;  // 0 when unknown
  int numa = -1;
  int node = -1;
  std::string pci_id() const;  // "15b3:1021", or "-" when unknown
};

struct NumaNode {
  int os_index = -1;
  int package = -1;           // os index of its package, -1 if unknown
  std::vector<int32_t> cpus;  // every PU of the node, allowed or not
};

// CPUs as ranges: {0, 1, 2, 3, 8} -> "0-3,8"; "-" when empty.
std::string cpu_list_text(const std::vector<int32_t>& cpus);

struct Machine {
  std::string source;  // where this came from, for people: "this machine", "XML file F", ...
  bool from_hwloc = true;
  std::vector<TreeNode> tree;  // tree[0] is the machine
  std::vector<NumaNode> numa;
  std::vector<Gpu> gpus;  // in PCI bus-id order (how CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them)
  std::vector<Nic> nics;  // in name order
  std::vector<int32_t> allowed_cpus;  // the CPUs this process may use

  // Edges between two tree nodes through their lowest common ancestor
  // (PCIe hops when both are devices); -1 when either is unknown.
  int distance(int a, int b) const;
  const NumaNode* numa_node(int os_index) const;
};

}  // namespace courier::topology
