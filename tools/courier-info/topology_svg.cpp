#include "topology_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace courier::info {

namespace {

using topology::GpuPlan;
using topology::Machine;
using topology::Plan;
using topology::TreeNode;
using Kind = TreeNode::Kind;

// Layout, in px.
constexpr int kMargin = 20;  // around the whole drawing
constexpr int kPad = 10;     // inside a container, around its children
constexpr int kGap = 12;     // between side-by-side children
// Under a row of devices: room for the connectors and their hop labels,
// deeper when some connector leaves its container.
constexpr int kLane = 30, kDeepLane = 52;
constexpr int kNearDip = 22, kFarDip = 44;  // how far below the boxes a curve's controls go
constexpr int kLeafWidth = 130;             // a device box, unless its text needs more
constexpr int kStripe = 5;                  // the colour bar on a NIC shared by several GPUs
constexpr int kSwatch = 12;                 // a legend line's colour square
constexpr int kHeadFont = 15, kTitleFont = 13, kTextFont = 12, kSmallFont = 11;

// Well separated hues (Tableau 10 without its grey, then darker companions),
// so neighbouring GPUs never look alike; cycled past 12 GPUs.
constexpr std::array<std::string_view, 12> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                       "#9467bd", "#8c564b", "#e377c2", "#17becf",
                                                       "#bcbd22", "#393b79", "#ad494a", "#637939"};

constexpr std::string_view kInk = "#222222";
constexpr std::string_view kMuted = "#6b6b6b";
constexpr std::string_view kNeutralFill = "#f2f2f2";
constexpr std::string_view kNeutralStroke = "#8a8a8a";

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

// ---- Text -----------------------------------------------------------------

// The code point of the UTF-8 sequence at s[i] and its length, or -1 when the
// bytes there are not one XML 1.0 may carry (broken or overlong UTF-8,
// surrogates, U+FFFE/U+FFFF): labels can come from any recorded file.
int32_t utf8_char(std::string_view s, size_t i, size_t& len) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = byte(0);
  len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    len = 1;
    return -1;
  }
  int32_t cp = len == 1 ? c : c & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((byte(k) >> 6) != 0x2) {
      len = 1;
      return -1;
    }
    cp = (cp << 6) | (byte(k) & 0x3f);
  }
  constexpr std::array<int32_t, 5> kShortest = {0, 0, 0x80, 0x800, 0x10000};
  const bool bad = cp < kShortest[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ||
                   cp == 0xfffe || cp == 0xffff;
  if (bad) len = 1;
  return bad ? -1 : cp;
}

// Text for element content and attribute values: & < > " ' escaped, and
// whatever XML forbids (control characters, bad UTF-8) shown as '?'.
std::string xml(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const int32_t cp = utf8_char(s, i, len);
    switch (cp) {
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
      case '\'':
        out += "&apos;";
        break;
      default:
        if (cp < 0x20) {
          out += '?';
        } else {
          out.append(s.substr(i, len));
        }
    }
  }
  return out;
}

// A guess of the width the text takes: no font metrics here, so a generous
// average advance (DejaVu Sans, the usual fallback, is among the widest).
int text_width(std::string_view s, int font, bool bold) {
  size_t chars = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++chars) utf8_char(s, i, len);
  return static_cast<int>(static_cast<double>(chars) * font * (bold ? 0.67 : 0.61) + 0.99);
}

// 0,1,2,3,8 -> "0-3,8"; cut after about `limit` characters (with the count
// of CPUs) so that a scattered list cannot stretch a box across the page.
// CPU ranges, shortened to about `limit` characters for a drawing.
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

// One line of text in a box, the legend or the header.
struct Line {
  std::string text;
  int font = kSmallFont;
  bool bold = false;
  std::string_view colour = kInk;
};

int advance(const Line& line) { return line.font + 4; }

int stack_height(const std::vector<Line>& lines) {
  int h = 0;
  for (const Line& l : lines) h += advance(l);
  return h;
}

int stack_width(const std::vector<Line>& lines) {
  int w = 0;
  for (const Line& l : lines) w = std::max(w, text_width(l.text, l.font, l.bold));
  return w;
}

// <text> elements for `lines` stacked from `top`; `x` is their left edge or,
// with anchor "middle", their centre.
std::string text_stack(const std::vector<Line>& lines, int x, int top, std::string_view anchor) {
  std::string out;
  int baseline = top;
  for (const Line& l : lines) {
    baseline += advance(l);
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\"{}{} fill=\"{}\">{}</text>\n", x,
                       baseline - 4, l.font, l.bold ? " font-weight=\"bold\"" : "",
                       anchor == "start" ? "" : fmt::format(" text-anchor=\"{}\"", anchor),
                       l.colour, xml(l.text));
  }
  return out;
}

// ---- The drawing ----------------------------------------------------------

struct Rect {
  int x, y, w, h;
  bool overlaps(const Rect& o) const {
    return x < o.x + o.w && o.x < x + w && y < o.y + o.h && o.y < y + h;
  }
};

// A connector: a cubic Bezier from (x1, y1) down to its control points at
// height `dip` and up to (x2, y2).
struct Curve {
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0, dip = 0;
  std::pair<int, int> at(double t) const {
    const double u = 1 - t, a = u * u * u, b = 3 * u * u * t, c = 3 * u * t * t, d = t * t * t;
    return {static_cast<int>(a * x1 + b * x1 + c * x2 + d * x2 + 0.5),
            static_cast<int>(a * y1 + (b + c) * dip + d * y2 + 0.5)};
  }
};

// A box of the drawing: a container (machine, package, bridge, switch) or a
// device (GPU, NIC, or a tree node of a device kind the lists lack).
struct Box {
  Kind kind = Kind::machine;
  int gpu = -1, nic = -1;   // indices into Machine::gpus / nics
  std::vector<Line> lines;  // a container's title band, a device's content
  std::string tooltip;
  std::vector<size_t> children;  // indices into Drawing::boxes_
  int title_height = 0;
  int x = 0, y = 0, w = 0, h = 0;
  size_t parent = 0;  // the box it is drawn in (the root: itself)
  bool device() const { return kind == Kind::gpu || kind == Kind::nic || kind == Kind::other_pci; }
};

class Drawing {
 public:
  Drawing(const Machine& m, const Plan& plan) : m_(m), plan_(plan) {
    index_plan();
    index_tree();
    root_ = build_root();
    for (const Box& b : boxes_) {
      if (b.device()) leaf_height_ = std::max(leaf_height_, 8 + stack_height(b.lines) + 6);
    }
    lane_ = any_far_pairing() ? kDeepLane : kLane;
    measure(root_);
  }

  std::string svg() {
    std::vector<Line> head = header();
    std::vector<Line> foot = legend();
    const int head_h = stack_height(head) + 10;
    place(root_, kMargin, kMargin + head_h);
    const Box& root = boxes_[root_];
    const int foot_top = root.y + root.h + 16;
    const int width =
        std::max({root.w, stack_width(head), stack_width(foot) + kSwatch + 8}) + 2 * kMargin;
    const int height = foot_top + stack_height(foot) + kMargin;

    std::string out = fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" "
        "height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
        "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
        "<title>{2}</title>\n"
        "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n",
        width, height, xml("Courier topology: " + m_.source));
    out += text_stack(head, kMargin, kMargin, "start");
    out += draw_box(root_, 0);
    out += connectors();
    out += legend_swatches(foot_top);
    out += text_stack(foot, kMargin + kSwatch + 8, foot_top, "start");
    out += "</svg>\n";
    return out;
  }

 private:
  // Which GPUs use each NIC, and each GPU's plan, skipping indices out of range.
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

  // The nodes drawn inside container `node`: packages always, bridges and
  // switches only with a GPU or NIC below. Other PCI devices are left out
  // (what is below them moves up), and so is anything below a GPU or NIC,
  // which is drawn beside it instead: devices are leaves.
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

  size_t add(Box b) {
    boxes_.push_back(std::move(b));
    return boxes_.size() - 1;
  }

  size_t build_root() {
    std::vector<const topology::NumaNode*> loose;  // NUMA nodes no package box shows
    for (const topology::NumaNode& n : m_.numa) loose.push_back(&n);
    const size_t root =
        m_.tree.empty() ? add(container(Kind::machine, "Machine", {})) : build(0, loose);
    std::vector<Line> numa_lines = numa_lines_of(loose);
    auto& lines = boxes_[root].lines;
    lines.insert(lines.begin() + 1, numa_lines.begin(), numa_lines.end());
    // GPUs and NICs the tree does not place go in the machine box.
    for (size_t g = 0; g < m_.gpus.size(); ++g) {
      if (!placed_gpu_[g]) {
        const size_t b = add(gpu_box(static_cast<int>(g)));
        boxes_[root].children.push_back(b);
        boxes_[b].parent = root;
      }
    }
    for (size_t k = 0; k < m_.nics.size(); ++k) {
      if (!placed_nic_[k]) {
        const size_t b = add(nic_box(static_cast<int>(k)));
        boxes_[root].children.push_back(b);
        boxes_[b].parent = root;
      }
    }
    if (boxes_[root].children.empty()) {
      boxes_[root].lines.push_back({"no GPU or RDMA NIC found", kSmallFont, false, kMuted});
    }
    return root;
  }

  // Container `node` and everything drawn inside it; `loose` loses the NUMA
  // nodes a package box shows.
  size_t build(int node, std::vector<const topology::NumaNode*>& loose) {
    const TreeNode& t = m_.tree[static_cast<size_t>(node)];
    const Kind k = node == 0 ? Kind::machine : t.kind;
    std::string label = t.label.empty() ? default_label(k) : t.label;
    std::vector<Line> extra;
    if (k == Kind::package) extra = numa_lines_of(numa_of_package(t, loose));
    const size_t box = add(container(k, std::move(label), std::move(extra)));
    std::vector<int> inside;
    collect(node, inside);
    for (int c : inside) {
      size_t child = 0;
      if (auto g = gpu_at_.find(c); kind(c) == Kind::gpu && g != gpu_at_.end()) {
        child = add(gpu_box(g->second));
      } else if (auto n = nic_at_.find(c); kind(c) == Kind::nic && n != nic_at_.end()) {
        child = add(nic_box(n->second));
      } else if (kind(c) == Kind::gpu || kind(c) == Kind::nic) {
        child = add(stray_box(c));
      } else {
        child = build(c, loose);
      }
      boxes_[box].children.push_back(child);
      boxes_[child].parent = box;
    }
    if (k == Kind::package && inside.empty()) {
      boxes_[box].lines.push_back({"no GPU or NIC", kSmallFont, false, kMuted});
    }
    return box;
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

  static Box container(Kind k, std::string label, std::vector<Line> extra) {
    Box b;
    b.kind = k;
    b.tooltip = label;
    const int font = k == Kind::machine || k == Kind::package ? kTitleFont : kTextFont;
    b.lines.push_back({std::move(label), font, k == Kind::machine || k == Kind::package, kInk});
    b.lines.insert(b.lines.end(), extra.begin(), extra.end());
    return b;
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

  static std::vector<Line> numa_lines_of(const std::vector<const topology::NumaNode*>& nodes) {
    std::vector<Line> lines;
    for (const topology::NumaNode* n : nodes) {
      lines.push_back({fmt::format("NUMA {}: CPUs {}", numa_text(n->os_index), cpu_text(n->cpus)),
                       kSmallFont, false, kMuted});
    }
    return lines;
  }

  Box gpu_box(int g) {
    placed_gpu_[static_cast<size_t>(g)] = true;
    const topology::Gpu& gpu = m_.gpus[static_cast<size_t>(g)];
    Box b;
    b.kind = Kind::gpu;
    b.gpu = g;
    b.lines = {{fmt::format("GPU {}", g), kTitleFont, true, kInk},
               {gpu.name, kSmallFont, false, kInk},
               {gpu.pci.text(), kSmallFont, false, kMuted}};
    b.tooltip = fmt::format("GPU {}: {} {} {}, PCI {}, NUMA {}", g, gpu.name, gpu.vendor, gpu.model,
                            gpu.pci.text(), numa_text(gpu.numa));
    return b;
  }

  Box nic_box(int n) {
    placed_nic_[static_cast<size_t>(n)] = true;
    const topology::Nic& nic = m_.nics[static_cast<size_t>(n)];
    const std::vector<int>& users = users_[static_cast<size_t>(n)];
    Box b;
    b.kind = Kind::nic;
    b.nic = n;
    b.lines = {{nic.name, kTitleFont, true, kInk},
               {fmt::format("{} / {}", nic.driver, nic_backend(n)), kSmallFont, false, kInk},
               {nic.pci.text(), kSmallFont, false, kMuted}};
    if (users.size() > 1) {
      b.lines.push_back(
          {fmt::format("shared by GPU {}", fmt::join(users, ",")), kSmallFont, false, kInk});
    } else if (users.empty() && !m_.gpus.empty()) {
      b.lines.push_back({"no GPU uses it", kSmallFont, false, kMuted});
    }
    b.tooltip = fmt::format(
        "{}: driver {}, PCI {}, NUMA {}; {}", nic.name, nic.driver, nic.pci.text(),
        numa_text(nic.numa),
        users.empty() ? "no GPU uses it" : fmt::format("used by GPU {}", fmt::join(users, ",")));
    return b;
  }

  // The backend this NIC's traffic goes through: that of the GPU(s) using
  // it, else the one its driver would get.
  std::string nic_backend(int n) const {
    const std::vector<int>& users = users_[static_cast<size_t>(n)];
    for (const GpuPlan& p : plan_.gpus) {
      if (!users.empty() && p.gpu == users.front()) return p.backend;
    }
    return plan_.backend_forced
               ? plan_.backend
               : topology::backend_for_driver(m_.nics[static_cast<size_t>(n)].driver);
  }

  // A GPU or NIC node of the tree that Machine::gpus / nics do not list.
  Box stray_box(int node) const {
    const TreeNode& t = m_.tree[static_cast<size_t>(node)];
    Box b;
    b.kind = Kind::other_pci;
    b.lines = {
        {kind(node) == Kind::gpu ? "GPU (unlisted)" : "NIC (unlisted)", kTextFont, true, kMuted},
        {t.label, kSmallFont, false, kMuted}};
    b.tooltip = t.label;
    return b;
  }

  // Whether a connector starts or ends at this box.
  bool paired(const Box& b) const {
    if (b.kind == Kind::nic) return !users_[static_cast<size_t>(b.nic)].empty();
    if (b.kind != Kind::gpu) return false;
    return std::any_of(users_.begin(), users_.end(), [&](const std::vector<int>& users) {
      return std::find(users.begin(), users.end(), b.gpu) != users.end();
    });
  }

  void measure(size_t i) {
    Box& b = boxes_[i];
    if (b.device()) {
      b.w = std::max(kLeafWidth, stack_width(b.lines) + 16);
      b.h = leaf_height_;
      return;
    }
    int inner_w = 0, inner_h = 0;
    bool holds_connector_end = false;  // then leave a lane for the connectors
    for (size_t c : b.children) {
      measure(c);
      inner_w += boxes_[c].w + (inner_w > 0 ? kGap : 0);
      inner_h = std::max(inner_h, boxes_[c].h);
      holds_connector_end = holds_connector_end || paired(boxes_[c]);
    }
    b.title_height = 6 + stack_height(b.lines) + 4;
    b.w = std::max(inner_w, stack_width(b.lines)) + 2 * kPad;
    b.h = b.title_height + inner_h + (b.children.empty() ? 2 : kPad) +
          (holds_connector_end ? lane_ : 0);
  }

  void place(size_t i, int x, int y) {
    Box& b = boxes_[i];
    b.x = x;
    b.y = y;
    int cx = x + kPad;
    for (size_t c : b.children) {
      place(c, cx, y + b.title_height);
      cx += boxes_[c].w + kGap;
    }
  }

  // ---- SVG output ---------------------------------------------------------

  std::string draw_box(size_t i, int depth) const {
    const Box& b = boxes_[i];
    std::string out = fmt::format("<g>\n<title>{}</title>\n", xml(b.tooltip));
    if (b.device()) {
      out += draw_device(b);
    } else {
      out += draw_container(b, depth);
    }
    out += "</g>\n";
    for (size_t c : b.children) out += draw_box(c, depth + 1);
    return out;
  }

  std::string draw_container(const Box& b, int depth) const {
    std::string_view fill = "#ffffff", stroke = "#9a9a9a", dash;
    double width = 1;
    switch (b.kind) {
      case Kind::machine:
        fill = "#fbfbfb";
        stroke = "#444444";
        width = 1.5;
        break;
      case Kind::package:
        fill = "#eef2f7";
        stroke = "#7a8ca3";
        width = 1.2;
        break;
      case Kind::host_bridge:
        fill = "#f7f6ee";
        stroke = "#a39f86";
        break;
      default:  // switches: alternate shades so nested ones stand apart
        fill = depth % 2 == 0 ? "#ffffff" : "#f4f4f4";
        dash = "4,3";
        break;
    }
    std::string out = fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"6\" ry=\"6\" fill=\"{}\" "
        "stroke=\"{}\" stroke-width=\"{}\"{}/>\n",
        b.x, b.y, b.w, b.h, fill, stroke, width,
        dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", dash));
    return out + text_stack(b.lines, b.x + kPad, b.y + 6, "start");
  }

  std::string draw_device(const Box& b) const {
    std::string fill(kNeutralFill), stroke(kNeutralStroke);
    std::vector<int> stripes;  // GPUs whose colour bars top a shared NIC
    if (b.kind == Kind::gpu) {
      stroke = colour_of(b.gpu);
      fill = tint(stroke, 0.82);
    } else if (b.kind == Kind::nic) {
      const std::vector<int>& users = users_[static_cast<size_t>(b.nic)];
      if (users.size() == 1) {
        stroke = colour_of(users.front());
        fill = tint(stroke, 0.82);
      } else if (users.size() > 1) {
        stroke = "#555555";
        stripes = users;
      }
    }
    const bool used = b.kind != Kind::nic || !users_[static_cast<size_t>(b.nic)].empty();
    std::string out = fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"4\" ry=\"4\" fill=\"{}\" "
        "stroke=\"{}\" stroke-width=\"{}\"{}/>\n",
        b.x, b.y, b.w, b.h, fill, stroke, used && b.kind != Kind::other_pci ? 2 : 1,
        used ? "" : " stroke-dasharray=\"4,3\"");
    // Equal segments along the top, inside the border.
    const int inner = b.w - 4;
    for (size_t s = 0; s < stripes.size(); ++s) {
      const int x0 = b.x + 2 + static_cast<int>(s) * inner / static_cast<int>(stripes.size());
      const int x1 = b.x + 2 + static_cast<int>(s + 1) * inner / static_cast<int>(stripes.size());
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", x0,
                         b.y + 2, x1 - x0, kStripe, colour_of(stripes[s]));
    }
    return out + text_stack(b.lines, b.x + b.w / 2, b.y + 8, "middle");
  }

  const Box* box_of_gpu(int g) const {
    for (const Box& b : boxes_) {
      if (b.kind == Kind::gpu && b.gpu == g) return &b;
    }
    return nullptr;
  }

  const Box* box_of_nic(int n) const {
    for (const Box& b : boxes_) {
      if (b.kind == Kind::nic && b.nic == n) return &b;
    }
    return nullptr;
  }

  // Whether the GPU and NIC of a pairing sit in different containers: their
  // curve then runs deeper, under those between neighbours.
  bool far_apart(int gpu, int nic) const {
    const Box* g = box_of_gpu(gpu);
    const Box* n = box_of_nic(nic);
    return g != nullptr && n != nullptr && g->parent != n->parent;
  }

  bool any_far_pairing() const {
    for (const GpuPlan& p : plan_.gpus) {
      for (int n : p.nics) {
        if (valid_gpu(p.gpu) && valid_nic(n) && far_apart(p.gpu, n)) return true;
      }
    }
    return false;
  }

  // A curve from each GPU's bottom edge to each of its NICs', dipping into
  // the lane below the devices, with the hop count on it. All curves go
  // first and all labels after, so no curve crosses a label.
  std::string connectors() const {
    std::string curves, labels;
    std::vector<Rect> taken;  // the labels placed so far
    int far_count = 0;
    for (const GpuPlan& p : plan_.gpus) {
      const Box* gb = valid_gpu(p.gpu) ? box_of_gpu(p.gpu) : nullptr;
      if (gb == nullptr) continue;
      const std::string_view colour = colour_of(p.gpu);
      for (size_t k = 0; k < p.nics.size(); ++k) {
        const Box* nb = valid_nic(p.nics[k]) ? box_of_nic(p.nics[k]) : nullptr;
        if (nb == nullptr) continue;
        // Spread the ends of several curves along the bottom edges.
        const std::vector<int>& users = users_[static_cast<size_t>(p.nics[k])];
        const auto slot = std::find(users.begin(), users.end(), p.gpu) - users.begin();
        Curve c;
        c.x1 = gb->x + gb->w * static_cast<int>(k + 1) / static_cast<int>(p.nics.size() + 1);
        c.x2 = nb->x + nb->w * static_cast<int>(slot + 1) / static_cast<int>(users.size() + 1);
        c.y1 = gb->y + gb->h;
        c.y2 = nb->y + nb->h;
        // Curves between neighbours stay shallow; longer ones take one of a
        // few deeper levels, so that two of them rarely run on top of each other.
        const int depth = gb->parent == nb->parent ? kNearDip : kFarDip + 6 * (far_count++ % 4);
        c.dip = std::max(c.y1, c.y2) + depth;
        curves += fmt::format(
            "<path d=\"M {} {} C {} {} {} {} {} {}\" fill=\"none\" stroke=\"{}\" "
            "stroke-width=\"2\" stroke-opacity=\"0.85\"/>\n",
            c.x1, c.y1, c.x1, c.dip, c.x2, c.dip, c.x2, c.y2, colour);
        const int hops = k < p.distances.size() ? p.distances[k] : -1;
        labels += hop_label(hops_text(hops), c, colour, taken);
      }
    }
    return curves + labels;
  }

  // The hop count in a small white box on the curve: at its middle, or the
  // nearest point along it where it covers no label placed before.
  static std::string hop_label(const std::string& text, const Curve& c, std::string_view colour,
                               std::vector<Rect>& taken) {
    const int w = text_width(text, kSmallFont, false) + 8, h = kSmallFont + 5;
    Rect r{};
    for (const double t : {0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.5}) {
      const auto [cx, cy] = c.at(t);
      r = {cx - w / 2, cy - h / 2, w, h};
      if (std::none_of(taken.begin(), taken.end(), [&](const Rect& o) { return o.overlaps(r); })) {
        break;
      }
    }
    taken.push_back(r);
    return fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\" ry=\"3\" fill=\"#ffffff\" "
        "stroke=\"{}\" stroke-width=\"1\"/>\n"
        "<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text>\n",
        r.x, r.y, w, h, colour, r.x + w / 2, r.y + h / 2 + kSmallFont / 2 - 1, kSmallFont, kInk,
        xml(text));
  }

  std::vector<Line> header() const {
    return {{"Courier topology: " + m_.source, kHeadFont, true, kInk},
            {fmt::format("NIC selection: {}  \u00b7  NIC backend: {}{}  \u00b7  allowed CPUs: {}",
                         topology::to_string(plan_.selection), plan_.backend,
                         plan_.backend_forced ? " (forced by COURIER_NIC_BACKEND)" : "",
                         cpu_text(m_.allowed_cpus, 80)),
             kTextFont, false, kMuted}};
  }

  // "GPU 0 (0000:18:00.0, NUMA 0) -> mlx5_0 (2 hops), backend cx7, proxy
  // CPUs 0-13", then its note; then the plan's notes.
  std::vector<Line> legend() const {
    std::vector<Line> lines;
    for (const GpuPlan& p : plan_.gpus) {
      if (!valid_gpu(p.gpu)) continue;
      const topology::Gpu& g = m_.gpus[static_cast<size_t>(p.gpu)];
      std::vector<std::string> nics;
      for (size_t k = 0; k < p.nics.size(); ++k) {
        if (!valid_nic(p.nics[k])) continue;
        nics.push_back(fmt::format("{} ({})", m_.nics[static_cast<size_t>(p.nics[k])].name,
                                   hops_text(k < p.distances.size() ? p.distances[k] : -1)));
      }
      lines.push_back(
          {fmt::format("GPU {} ({}, NUMA {}) -> {}{}, backend {}{}, proxy CPUs {}{}", p.gpu,
                       g.pci.text(), numa_text(g.numa),
                       nics.empty() ? "no NIC" : fmt::format("{}", fmt::join(nics, ", ")),
                       p.nics_forced ? " (among COURIER_NICS)" : "", p.backend,
                       p.backend_forced ? " (forced)" : "", cpu_text(p.proxy_cpus, 64),
                       p.cpus_forced ? " (COURIER_PROXY_CPUS)" : ""),
           kTextFont, false, kInk});
      if (!p.note.empty()) lines.push_back({"note: " + p.note, kSmallFont, false, kMuted});
    }
    if (m_.gpus.empty()) {
      lines.push_back({fmt::format("No GPU: nothing to pair; a process without a GPU uses "
                                   "backend {}",
                                   plan_.backend),
                       kTextFont, false, kInk});
    }
    for (const std::string& note : plan_.notes) {
      lines.push_back({"note: " + note, kTextFont, false, kInk});
    }
    const auto others = std::count_if(m_.tree.begin(), m_.tree.end(),
                                      [](const TreeNode& t) { return t.kind == Kind::other_pci; });
    if (others > 0) {
      lines.push_back(
          {fmt::format("{} other PCI device{} not drawn", others, others == 1 ? "" : "s"),
           kSmallFont, false, kMuted});
    }
    return lines;
  }

  // The colour squares in front of the legend's GPU lines (which legend()
  // writes first, each maybe followed by a note line).
  std::string legend_swatches(int top) const {
    std::string out;
    int y = top;
    for (const GpuPlan& p : plan_.gpus) {
      if (!valid_gpu(p.gpu)) continue;
      const std::string_view colour = colour_of(p.gpu);
      const int line_top = y + (kTextFont + 4 - kSwatch) / 2;
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"{}\"/>\n",
          kMargin, line_top, kSwatch, kSwatch, tint(colour, 0.5), colour);
      y += kTextFont + 4;
      if (!p.note.empty()) y += kSmallFont + 4;
    }
    return out;
  }

  const Machine& m_;
  const Plan& plan_;
  std::vector<std::vector<int>> children_;     // tree node -> its children
  std::map<int, int> gpu_at_, nic_at_;         // tree node -> GPU / NIC index
  std::vector<bool> placed_gpu_, placed_nic_;  // already in a box
  std::vector<std::vector<int>> users_;        // NIC -> the GPUs using it, in plan order
  std::vector<Box> boxes_;
  size_t root_ = 0;
  int leaf_height_ = 0;
  int lane_ = kLane;
};

}  // namespace

std::string render_svg(const topology::Machine& m, const topology::Plan& plan) {
  return Drawing(m, plan).svg();
}

}  // namespace courier::info
