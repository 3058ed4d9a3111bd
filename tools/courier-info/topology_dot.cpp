#include "topology_dot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <exception>
#include <limits>
#include <map>
#include <string_view>
#include <vector>

namespace courier::info {

namespace {

using topology::GpuPlan;
using topology::Machine;
using topology::Plan;
using topology::TreeNode;
using Kind = TreeNode::Kind;

// Well separated hues (Tableau 10 without its grey, then darker companions),
// so neighbouring GPUs never look alike; cycled past 12 GPUs.
constexpr std::array<std::string_view, 12> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                       "#9467bd", "#8c564b", "#e377c2", "#17becf",
                                                       "#bcbd22", "#393b79", "#ad494a", "#637939"};
constexpr std::string_view kInk = "#222222";
constexpr std::string_view kMuted = "#6b6b6b";
// DejaVu Sans first: Graphviz measures the labels with it where installed,
// and it is wider than the usual fallbacks, so the text fits either way.
constexpr std::string_view kFont = "DejaVu Sans,Helvetica,Arial,sans-serif";
constexpr int kSmall = 9;  // point size of secondary lines
// The column of devices outside every top-level box: the last one.
constexpr int kLooseColumn = std::numeric_limits<int>::max();

std::string_view colour_of(int gpu) {
  return kPalette[static_cast<size_t>(gpu < 0 ? 0 : gpu) % kPalette.size()];
}

// "#rrggbb" mixed with white: the light fill that goes with a strong border.
std::string tint(std::string_view colour, double white) {
  std::string out = "#";
  for (size_t i = 1; i + 1 < colour.size() && i < 7; i += 2) {
    const int c = std::stoi(std::string(colour.substr(i, 2)), nullptr, 16);
    out += fmt::format("{:02x}", static_cast<int>(c + (255 - c) * white + 0.5));
  }
  return out;
}

// ---- Escaping -------------------------------------------------------------
// Names come from any recorded file. UTF-8 passes through (DOT is UTF-8);
// control characters, which no label needs, become '?'. In labels and
// tooltips Graphviz reads \N, \G, \n ... as escapes (in HTML-like labels
// too), so a backslash is doubled everywhere; and it reads entities (&amp;)
// in quoted strings as well, so '&' is always written as one.

bool control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

// Text inside an HTML-like label (<...>): the markup characters as entities.
std::string html(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        out += control(c) ? '?' : c;
    }
  }
  return out;
}

// A double-quoted DOT string.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '&') {
      out += "&amp;";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += control(c) ? '?' : c;
  }
  return out + "\"";
}

// ---- Text -----------------------------------------------------------------

// CPU ranges, shortened to about `limit` characters (with the count of
// CPUs) so that a scattered list cannot stretch a box across the page.
std::string cpu_text(const std::vector<int32_t>& cpus, size_t limit = 48) {
  const std::string all = topology::cpu_list_text(cpus);
  if (all.size() <= limit) return all;
  const size_t cut = all.rfind(',', limit);
  return fmt::format("{},\u2026 ({} CPUs)", all.substr(0, cut == std::string::npos ? limit : cut),
                     cpus.size());
}

std::string numa_text(int numa) { return numa < 0 ? "?" : fmt::format("{}", numa); }

std::string hops_text(int hops) {
  if (hops < 0) return "? hops";
  return hops == 1 ? "1 hop" : fmt::format("{} hops", hops);
}

// One line of an HTML-like label, already escaped.
std::string bold(std::string_view text) { return fmt::format("<B>{}</B>", html(text)); }
std::string small(std::string_view text, std::string_view colour = kMuted) {
  return fmt::format("<FONT POINT-SIZE=\"{}\" COLOR=\"{}\">{}</FONT>", kSmall, colour, html(text));
}

// A device's label: its lines, centred.
std::string stack(const std::vector<std::string>& lines) {
  return fmt::format("<{}>", fmt::join(lines, "<BR/>"));
}

// A box's title: its lines, left-aligned, with room on the right (a title
// that sets the width of its box would touch the border where the viewer's
// font runs a little wider than the one Graphviz measured).
std::string box_title(const std::vector<std::string>& lines) {
  return fmt::format(
      "<<TABLE BORDER=\"0\" CELLPADDING=\"2\" CELLSPACING=\"0\"><TR><TD ALIGN=\"LEFT\" "
      "BALIGN=\"LEFT\">{}</TD><TD WIDTH=\"10\"></TD></TR></TABLE>>",
      fmt::join(lines, "<BR/>"));
}

// ---- The graph ------------------------------------------------------------

class Graph {
 public:
  Graph(const Machine& m, const Plan& plan) : m_(m), plan_(plan) {
    index_plan();
    index_tree();
  }

  std::string dot() {
    std::string out = "graph courier_topology {\n";
    out += fmt::format(
        "  graph [newrank=true, ordering=out, nodesep=0.3, ranksep=0.3, fontname={0}, "
        "fontsize=11, fontcolor=\"{1}\", tooltip={2}];\n"
        "  node [shape=box, style=\"rounded,filled\", fontname={0}, fontsize=11, "
        "fontcolor=\"{1}\", margin=\"0.14,0.05\", penwidth=2];\n"
        "  edge [fontname={0}, fontsize={3}, penwidth=2.5];\n",
        quoted(kFont), kInk, quoted("Courier topology: " + m_.source), kSmall);
    std::vector<const topology::NumaNode*> loose;  // NUMA nodes no package cluster shows
    for (const topology::NumaNode& n : m_.numa) loose.push_back(&n);
    std::string body;
    if (!m_.tree.empty()) body = cluster_body(0, loose, 4);
    // GPUs and NICs the tree does not place go in the machine cluster.
    column_ = kLooseColumn;
    for (size_t g = 0; g < m_.gpus.size(); ++g) {
      if (!placed_gpu_[g]) body += gpu_node(static_cast<int>(g), 4);
    }
    for (size_t k = 0; k < m_.nics.size(); ++k) {
      if (!placed_nic_[k]) body += nic_node(static_cast<int>(k), 4);
    }
    if (body.empty()) body = placeholder("machine", "no GPU or RDMA NIC found", 4);
    std::vector<std::string> title = {
        fmt::format("<FONT POINT-SIZE=\"13\">{}</FONT>", bold("Courier topology: " + m_.source)),
        small(fmt::format("NIC selection: {}  \u00b7  NIC backend: {}{}  \u00b7  allowed CPUs: {}",
                          topology::to_string(plan_.selection), plan_.backend,
                          plan_.backend_forced ? " (forced by COURIER_NIC_BACKEND)" : "",
                          cpu_text(m_.allowed_cpus, 80)))};
    for (const topology::NumaNode* n : loose) title.push_back(numa_line(*n));
    out += fmt::format(
        "  subgraph cluster_machine {{\n"
        "    graph [label={}, labeljust=l, style=\"rounded,filled\", fillcolor=\"#fbfbfb\", "
        "color=\"#444444\", penwidth=1.5, tooltip=\"Machine\"];\n",
        box_title(title));
    out += body + "  }\n";
    out += arrange();
    out += edges();
    // Last, so that no cluster inherits the legend's placement.
    out += fmt::format("  graph [labelloc=b, labeljust=l, label={}];\n", legend());
    return out + "}\n";
  }

 private:
  // Which GPUs use each NIC, skipping indices out of range.
  void index_plan() {
    users_.assign(m_.nics.size(), {});
    for (const GpuPlan& p : plan_.gpus) {
      if (!valid_gpu(p.gpu)) continue;
      for (int n : p.nics) {
        if (valid_nic(n)) users_[static_cast<size_t>(n)].push_back(p.gpu);
      }
    }
  }

  void index_tree() {
    const int n = static_cast<int>(m_.tree.size());
    children_.assign(m_.tree.size(), {});
    // Node 0 is the root; a node with no (or a bad) parent hangs from it.
    for (int i = 1; i < n; ++i) {
      const int p = m_.tree[static_cast<size_t>(i)].parent;
      children_[static_cast<size_t>(p > 0 && p < n && p != i ? p : 0)].push_back(i);
    }
    placed_gpu_.assign(m_.gpus.size(), false);
    placed_nic_.assign(m_.nics.size(), false);
    for (size_t g = 0; g < m_.gpus.size(); ++g) gpu_at_[m_.gpus[g].node] = static_cast<int>(g);
    for (size_t k = 0; k < m_.nics.size(); ++k) nic_at_[m_.nics[k].node] = static_cast<int>(k);
  }

  bool valid_gpu(int g) const { return g >= 0 && g < static_cast<int>(m_.gpus.size()); }
  bool valid_nic(int n) const { return n >= 0 && n < static_cast<int>(m_.nics.size()); }
  Kind kind(int node) const { return m_.tree[static_cast<size_t>(node)].kind; }

  bool holds_device(int node) const {
    for (int c : children_[static_cast<size_t>(node)]) {
      if (kind(c) == Kind::gpu || kind(c) == Kind::nic || holds_device(c)) return true;
    }
    return false;
  }

  // The nodes shown inside container `node`: packages always, bridges and
  // switches only with a GPU or NIC below. Other PCI devices are left out
  // (what is below them moves up), and so is anything below a GPU or NIC,
  // which is shown beside it instead: devices are leaves.
  void collect(int node, std::vector<int>& out) const {
    for (int c : children_[static_cast<size_t>(node)]) {
      switch (kind(c)) {
        case Kind::gpu:
        case Kind::nic:
          out.push_back(c);
          collect(c, out);
          break;
        case Kind::package:
          out.push_back(c);
          break;
        case Kind::host_bridge:
        case Kind::pci_switch:
          if (holds_device(c)) out.push_back(c);
          break;
        case Kind::machine:
        case Kind::other_pci:
          collect(c, out);
          break;
      }
    }
  }

  // What goes inside the cluster of tree node `node`: its devices and its
  // nested clusters. `loose` loses the NUMA nodes a package cluster shows.
  std::string cluster_body(int node, std::vector<const topology::NumaNode*>& loose, int indent) {
    std::vector<int> inside;
    collect(node, inside);
    std::string out;
    const int outer_box = box_;
    box_ = node;
    for (int c : inside) {
      // Each box at the top (a package) is a column of the picture.
      if (node == 0)
        column_ = bridge(c) || kind(c) == Kind::package ? next_column_++ : kLooseColumn;
      if (auto g = gpu_at_.find(c); kind(c) == Kind::gpu && g != gpu_at_.end()) {
        out += gpu_node(g->second, indent);
      } else if (auto n = nic_at_.find(c); kind(c) == Kind::nic && n != nic_at_.end()) {
        out += nic_node(n->second, indent);
      } else if (kind(c) == Kind::gpu || kind(c) == Kind::nic) {
        out += stray_node(c, indent);
      } else {
        out += cluster(c, loose, indent);
      }
    }
    box_ = outer_box;
    return out;
  }

  std::string cluster(int node, std::vector<const topology::NumaNode*>& loose, int indent) {
    const TreeNode& t = m_.tree[static_cast<size_t>(node)];
    const std::string pad(static_cast<size_t>(indent), ' ');
    std::vector<std::string> lines, tooltip = {label_of(node)};
    std::string style;
    int inner = node;  // the node whose content the cluster shows
    if (t.kind == Kind::package) {
      lines.push_back(bold(label_of(node)));
      for (const topology::NumaNode* n : numa_of_package(t, loose)) lines.push_back(numa_line(*n));
      style = "style=\"rounded,filled\", fillcolor=\"#eef2f7\", color=\"#7a8ca3\", penwidth=1.2";
    } else {
      // A bridge or switch that holds nothing but one more joins it: one
      // box with a line per level, not a nest of boxes with nothing else in
      // them (a root port above a switch's upstream port, for one).
      lines.push_back(html(label_of(node)));
      for (std::vector<int> inside;; inside.clear()) {
        collect(inner, inside);
        if (inside.size() != 1 || !bridge(inside.front())) break;
        inner = inside.front();
        lines.push_back(html("\u203a " + label_of(inner)));
        tooltip.push_back(label_of(inner));
      }
      if (t.kind == Kind::host_bridge) {
        style = "style=\"rounded,filled\", fillcolor=\"#f7f6ee\", color=\"#a39f86\"";
      } else {  // switches: dashed, alternate shades so nested ones stand apart
        style = fmt::format("style=\"rounded,dashed,filled\", fillcolor=\"{}\", color=\"#9a9a9a\"",
                            ++switch_depth_ % 2 == 0 ? "#f4f4f4" : "#ffffff");
      }
    }
    std::string body = cluster_body(inner, loose, indent + 2);
    if (t.kind == Kind::pci_switch) --switch_depth_;
    // Graphviz leaves out an empty cluster: a package without devices
    // shows a line saying so.
    if (body.empty()) body = placeholder(fmt::format("t{}", node), "no GPU or NIC", indent + 2);
    return fmt::format(
        "{0}subgraph cluster_t{1} {{\n"
        "{0}  graph [label={2}, labeljust=l, fontsize={3}, {4}, tooltip={5}];\n"
        "{6}{0}}}\n",
        pad, node, box_title(lines), t.kind == Kind::package ? 11 : 10, style,
        quoted(fmt::format("{}", fmt::join(tooltip, " \u203a "))), body);
  }

  bool bridge(int node) const {
    return kind(node) == Kind::host_bridge || kind(node) == Kind::pci_switch;
  }

  std::string label_of(int node) const {
    const TreeNode& t = m_.tree[static_cast<size_t>(node)];
    return t.label.empty() ? default_label(t.kind) : t.label;
  }

  static std::string default_label(Kind k) {
    switch (k) {
      case Kind::package:
        return "Package";
      case Kind::host_bridge:
        return "Host bridge";
      case Kind::pci_switch:
        return "PCIe switch";
      default:
        return "Machine";
    }
  }

  static std::string numa_line(const topology::NumaNode& n) {
    return small(fmt::format("NUMA {}: CPUs {}", numa_text(n.os_index), cpu_text(n.cpus)));
  }

  // The NUMA nodes of a package: those hwloc says belong to its os index
  // (the number in "Package N"), else the one the package is local to.
  std::vector<const topology::NumaNode*> numa_of_package(
      const TreeNode& t, std::vector<const topology::NumaNode*>& loose) const {
    int os_index = -1;
    if (t.label.rfind("Package ", 0) == 0) {
      try {
        os_index = std::stoi(t.label.substr(8));
      } catch (const std::exception&) {
        os_index = -1;
      }
    }
    std::vector<const topology::NumaNode*> mine;
    for (const topology::NumaNode* n : loose) {
      if (os_index >= 0 && n->package == os_index) mine.push_back(n);
    }
    for (const topology::NumaNode* n : loose) {
      if (mine.empty() && t.numa >= 0 && n->os_index == t.numa) mine.push_back(n);
    }
    std::erase_if(loose, [&](const topology::NumaNode* n) {
      return std::find(mine.begin(), mine.end(), n) != mine.end();
    });
    return mine;
  }

  std::string placeholder(const std::string& id, std::string_view text, int indent) {
    placed_.push_back({-1, -1, "empty_" + id, column_, box_});
    return fmt::format("{}empty_{} [shape=plaintext, style=\"\", label={}, fontcolor=\"{}\"];\n",
                       std::string(static_cast<size_t>(indent), ' '), id, quoted(text), kMuted);
  }

  std::string gpu_node(int g, int indent) {
    placed_gpu_[static_cast<size_t>(g)] = true;
    placed_.push_back({g, -1, fmt::format("gpu{}", g), column_, box_});
    const topology::Gpu& gpu = m_.gpus[static_cast<size_t>(g)];
    const std::string_view colour = colour_of(g);
    return fmt::format(
        "{}gpu{} [label={}, color=\"{}\", fillcolor=\"{}\", tooltip={}];\n",
        std::string(static_cast<size_t>(indent), ' '), g,
        stack({bold(fmt::format("GPU {}", g)), small(gpu.name, kInk), small(gpu.pci.text())}),
        colour, tint(colour, 0.82),
        quoted(fmt::format("GPU {}: {} {} {}, PCI {}, NUMA {}", g, gpu.name, gpu.vendor, gpu.model,
                           gpu.pci.text(), numa_text(gpu.numa))));
  }

  std::string nic_node(int n, int indent) {
    placed_nic_[static_cast<size_t>(n)] = true;
    placed_.push_back({-1, n, fmt::format("nic{}", n), column_, box_});
    const topology::Nic& nic = m_.nics[static_cast<size_t>(n)];
    const std::vector<int>& users = users_[static_cast<size_t>(n)];
    std::vector<std::string> lines = {
        bold(nic.name),
        small(nic.driver.empty() ? fmt::format("backend {}", nic_backend(n))
                                 : fmt::format("{} / {}", nic.driver, nic_backend(n)),
              kInk),
        small(nic.pci.text())};
    std::string look;
    if (users.size() == 1) {
      look = fmt::format("color=\"{}\", fillcolor=\"{}\"", colour_of(users.front()),
                         tint(colour_of(users.front()), 0.82));
    } else if (users.size() > 1) {
      // Shared: one stripe per GPU in its colour (Graphviz stripes only
      // square boxes).
      std::vector<std::string> stripes;
      for (int g : users) stripes.push_back(tint(colour_of(g), 0.6));
      look = fmt::format("style=\"striped\", color=\"#555555\", fillcolor=\"{}\"",
                         fmt::join(stripes, ":"));
      lines.push_back(small(fmt::format("shared by GPU {}", fmt::join(users, ",")), kInk));
    } else {
      look =
          "style=\"rounded,dashed,filled\", color=\"#8a8a8a\", fillcolor=\"#f2f2f2\", penwidth=1";
      if (!m_.gpus.empty()) lines.push_back(small("no GPU uses it"));
    }
    return fmt::format(
        "{}nic{} [label={}, {}, tooltip={}];\n", std::string(static_cast<size_t>(indent), ' '), n,
        stack(lines), look,
        quoted(fmt::format("{}: driver {}, PCI {} ({}), NUMA {}, backend {}; {}", nic.name,
                           nic.driver.empty() ? "unknown" : nic.driver, nic.pci.text(),
                           nic.pci_id(), numa_text(nic.numa), nic_backend(n),
                           users.empty() ? "no GPU uses it"
                                         : fmt::format("used by GPU {}", fmt::join(users, ",")))));
  }

  // The backend this NIC's traffic goes through: that of the GPU(s) using
  // it, else the forced one, else the one claiming it ("-": none does).
  std::string nic_backend(int n) const {
    const std::vector<int>& users = users_[static_cast<size_t>(n)];
    for (const GpuPlan& p : plan_.gpus) {
      if (!users.empty() && p.gpu == users.front()) return p.backend.empty() ? "-" : p.backend;
    }
    if (plan_.backend_forced) return plan_.backend;
    const size_t i = static_cast<size_t>(n);
    return i < plan_.nic_backends.size() && !plan_.nic_backends[i].backend.empty()
               ? plan_.nic_backends[i].backend
               : "-";
  }

  // A GPU or NIC node of the tree that Machine::gpus / nics do not list.
  std::string stray_node(int node, int indent) {
    const TreeNode& t = m_.tree[static_cast<size_t>(node)];
    placed_.push_back({-1, -1, fmt::format("pci{}", node), column_, box_});
    return fmt::format(
        "{}pci{} [label={}, color=\"#8a8a8a\", fillcolor=\"#f2f2f2\", penwidth=1, "
        "fontcolor=\"{}\", tooltip={}];\n",
        std::string(static_cast<size_t>(indent), ' '), node,
        stack(
            {bold(kind(node) == Kind::gpu ? "GPU (unlisted)" : "NIC (unlisted)"), small(t.label)}),
        kMuted, quoted(t.label));
  }

  // Where the devices go, pinned down with rank=same groups and invisible
  // edges rather than left to Graphviz's tie-breaking (which mirrors boxes
  // at will): each box at the top (a package) is a column, left to right;
  // in it, top to bottom in tree order, one row per GPU with the NIC(s) it
  // uses in its own box beside it (the first half of them on its left), and
  // one row per other device.
  std::string arrange() {
    std::map<int, int> box_of_gpu, box_of_nic, host_gpu;  // host_gpu: NIC -> GPU
    for (const Placed& d : placed_) {
      if (d.gpu >= 0) box_of_gpu[d.gpu] = d.box;
      if (d.nic >= 0) box_of_nic[d.nic] = d.box;
    }
    std::map<int, std::vector<int>> nics_beside;  // GPU -> its NICs in its row
    for (const GpuPlan& p : plan_.gpus) {
      for (int n : p.nics) {
        const auto g = box_of_gpu.find(p.gpu), b = box_of_nic.find(n);
        if (g == box_of_gpu.end() || b == box_of_nic.end() || g->second != b->second ||
            host_gpu.count(n) > 0) {
          continue;
        }
        host_gpu[n] = p.gpu;
        nics_beside[p.gpu].push_back(n);
      }
    }
    // A NIC no GPU of its box uses sits at the end of the row of the first
    // GPU there, rather than on a row of its own.
    std::map<int, std::vector<int>> idle_beside;  // GPU -> such NICs
    for (const Placed& d : placed_) {
      if (d.nic < 0 || host_gpu.count(d.nic) > 0) continue;
      for (const Placed& g : placed_) {
        if (g.gpu >= 0 && g.box == d.box) {
          host_gpu[d.nic] = g.gpu;
          idle_beside[g.gpu].push_back(d.nic);
          break;
        }
      }
    }
    std::map<int, std::vector<std::vector<std::string>>> columns;  // loose devices last
    for (const Placed& d : placed_) {
      if (d.nic >= 0 && host_gpu.count(d.nic) > 0) continue;  // in a GPU's row
      std::vector<std::string> row = {d.id};
      if (d.gpu >= 0) {
        const std::vector<int>& paired = nics_beside[d.gpu];
        for (size_t k = 0; k < paired.size(); ++k) {
          const std::string nic = fmt::format("nic{}", paired[k]);
          row.insert(k < paired.size() / 2 ? row.end() - 1 : row.end(), nic);
        }
        for (int n : idle_beside[d.gpu]) row.push_back(fmt::format("nic{}", n));
      }
      columns[d.column].push_back(std::move(row));
    }

    std::string out = "  // Placement: a column per package, a row per GPU and its NIC(s).\n";
    // An invisible node above all whose edges, in order (ordering=out), put
    // the columns side by side.
    out += "  columns [shape=point, style=invis, width=0, height=0];\n";
    for (const auto& [column, rows] : columns) {
      for (size_t r = 0; r < rows.size(); ++r) {
        const std::vector<std::string>& row = rows[r];
        for (size_t i = 0; i < row.size(); ++i) seat_[row[i]] = {column, r, i};
        if (row.size() > 1) out += fmt::format("  {{ rank=same; {}; }}\n", fmt::join(row, "; "));
        // Neighbours that no pair joins are kept in order by an invisible edge.
        for (size_t i = 0; i + 1 < row.size(); ++i) {
          if (!joined(row[i], row[i + 1])) {
            out += fmt::format("  {} -- {} [style=invis];\n", row[i], row[i + 1]);
          }
        }
        if (r > 0) out += fmt::format("  {} -- {} [style=invis];\n", rows[r - 1][0], row[0]);
      }
      out += fmt::format("  columns -- {} [style=invis];\n", rows.front().front());
    }
    return out;
  }

  // Whether a pair of the plan joins nodes `a` and `b` ("gpu0", "nic3").
  bool joined(const std::string& a, const std::string& b) const {
    for (const GpuPlan& p : plan_.gpus) {
      for (int n : p.nics) {
        const std::string gpu = fmt::format("gpu{}", p.gpu), nic = fmt::format("nic{}", n);
        if ((a == gpu && b == nic) || (a == nic && b == gpu)) return true;
      }
    }
    return false;
  }

  // One edge per chosen GPU-NIC pair, in the GPU's colour, with the PCIe
  // distance on it; drawn left to right within a row, and free to run
  // across rows without moving them.
  std::string edges() const {
    std::string out = "  // The pairs Courier chose.\n";
    for (const GpuPlan& p : plan_.gpus) {
      if (!valid_gpu(p.gpu)) continue;
      for (size_t k = 0; k < p.nics.size(); ++k) {
        if (!valid_nic(p.nics[k])) continue;
        const topology::Nic& nic = m_.nics[static_cast<size_t>(p.nics[k])];
        const std::string hops = hops_text(k < p.distances.size() ? p.distances[k] : -1);
        std::string gpu = fmt::format("gpu{}", p.gpu), other = fmt::format("nic{}", p.nics[k]);
        const auto g = seat_.find(gpu), n = seat_.find(other);
        const bool same_row = g != seat_.end() && n != seat_.end() &&
                              g->second.column == n->second.column &&
                              g->second.row == n->second.row;
        if (same_row && n->second.position < g->second.position) std::swap(gpu, other);
        out += fmt::format("  {} -- {} [color=\"{}\", label={}, tooltip={}{}];\n", gpu, other,
                           colour_of(p.gpu), quoted(hops),
                           quoted(fmt::format("GPU {} uses {}: {}", p.gpu, nic.name, hops)),
                           same_row ? "" : ", constraint=false");
      }
    }
    return out;
  }

  // Below the machine: per GPU, a colour swatch and "GPU 0 (0000:18:00.0,
  // NUMA 0) -> mlx5_0 (2 hops), backend cx7, proxy CPUs 0-13", then its
  // note; then the plan's notes.
  std::string legend() const {
    std::vector<std::string> rows;
    const auto row = [&](std::string swatch, std::string text) {
      rows.push_back(fmt::format("<TR><TD>{}</TD><TD ALIGN=\"LEFT\">{}</TD></TR>", swatch, text));
    };
    for (const GpuPlan& p : plan_.gpus) {
      if (!valid_gpu(p.gpu)) continue;
      const topology::Gpu& g = m_.gpus[static_cast<size_t>(p.gpu)];
      std::vector<std::string> nics;
      for (size_t k = 0; k < p.nics.size(); ++k) {
        if (!valid_nic(p.nics[k])) continue;
        nics.push_back(fmt::format("{} ({})", m_.nics[static_cast<size_t>(p.nics[k])].name,
                                   hops_text(k < p.distances.size() ? p.distances[k] : -1)));
      }
      const std::string_view colour = colour_of(p.gpu);
      row(fmt::format("<TABLE BORDER=\"1\" CELLBORDER=\"0\" CELLPADDING=\"0\" COLOR=\"{}\" "
                      "BGCOLOR=\"{}\"><TR><TD WIDTH=\"10\" HEIGHT=\"10\" FIXEDSIZE=\"TRUE\"></TD>"
                      "</TR></TABLE>",
                      colour, tint(colour, 0.5)),
          html(fmt::format("GPU {} ({}, NUMA {}) \u2192 {}{}, backend {}{}, proxy CPUs {}{}", p.gpu,
                           g.pci.text(), numa_text(g.numa),
                           nics.empty() ? "no NIC" : fmt::format("{}", fmt::join(nics, ", ")),
                           p.nics_forced ? " (among COURIER_NICS)" : "", p.backend,
                           p.backend_forced ? " (forced)" : "", cpu_text(p.proxy_cpus, 64),
                           p.cpus_forced ? " (COURIER_PROXY_CPUS)" : "")));
      if (!p.note.empty()) row("", small("note: " + p.note));
    }
    if (m_.gpus.empty()) {
      row("", html(fmt::format("No GPU: nothing to pair; a process without a GPU uses backend {}",
                               plan_.backend)));
    }
    for (const std::string& note : plan_.notes) row("", html("note: " + note));
    const auto others = std::count_if(m_.tree.begin(), m_.tree.end(),
                                      [](const TreeNode& t) { return t.kind == Kind::other_pci; });
    if (others > 0) {
      row("",
          small(fmt::format("{} other PCI device{} not shown", others, others == 1 ? "" : "s")));
    }
    if (rows.empty()) return "\"\"";
    return fmt::format(
        "<<TABLE BORDER=\"0\" CELLSPACING=\"2\" CELLPADDING=\"1\">\n    {}\n  </TABLE>>",
        fmt::join(rows, "\n    "));
  }

  const Machine& m_;
  const Plan& plan_;
  std::vector<std::vector<int>> children_;     // tree node -> its children
  std::map<int, int> gpu_at_, nic_at_;         // tree node -> GPU / NIC index
  std::vector<bool> placed_gpu_, placed_nic_;  // already in the graph
  std::vector<std::vector<int>> users_;        // NIC -> the GPUs using it, in plan order
  int switch_depth_ = 0;                       // PCIe switch clusters open
  // The nodes listed so far, in order, each with its column.
  struct Placed {
    int gpu = -1, nic = -1;
    std::string id;
    int column = kLooseColumn;
    int box = 0;  // the tree node whose cluster holds it (0: the machine)
  };
  std::vector<Placed> placed_;
  int column_ = kLooseColumn, next_column_ = 0, box_ = 0;
  struct Seat {
    int column = 0;
    size_t row = 0, position = 0;
  };
  std::map<std::string, Seat> seat_;  // node -> where arrange() put it
};

}  // namespace

std::string render_dot(const topology::Machine& m, const topology::Plan& plan) {
  return Graph(m, plan).dot();
}

}  // namespace courier::info
