// The plot `flashspec bench` writes, as hand-written SVG (no plotting dependency).
//
// Layout, top to bottom:
//   header: models, prompts x repetitions, n, backend, CPU, commit, and the temperature
//           and placement when the sweep has only one of each;
//   three panels against the draft budget (log2 x axis, with a "none" slot on the left
//           for the target alone and an "auto" slot on the right for --tree auto):
//           τ, tokens/s and speedup; one line per family (chain or tree, per temperature
//           and placement), the target-only run as a dashed reference, error bars of one
//           sample stddev when there are repetitions, a star on the fastest
//           configuration of each temperature and placement;
//   the legend of the families;
//   the mean decode pass of every configuration as a stacked bar (draft, verify compute,
//           I/O wait, the rest), with ms/pass, τ and tokens/s beside it.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "apps/bench_report.h"

namespace flashspec {

namespace {

std::string fmt(const char* f, double v) { return format_number(f, v); }

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// Tick step giving about `n` ticks over [0, hi]: 1, 2 or 5 times a power of ten.
double nice_step(double hi, int n) {
  if (!(hi > 0)) return 1.0;
  const double raw = hi / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
}

// A family's colour says its shape (chain blue, tree red, tree auto green, the target
// alone grey); with several temperatures or placements, each group gets another shade
// of it and its own dash pattern (below), so that no two families look alike.
const char* const kShades[][4] = {
    {"#1f77b4", "#0b3d6b", "#6baed6", "#9ecae1"},  // chain
    {"#d62728", "#7f0000", "#fb6a4a", "#fcae91"},  // tree
    {"#2ca02c", "#00441b", "#74c476", "#a1d99b"},  // tree auto
    {"#444444", "#888888", "#222222", "#bbbbbb"},  // target only
};
const char* const kGroupDash[] = {"", "8 3", "2 3", "8 3 2 3"};
const char* const kReferenceDash = "6 4";

// Colours of the pass breakdown's parts (a panel with its own legend).
const char* const kDraftColor = "#b07aa1";
const char* const kComputeColor = "#4e79a7";
const char* const kIoColor = "#f28e2b";
const char* const kOtherColor = "#c7c7c7";
const char* const kStarFill = "#ffc000";
const char* const kStarStroke = "#7a5c00";

constexpr double kWidth = 1280;
constexpr double kMarginLeft = 80;

class Svg {
 public:
  void add(const std::string& s) {
    out_ += s;
    out_ += '\n';
  }
  void text(double x, double y, const std::string& s, const std::string& extra = "") {
    add("<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", y) + "\"" + (extra.empty() ? "" : " " + extra) + ">" +
        xml_escape(s) + "</text>");
  }
  void line(double x0, double y0, double x1, double y1, const std::string& style) {
    add("<line x1=\"" + fmt("%.1f", x0) + "\" y1=\"" + fmt("%.1f", y0) + "\" x2=\"" + fmt("%.1f", x1) + "\" y2=\"" +
        fmt("%.1f", y1) + "\" " + style + "/>");
  }
  void rect(double x, double y, double w, double h, const std::string& style) {
    add("<rect x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", y) + "\" width=\"" + fmt("%.1f", w) + "\" height=\"" +
        fmt("%.1f", h) + "\" " + style + "/>");
  }
  void circle(double x, double y, double r, const std::string& color) {
    add("<circle cx=\"" + fmt("%.1f", x) + "\" cy=\"" + fmt("%.1f", y) + "\" r=\"" + fmt("%.1f", r) + "\" fill=\"" +
        color + "\"/>");
  }
  void diamond(double x, double y, double r, const std::string& color) {
    add("<polygon points=\"" + fmt("%.1f", x) + "," + fmt("%.1f", y - r) + " " + fmt("%.1f", x + r) + "," +
        fmt("%.1f", y) + " " + fmt("%.1f", x) + "," + fmt("%.1f", y + r) + " " + fmt("%.1f", x - r) + "," +
        fmt("%.1f", y) + "\" fill=\"" + color + "\"/>");
  }
  // A five-pointed star centred on (x, y); `attrs` names it for readers and tests.
  void star(double x, double y, double r, const std::string& attrs) {
    std::string pts;
    for (int i = 0; i < 10; ++i) {
      const double a = -std::numbers::pi / 2 + double(i) * std::numbers::pi / 5, rr = i % 2 ? r * 0.45 : r;
      if (i) pts += ' ';  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + string
      pts += fmt("%.1f", x + rr * std::cos(a)) + "," + fmt("%.1f", y + rr * std::sin(a));
    }
    add("<polygon " + attrs + " points=\"" + pts + "\" fill=\"" + kStarFill + "\" stroke=\"" + kStarStroke +
        "\" stroke-width=\"1.2\"/>");
  }
  std::string str() const { return out_; }

 private:
  std::string out_;
};

// A text style with a white halo, for labels drawn over lines.
std::string halo(const std::string& style) {
  return style + " stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\"";
}

// ---- families ----------------------------------------------------------------------

// One line of the budget panels: the rows of one shape at one temperature and --io-bw.
struct Family {
  std::string shape, name, color, dash;
  std::vector<const BenchRow*> rows;  // by budget
  bool reference() const { return shape == "target"; }
};

// Which of the group's dimensions differ across the sweep; those that do not are said
// once in the header instead of in every family name.
struct Varying {
  bool temp = false, placement = false;
  static Varying of(const std::vector<BenchRow>& rows) {
    Varying v;
    for (const BenchRow& r : rows) {
      v.temp |= r.temp != rows.front().temp;
      v.placement |= r.io_bw != rows.front().io_bw;
    }
    return v;
  }
  // "T=0.7, streamed at 2.1 GB/s": the group's varying parts ("" when none vary).
  std::string group(const BenchRow& r) const {
    std::string s = temp ? "T=" + fmt("%g", r.temp) : "";
    if (placement) s += (s.empty() ? "" : ", ") + r.placement_label();
    return s;
  }
};

std::string shape_name(const std::string& shape) {
  if (shape == "target") return "target only";
  if (shape == "tree-auto") return "tree auto";
  return shape;
}

size_t shape_index(const std::string& shape) {
  return shape == "chain" ? 0 : shape == "tree" ? 1 : shape == "tree-auto" ? 2 : 3;
}

std::vector<Family> families_of(const std::vector<BenchRow>& rows, const Varying& v) {
  std::vector<Family> fams;
  std::vector<const BenchRow*> groups;  // first row of each temperature / placement
  for (const BenchRow& r : rows) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const BenchRow* o) { return o->same_group(r); });
    if (g == groups.end()) g = groups.insert(groups.end(), &r);
    const size_t gi = size_t(g - groups.begin());
    auto it = std::find_if(fams.begin(), fams.end(), [&](const Family& f) {
      return f.shape == r.shape && f.rows.front()->same_group(r);
    });
    if (it == fams.end()) {
      Family f;
      f.shape = r.shape;
      const std::string group = v.group(r);
      f.name = shape_name(r.shape) + (group.empty() ? "" : ", " + group);
      f.color = kShades[shape_index(r.shape)][gi % 4];
      f.dash = r.shape == "target" ? kReferenceDash : kGroupDash[gi % 4];
      fams.push_back(f);
      it = fams.end() - 1;
    }
    it->rows.push_back(&r);
  }
  for (Family& f : fams)
    std::sort(f.rows.begin(), f.rows.end(), [](const BenchRow* a, const BenchRow* b) { return a->budget < b->budget; });
  return fams;
}

// The stroke attributes of a family's line.
std::string stroke(const Family& f, double width) {
  return "stroke=\"" + f.color + "\" stroke-width=\"" + fmt("%g", width) + "\"" +
         (f.dash.empty() ? "" : " stroke-dasharray=\"" + f.dash + "\"");
}

// ---- axes --------------------------------------------------------------------------

struct Panel {
  double x0, y0, x1, y1;  // plot area
};

// A y axis: linear from 0, or log10 when the values span more than a factor of 20
// (tokens/s with and without a bandwidth cap differ by orders of magnitude).
struct YAxis {
  bool log = false;
  double max = 1, step = 1;  // linear
  double lo = 0, hi = 1;     // log: decades
  static YAxis for_values(const std::vector<double>& v, bool allow_log) {
    YAxis a;
    double mx = 0, mn = INFINITY;
    for (double x : v)
      if (x > 0) mx = std::max(mx, x), mn = std::min(mn, x);
    if (!(mx > 0)) mx = 1, mn = 1;
    if (allow_log && mx / mn > 20) {
      a.log = true;
      a.lo = std::floor(std::log10(mn));
      a.hi = std::ceil(std::log10(mx));
      if (a.hi <= a.lo) a.hi = a.lo + 1;
      return a;
    }
    a.step = nice_step(mx * 1.1, 5);
    a.max = std::ceil(mx * 1.1 / a.step) * a.step;
    return a;
  }
  // Fraction of the height (0 bottom, 1 top), clamped to the panel.
  double frac(double v) const {
    const double f = !log ? v / max : v > 0 ? (std::log10(v) - lo) / (hi - lo) : 0.0;
    return std::clamp(f, 0.0, 1.0);
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (!log) {
      for (double v = 0; v <= max + step * 1e-6; v += step) t.push_back(std::round(v * 1e6) / 1e6);
      return t;
    }
    for (double d = lo; d <= hi; ++d)
      for (double m : {1.0, 2.0, 5.0})
        if ((d < hi || m == 1.0) && (m == 1.0 || hi - lo <= 3)) t.push_back(m * std::pow(10.0, d));
    return t;
  }
};

// The x axis of the budget panels: draft budgets on a log2 scale, with a slot on the
// left for the target alone ("none") and one on the right for --tree auto, whose budget
// changes every pass.
class BudgetAxis {
 public:
  BudgetAxis(const Panel& p, const std::vector<BenchRow>& rows) : x0_(p.x0 + 14), x1_(p.x1 - 14) {
    double lo = INFINITY, hi = -INFINITY;
    for (const BenchRow& r : rows) {
      none_ |= r.shape == "target";
      auto_ |= r.shape == "tree-auto";
      if (r.budget > 0) lo = std::min(lo, std::log2(double(r.budget))), hi = std::max(hi, std::log2(double(r.budget)));
    }
    budgets_ = lo <= hi;
    if (lo <= hi) lo_ = std::floor(lo), hi_ = std::ceil(hi);
    if (hi_ <= lo_) hi_ = lo_ + 1;
  }
  double x(const BenchRow& r) const {
    if (r.shape == "target") return at(-kSlot);
    if (r.shape == "tree-auto") return at(hi_ - lo_ + kSlot);
    return at(std::log2(double(r.budget)) - lo_);
  }
  void draw_ticks(Svg& s, const Panel& p) const {
    auto tick = [&](double x, const std::string& label) {
      s.line(x, p.y1, x, p.y1 + 5, "stroke=\"#333333\"");
      s.text(x, p.y1 + 18, label, "text-anchor=\"middle\" font-size=\"11\"");
    };
    if (none_) tick(at(-kSlot), "none");
    const int every = hi_ - lo_ > 10 ? 2 : 1;
    if (budgets_)
      for (int k = int(lo_); k <= int(hi_); k += every) tick(at(double(k) - lo_), fmt("%.0f", std::ldexp(1.0, k)));
    if (auto_) tick(at(hi_ - lo_ + kSlot), "auto");
  }

 private:
  static constexpr double kSlot = 1.4;  // doublings between a side slot and the budgets
  double at(double u) const {
    const double lo = none_ ? -kSlot : 0, hi = hi_ - lo_ + (auto_ ? kSlot : 0);
    return x0_ + (x1_ - x0_) * (u - lo) / (hi - lo);
  }
  double x0_, x1_;
  double lo_ = 0, hi_ = 1;  // log2 of the smallest and largest budget
  bool none_ = false, auto_ = false, budgets_ = false;
};

// Frame, y grid/ticks and the titles of one panel.
void draw_axes(Svg& s, const Panel& p, const YAxis& ya, const std::string& title, const std::string& x_label,
               const std::string& y_label) {
  s.rect(p.x0, p.y0, p.x1 - p.x0, p.y1 - p.y0, "fill=\"#ffffff\" stroke=\"#333333\"");
  for (double v : ya.ticks()) {
    const double y = p.y1 - (p.y1 - p.y0) * ya.frac(v);
    s.line(p.x0, y, p.x1, y, "stroke=\"#e5e5e5\"");
    s.line(p.x0 - 5, y, p.x0, y, "stroke=\"#333333\"");
    s.text(p.x0 - 8, y + 4, fmt("%g", v), "text-anchor=\"end\" font-size=\"11\"");
  }
  s.text((p.x0 + p.x1) / 2, p.y0 - 12, title, "text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\"");
  s.text((p.x0 + p.x1) / 2, p.y1 + 38, x_label, "text-anchor=\"middle\" font-size=\"12\"");
  const double ly = (p.y0 + p.y1) / 2, lx = p.x0 - 52;
  s.text(lx, ly, y_label + (ya.log ? " (log scale)" : ""),
         "text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 " + fmt("%.1f", lx) + " " + fmt("%.1f", ly) +
             ")\"");
}

// ---- the budget panels -------------------------------------------------------------

// What a budget panel plots: a row's value and its spread over repetitions.
struct Metric {
  const char* cls;  // class of the series ("tau", "tps", "speedup")
  std::function<double(const BenchRow&)> value;
  std::function<std::optional<double>(const BenchRow&)> spread;
  bool log_allowed = false;
  bool mark_fastest = false;
};

Metric tau_metric() {
  return {"tau", [](const BenchRow& r) { return r.totals.tau(); }, [](const BenchRow&) { return std::optional<double>(); }};
}
Metric tps_metric() {
  return {"tps", [](const BenchRow& r) { return r.tokens_per_s.mean(); },
          [](const BenchRow& r) { return r.tokens_per_s.stddev(); }, true, true};
}
Metric speedup_metric() {
  return {"speedup", [](const BenchRow& r) { return r.speedup.mean(); },
          [](const BenchRow& r) { return r.speedup.stddev(); }, false, true};
}

YAxis axis_for(const std::vector<BenchRow>& rows, const Metric& m) {
  std::vector<double> v;
  if (!m.log_allowed) v.push_back(1.0);  // τ and speedup: the target-only 1 always shows
  for (const BenchRow& r : rows) {
    v.push_back(m.value(r));
    v.push_back(m.value(r) + m.spread(r).value_or(0.0));
  }
  return YAxis::for_values(v, m.log_allowed);
}

void draw_error_bar(Svg& s, double x, double y_lo, double y_hi, const std::string& color) {
  const std::string st = "stroke=\"" + color + "\" stroke-width=\"1.2\"";
  s.line(x, y_lo, x, y_hi, st);
  s.line(x - 3, y_lo, x + 3, y_lo, st);
  s.line(x - 3, y_hi, x + 3, y_hi, st);
}

// The target alone: a dashed line across the panel at its value, and its point at "none".
void draw_reference(Svg& s, const Panel& p, const Family& f, const Metric& m, double y) {
  s.add("<polyline class=\"series " + std::string(m.cls) + " reference\" data-family=\"" + xml_escape(f.name) +
        "\" fill=\"none\" " + stroke(f, 1.5) + " points=\"" +
        fmt("%.1f", p.x0) + "," + fmt("%.1f", y) + " " + fmt("%.1f", p.x1) + "," + fmt("%.1f", y) + "\"/>");
}

void draw_family(Svg& s, const Panel& p, const BudgetAxis& xa, const YAxis& ya, const Family& f, const Metric& m) {
  auto Y = [&](double v) { return p.y1 - (p.y1 - p.y0) * ya.frac(v); };
  if (f.reference()) draw_reference(s, p, f, m, Y(m.value(*f.rows.front())));
  if (f.shape == "chain" || f.shape == "tree") {
    std::string pts;
    for (const BenchRow* r : f.rows) {
      if (!pts.empty()) pts += ' ';
      pts += fmt("%.1f", xa.x(*r)) + "," + fmt("%.1f", Y(m.value(*r)));
    }
    s.add("<polyline class=\"series " + std::string(m.cls) + "\" data-family=\"" + xml_escape(f.name) +
          "\" fill=\"none\" " + stroke(f, 2) + " points=\"" + pts + "\"/>");
  }
  for (const BenchRow* r : f.rows) {
    const double x = xa.x(*r), v = m.value(*r);
    if (const std::optional<double> sd = m.spread(*r); sd && *sd > 0)
      draw_error_bar(s, x, Y(v - *sd), Y(v + *sd), f.color);
    if (f.shape == "tree-auto") s.diamond(x, Y(v), 5, f.color);
    else s.circle(x, Y(v), 3.5, f.color);
  }
}

// Stars on the fastest configurations; a word beside the star only when there is one
// (several would overlap: the legend names the star).
void draw_fastest(Svg& s, const Panel& p, const BudgetAxis& xa, const YAxis& ya, const std::vector<BenchRow>& rows,
                  const Metric& m) {
  const bool one = std::count_if(rows.begin(), rows.end(), [](const BenchRow& r) { return r.fastest; }) == 1;
  for (const BenchRow& r : rows) {
    if (!r.fastest) continue;
    const double x = xa.x(r), y = p.y1 - (p.y1 - p.y0) * ya.frac(m.value(r));
    s.star(x, y, 9, "class=\"fastest\" data-config=\"" + xml_escape(r.config) + "\"");
    if (!one) continue;
    // Label to the side with more room, above the star unless that leaves the panel.
    const bool left = x > (p.x0 + p.x1) / 2;
    const double ly = y - 12 < p.y0 + 12 ? y + 20 : y - 12;
    s.text(left ? x - 8 : x + 8, ly, "fastest: " + r.config,
           halo("font-size=\"11\" font-weight=\"bold\" fill=\"" + std::string(kStarStroke) + "\" text-anchor=\"" +
                (left ? "end" : "start") + "\""));
  }
}

void draw_budget_panel(Svg& s, const Panel& p, const std::vector<BenchRow>& rows, const std::vector<Family>& fams,
                       const Metric& m, const std::string& title, const std::string& y_label) {
  const YAxis ya = axis_for(rows, m);
  const BudgetAxis xa(p, rows);
  draw_axes(s, p, ya, title, "draft budget (tokens per pass, log2)", y_label);
  xa.draw_ticks(s, p);
  for (const Family& f : fams)
    if (f.reference()) draw_family(s, p, xa, ya, f, m);  // references under the lines
  for (const Family& f : fams)
    if (!f.reference()) draw_family(s, p, xa, ya, f, m);
  if (m.mark_fastest) draw_fastest(s, p, xa, ya, rows, m);
}

// ---- header and legend -------------------------------------------------------------

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

void draw_header(Svg& s, const std::vector<BenchRow>& rows, const BenchMeta& m, const Varying& v) {
  std::string title = "flashspec bench: " + file_name(m.target_path);
  if (!m.draft_path.empty()) title += " + draft " + file_name(m.draft_path);
  s.text(kWidth / 2, 30, title, "text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\"");
  std::string line1 = std::to_string(m.prompts) + " prompts × " + std::to_string(m.reps) +
                      (m.reps == 1 ? " repetition" : " repetitions") + ", n=" + std::to_string(m.n_predict) +
                      ", KV " + m.kv_type;
  if (!rows.empty() && !v.temp) line1 += ", T=" + fmt("%g", rows.front().temp);
  if (!rows.empty() && !v.placement) line1 += ", target " + rows.front().placement_label();
  s.text(kWidth / 2, 52, line1, "text-anchor=\"middle\" font-size=\"13\"");
  s.text(kWidth / 2, 70, m.backend + " on " + m.cpu + ", commit " + m.commit,
         "text-anchor=\"middle\" font-size=\"12\" fill=\"#555555\"");
}

std::string family_note(const Family& f) {
  if (f.shape == "target") return " (no draft: the reference)";
  if (f.shape == "chain") return " (K draft tokens per pass)";
  if (f.shape == "tree") return " (B draft tokens per pass)";
  return " (budget chosen every pass)";
}

// One legend entry: its symbol (drawn left of (x, y)) and its words.
struct LegendEntry {
  std::function<void(Svg&, double, double)> symbol;
  std::string text;
};

std::vector<LegendEntry> legend_entries(const std::vector<Family>& fams, const BenchMeta& m, const Varying& v) {
  std::vector<LegendEntry> out;
  // With several temperatures or placements the names are long already: no notes.
  const bool notes = !v.temp && !v.placement;
  for (const Family& f : fams) {
    auto symbol = [f](Svg& s, double x, double y) {
      if (f.shape == "tree-auto") return s.diamond(x + 14, y - 4, 5, f.color);
      s.line(x, y - 4, x + 28, y - 4, stroke(f, 2));
      s.circle(x + 14, y - 4, 3.5, f.color);
    };
    out.push_back({symbol, f.name + (notes ? family_note(f) : "")});
  }
  out.push_back({[](Svg& s, double x, double y) { s.star(x + 14, y - 4, 8, "class=\"legend-star\""); },
                 "fastest (tokens/s) at its temperature and placement"});
  if (m.reps > 1)
    out.push_back({[](Svg& s, double x, double y) { draw_error_bar(s, x + 14, y + 3, y - 11, "#333333"); },
                   "error bars: one sample stddev over " + std::to_string(m.reps) + " repetitions"});
  return out;
}

// Legend entries in as many columns (up to 3) as the longest text allows; returns the y
// below the legend.
double draw_legend(Svg& s, double y0, const std::vector<LegendEntry>& entries) {
  constexpr double kRow = 20, kCharW = 6.8, kSymbolW = 36;  // 12 px text: about 6.8 px a character
  const double avail = kWidth - kMarginLeft - 20;
  size_t longest = 0;
  for (const LegendEntry& e : entries) longest = std::max(longest, e.text.size());
  const size_t cols = std::clamp<size_t>(size_t(avail / (kSymbolW + kCharW * double(longest) + 24)), 1, 3);
  const double col_w = avail / double(cols);
  for (size_t i = 0; i < entries.size(); ++i) {
    const double x = kMarginLeft + double(i % cols) * col_w, y = y0 + double(i / cols) * kRow;
    entries[i].symbol(s, x, y);
    s.text(x + kSymbolW, y, entries[i].text, "font-size=\"12\"");
  }
  return y0 + double((entries.size() + cols - 1) / cols) * kRow;
}

// ---- the pass breakdown ------------------------------------------------------------

struct BarLayout {
  double star_x = 150;  // left of the longest config name ("chain-256", "tree-4096")
  double label_right = 232, x0 = 240, x1 = 760, note_x = 772;
  double bar_h = 14, pitch = 22;
};

void draw_breakdown_legend(Svg& s, double x, double y) {
  const std::pair<const char*, const char*> parts[] = {{kDraftColor, "draft (incl. waiting for pre-growing)"},
                                                       {kComputeColor, "verify compute"},
                                                       {kIoColor, "I/O wait (streamed weights)"},
                                                       {kOtherColor, "other (sampling, acceptance)"}};
  for (const auto& [color, name] : parts) {
    s.rect(x, y - 10, 12, 12, "fill=\"" + std::string(color) + "\"");
    s.text(x + 17, y, name, "font-size=\"12\"");
    x += 17 + 7.0 * double(std::char_traits<char>::length(name)) + 24;
  }
}

// Milliseconds with two or three significant digits (%g would write 1.2e+02).
std::string format_ms(double ms) {
  return fmt(ms >= 100 ? "%.0f" : ms >= 10 ? "%.1f" : ms >= 1 ? "%.2f" : "%.2g", ms);
}

// The figures beside a bar, so that short bars can be read: "2.40 ms/pass = draft 0.30 +
// verify 2.10; tau 2.49, 1066 tok/s" (parts under 1% of the pass left out).
std::string bar_note(const BenchRow& r, const PassBreakdown& b) {
  std::string parts;
  const std::pair<double, const char*> named[] = {
      {b.draft, "draft"}, {b.compute, "verify"}, {b.io_wait, "I/O"}, {b.other, "other"}};
  for (const auto& [ms, name] : named) {
    if (ms < 0.01 * b.total()) continue;
    parts += parts.empty() ? " = " : " + ";
    parts += std::string(name) + " " + format_ms(ms);
  }
  return format_ms(b.total()) + " ms/pass" + parts + "; tau " + fmt("%.2f", r.totals.tau()) + ", " +
         fmt("%.0f", r.tokens_per_s.mean()) + " tok/s";
}

// One bar: the parts of a row's mean decode pass, then its figures to the right.
void draw_bar(Svg& s, const BarLayout& L, double y, double ms_max, const BenchRow& r) {
  const PassBreakdown b = r.per_pass();
  const double scale = (L.x1 - L.x0) / ms_max;
  double x = L.x0;
  const std::pair<double, const char*> parts[] = {
      {b.draft, kDraftColor}, {b.compute, kComputeColor}, {b.io_wait, kIoColor}, {b.other, kOtherColor}};
  s.add("<g class=\"pass-bar\" data-config=\"" + xml_escape(r.config) + "\">");
  for (const auto& [ms, color] : parts) {
    if (ms <= 0) continue;
    s.rect(x, y, ms * scale, L.bar_h, "fill=\"" + std::string(color) + "\"");
    x += ms * scale;
  }
  s.add("</g>");
  s.text(L.label_right, y + L.bar_h - 3, r.config, "text-anchor=\"end\" font-size=\"12\"");
  if (r.fastest) s.star(L.star_x, y + L.bar_h / 2, 7, "class=\"fastest-bar\"");
  s.text(L.note_x, y + L.bar_h - 3, bar_note(r, b), "font-size=\"11\" fill=\"#333333\"");
}

void draw_ms_axis(Svg& s, const BarLayout& L, double y, double ms_max, double step) {
  s.line(L.x0, y, L.x1, y, "stroke=\"#333333\"");
  for (double v = 0; v <= ms_max + step * 1e-6; v += step) {
    const double x = L.x0 + (L.x1 - L.x0) * v / ms_max;
    s.line(x, y, x, y + 5, "stroke=\"#333333\"");
    s.text(x, y + 18, fmt("%g", std::round(v * 1e6) / 1e6), "text-anchor=\"middle\" font-size=\"11\"");
  }
  s.text((L.x0 + L.x1) / 2, y + 36, "ms per decode pass (mean over the passes after the prefill)",
         "text-anchor=\"middle\" font-size=\"12\"");
}

// Rows of the breakdown, top to bottom: a heading for each temperature / placement when
// the sweep has several, then its configurations.
struct BarRow {
  const BenchRow* row = nullptr;  // nullptr: a heading
  std::string heading;
};

std::vector<BarRow> bar_rows(const std::vector<BenchRow>& rows, const Varying& v) {
  std::vector<BarRow> out;
  std::string group;
  for (const BenchRow& r : rows) {
    const std::string g = v.group(r);
    if (!g.empty() && g != group) out.push_back({nullptr, g});
    group = g;
    out.push_back({&r, ""});
  }
  return out;
}

// Returns the y below the panel.
double draw_breakdown(Svg& s, double y0, const std::vector<BenchRow>& rows, const Varying& v) {
  const BarLayout L;
  s.text(kMarginLeft, y0, "Where a decode pass goes (mean per configuration)",
         "font-size=\"14\" font-weight=\"bold\"");
  draw_breakdown_legend(s, kMarginLeft, y0 + 24);
  double ms_max = 0;
  for (const BenchRow& r : rows) ms_max = std::max(ms_max, r.per_pass().total());
  const double step = nice_step(ms_max > 0 ? ms_max : 1, 8);
  ms_max = std::max(step, std::ceil(ms_max / step) * step);
  const std::vector<BarRow> layout = bar_rows(rows, v);
  const double top = y0 + 44, bottom = top + L.pitch * double(layout.size());
  for (double t = step; t <= ms_max + step * 1e-6; t += step) {  // grid behind the bars
    const double x = L.x0 + (L.x1 - L.x0) * t / ms_max;
    s.line(x, top - 4, x, bottom, "stroke=\"#e5e5e5\"");
  }
  double y = top;
  for (const BarRow& b : layout) {
    if (b.row) draw_bar(s, L, y, ms_max, *b.row);
    else s.text(24, y + L.bar_h - 2, b.heading, "font-size=\"12\" font-weight=\"bold\"");
    y += L.pitch;
  }
  draw_ms_axis(s, L, bottom, ms_max, step);
  return bottom + 50;
}

}  // namespace

std::string bench_svg(const std::vector<BenchRow>& rows, const BenchMeta& m) {
  const Varying v = rows.empty() ? Varying{} : Varying::of(rows);
  const std::vector<Family> fams = families_of(rows, v);
  Svg body;
  draw_header(body, rows, m, v);
  // Three panels side by side, 80 px apart for the next panel's y-axis labels.
  constexpr double kTop = 120, kBottom = 380, kPanelW = 336, kGap = 80;
  auto panel = [&](int i) {
    const double x0 = kMarginLeft + double(i) * (kPanelW + kGap);
    return Panel{x0, kTop, x0 + kPanelW, kBottom};
  };
  draw_budget_panel(body, panel(0), rows, fams, tau_metric(), "tau vs draft budget", "tau (tokens per target pass)");
  draw_budget_panel(body, panel(1), rows, fams, tps_metric(), "tokens/s vs draft budget", "tokens/s (decode)");
  draw_budget_panel(body, panel(2), rows, fams, speedup_metric(), "speedup vs draft budget",
                    "speedup over the target alone (x)");
  const double legend_end = draw_legend(body, kBottom + 72, legend_entries(fams, m, v));
  const double height = draw_breakdown(body, legend_end + 30, rows, v);

  Svg s;
  s.add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", kWidth) + "\" height=\"" +
        fmt("%.0f", height) + "\" viewBox=\"0 0 " + fmt("%.0f", kWidth) + " " + fmt("%.0f", height) +
        "\" font-family=\"Helvetica, Arial, sans-serif\">");
  s.add("<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>");
  return s.str() + body.str() + "</svg>\n";
}

}  // namespace flashspec
