#include "topology_view.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "core/config.hpp"
#include "core/topology_choice.hpp"
#include "courier/error.hpp"
#include "graphviz.hpp"
#include "json_writer.hpp"
#include "topology/discovery.hpp"
#include "topology/pairing.hpp"
#include "topology_dot.hpp"

namespace courier::info {

namespace {

using topology::Machine;
using topology::Plan;

std::string cpu_text(const std::vector<int32_t>& cpus) { return topology::cpu_list_text(cpus); }

std::string numa_text(int numa) { return numa < 0 ? "-" : fmt::format("{}", numa); }

std::string render_text(const Machine& m, const Plan& plan, const Config& config) {
  std::string out = fmt::format("Topology of {}\n", m.source);
  out += fmt::format("NIC selection: {}{}\n", topology::to_string(plan.selection),
                     config.nics.empty() ? ""
                                         : fmt::format(" among COURIER_NICS={} (forced)",
                                                       fmt::join(config.nics, ",")));
  out += fmt::format("NIC backend: {} ({})\n", plan.backend.empty() ? "none" : plan.backend,
                     plan.backend_forced ? "forced by COURIER_NIC_BACKEND" : plan.backend_why);
  out += fmt::format("Allowed CPUs: {}\n\n", cpu_text(m.allowed_cpus));
  const char* row = "{:<4} {:<8} {:<13} {:<5} {:<22} {:<9} {:<10} {}\n";
  out += fmt::format(fmt::runtime(row), "GPU", "NAME", "PCI", "NUMA", "NIC(S)", "DISTANCE",
                     "BACKEND", "PROXY CPUS");
  for (const topology::GpuPlan& p : plan.gpus) {
    const topology::Gpu& g = m.gpus[static_cast<size_t>(p.gpu)];
    std::vector<std::string> names, hops;
    for (size_t i = 0; i < p.nics.size(); ++i) {
      names.push_back(m.nics[static_cast<size_t>(p.nics[i])].name);
      hops.push_back(fmt::format("{}", p.distances[i]));
    }
    out += fmt::format(fmt::runtime(row), p.gpu, g.name, g.pci.text(), numa_text(g.numa),
                       names.empty() ? "-" : fmt::format("{}", fmt::join(names, ",")),
                       hops.empty() ? "-" : fmt::format("{}", fmt::join(hops, ",")),
                       p.backend + (p.backend_forced ? "*" : ""),
                       cpu_text(p.proxy_cpus) + (p.cpus_forced ? " (COURIER_PROXY_CPUS)" : ""));
    if (!p.note.empty()) out += fmt::format("     note: {}\n", p.note);
  }
  if (plan.gpus.empty()) out += "(no GPU)\n";
  if (plan.backend_forced) out += "* forced by COURIER_NIC_BACKEND\n";
  out += fmt::format("\nRDMA NICs: {}\n", m.nics.empty() ? "none" : "");
  for (size_t i = 0; i < m.nics.size(); ++i) {
    const topology::Nic& n = m.nics[i];
    const topology::NicBackend& b = plan.nic_backends[i];
    out += fmt::format("  {:<14} {:<12} {:<9} {}  NUMA {}  {} ({})\n", n.name,
                       n.driver.empty() ? "-" : n.driver, n.pci_id(), n.pci.text(),
                       numa_text(n.numa), b.backend.empty() ? "-" : b.backend, b.why);
  }
  for (const std::string& note : plan.notes) out += fmt::format("note: {}\n", note);
  return out;
}

std::string render_json(const Machine& m, const Plan& plan, const Config& config) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.field("source", m.source);
  w.field_bool("hwloc", m.from_hwloc);
  w.field("selection", topology::to_string(plan.selection));
  w.field_list("nics_forced", config.nics);
  w.field("backend", plan.backend);
  w.field("backend_why", plan.backend_why);
  w.field_bool("backend_forced", plan.backend_forced);
  w.field("allowed_cpus", cpu_text(m.allowed_cpus));
  w.key("numa");
  w.begin_array();
  for (const topology::NumaNode& n : m.numa) {
    w.begin_object();
    w.field("node", static_cast<uint64_t>(n.os_index));
    w.field("cpus", cpu_text(n.cpus));
    w.end_object();
  }
  w.end_array();
  w.key("gpus");
  w.begin_array();
  for (const topology::GpuPlan& p : plan.gpus) {
    const topology::Gpu& g = m.gpus[static_cast<size_t>(p.gpu)];
    w.begin_object();
    w.field("index", static_cast<uint64_t>(p.gpu));
    w.field("name", g.name);
    w.field("vendor", g.vendor);
    w.field("pci", g.pci.text());
    w.key("numa");
    if (g.numa < 0) {
      w.null();
    } else {
      w.number(static_cast<uint64_t>(g.numa));
    }
    std::vector<std::string> names;
    for (int n : p.nics) names.push_back(m.nics[static_cast<size_t>(n)].name);
    w.field_list("nics", names);
    w.key("distances");
    w.begin_array();
    for (int d : p.distances) w.number(static_cast<uint64_t>(d < 0 ? 0 : d));
    w.end_array();
    w.field_bool("nics_forced", p.nics_forced);
    w.field("backend", p.backend);
    w.field("backend_why", p.backend_why);
    w.field_bool("backend_forced", p.backend_forced);
    w.key("proxy_cpus");
    w.begin_array();
    for (int32_t c : p.proxy_cpus) w.number(static_cast<uint64_t>(c));
    w.end_array();
    w.field_bool("proxy_cpus_forced", p.cpus_forced);
    w.field_or_null("note", p.note);
    w.end_object();
  }
  w.end_array();
  w.key("rdma_nics");
  w.begin_array();
  for (size_t i = 0; i < m.nics.size(); ++i) {
    const topology::Nic& n = m.nics[i];
    w.begin_object();
    w.field("name", n.name);
    w.field("driver", n.driver);
    w.field("pci_id", n.pci_id());
    w.field("backend", plan.nic_backends[i].backend);
    w.field("backend_why", plan.nic_backends[i].why);
    w.field("pci", n.pci.text());
    w.key("numa");
    if (n.numa < 0) {
      w.null();
    } else {
      w.number(static_cast<uint64_t>(n.numa));
    }
    w.end_object();
  }
  w.end_array();
  w.field_list("notes", plan.notes);
  w.end_object();
  out += "\n";
  return out;
}

void write_file(std::string_view option, const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file) throw Error(fmt::format("{} {}: cannot write the file", option, path));
}

}  // namespace

int run_topology(const TopologyOptions& options) {
  try {
    const Config config = Config::load(process_env(), false);
    const Machine m = topology::discover(config.topology_xml);
    const Plan plan = topology::plan(m, topology_policy(config), nic_backend_claims(config));
    const std::string out =
        options.json ? render_json(m, plan, config) : render_text(m, plan, config);
    // The picture is made before anything is written, so that a missing
    // Graphviz leaves no half of the output behind.
    std::string graph, svg;
    if (!options.dot_path.empty() || !options.svg_path.empty()) graph = render_dot(m, plan);
    if (!options.svg_path.empty()) {
      try {
        svg = render_with_graphviz(graph, "svg");
      } catch (const Error& e) {
        throw Error(fmt::format("--svg {}: {}", options.svg_path, e.what()));
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (!options.dot_path.empty()) write_file("--dot", options.dot_path, graph);
    if (!options.svg_path.empty()) write_file("--svg", options.svg_path, svg);
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "courier-info: %s\n", e.what());
    return 1;
  }
}

}  // namespace courier::info
