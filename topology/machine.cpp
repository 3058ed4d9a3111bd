#include "topology/machine.hpp"

#include <fmt/format.h>

#include <tuple>

namespace courier::topology {

std::string PciAddress::text() const {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

bool PciAddress::operator<(const PciAddress& o) const {
  return std::tie(domain, bus, device, function) < std::tie(o.domain, o.bus, o.device, o.function);
}

std::string Nic::pci_id() const {
  return pci_vendor == 0 ? "-" : fmt::format("{:04x}:{:04x}", pci_vendor, pci_device);
}

std::string cpu_list_text(const std::vector<int32_t>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

int Machine::distance(int a, int b) const {
  const int n = static_cast<int>(tree.size());
  if (a < 0 || b < 0 || a >= n || b >= n) return -1;
  std::vector<int> up_a;  // a, its parent, ..., the root (a malformed tree stops at n steps)
  for (int x = a; x >= 0 && x < n && static_cast<int>(up_a.size()) <= n; x = tree[x].parent) {
    up_a.push_back(x);
  }
  int hops_b = 0;
  for (int y = b; y >= 0 && y < n && hops_b <= n; y = tree[y].parent, ++hops_b) {
    for (size_t i = 0; i < up_a.size(); ++i) {
      if (up_a[i] == y) return static_cast<int>(i) + hops_b;
    }
  }
  return -1;
}

const NumaNode* Machine::numa_node(int os_index) const {
  for (const NumaNode& n : numa) {
    if (n.os_index == os_index) return &n;
  }
  return nullptr;
}

}  // namespace courier::topology
