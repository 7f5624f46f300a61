// The plot `flashspec bench` writes, as hand-written SVG: it draws lines, boxes, dots,
// stars and words, and its elements carry classes that tests and scripts find (a plotting
// library would give neither a shorter file nor those hooks).
//
// Top to bottom: a header (models, prompt set, machine; the temperature and placement
// when the sweep has one of each); four panels against the draft budget: tau, tokens/s,
// speedup and acceptance, with a line per family (chain or tree of one draft at one
// temperature and placement), the target alone as a dashed reference, --tree auto as a
// point in its own slot, error bars of one stddev with repetitions, the spread over
// prompts beside each tokens/s point,
// a star on the fastest configuration of each temperature and placement where its 95%
// interval clears the runner-up's (a hollow one on each within noise of the top);
// acceptance by draft depth and tokens per pass against rows verified per pass; the
// legend; the mean decode pass of every configuration as a stacked bar (draft, verify
// compute, I/O wait, the rest) with its figures beside it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "apps/bench_report.h"

namespace flashspec {

namespace {

constexpr double kWidth = 1280, kLeft = 80;
constexpr const char* kBold = " font-weight=\"bold\"";

std::string num(double v) { return format_number("%.1f", v); }

// Text attributes: the size, and which end of the text is at its x.
std::string font(int size, const char* anchor = "start") {
  return "font-size=\"" + std::to_string(size) + "\" text-anchor=\"" + anchor + "\"";
}

std::string escaped(const std::string& s) {
  std::string o;
  for (char c : s)
    o += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&quot;" : std::string(1, c);
  return o;
}

// The body of the document, an element a line; `style` is the rest of an element's
// attributes, written as given.
struct Svg {
  std::string out;

  void add(const std::string& element) { out += element + "\n"; }
  void text(double x, double y, const std::string& s, const std::string& style) {
    add("<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + style + ">" + escaped(s) + "</text>");
  }
  void line(double x0, double y0, double x1, double y1, const std::string& style) {
    add("<line x1=\"" + num(x0) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(x1) + "\" y2=\"" + num(y1) + "\" " + style +
        "/>");
  }
  void rect(double x, double y, double w, double h, const std::string& style) {
    add("<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) + "\" " + style +
        "/>");
  }
  // A point's marker: one shape per temperature of the sweep (circle, square, triangle,
  // diamond, then again).
  void marker(double x, double y, const std::string& color, int shape, const std::string& attrs = "") {
    const std::string fill = " fill=\"" + color + "\"" + (attrs.empty() ? "" : " " + attrs);
    switch (shape % 4) {
      case 0: add("<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"3.5\"" + fill + "/>"); break;
      case 1: rect(x - 3.5, y - 3.5, 7, 7, fill.substr(1)); break;
      case 2:
        add("<polygon points=\"" + num(x) + "," + num(y - 4.5) + " " + num(x + 4.5) + "," + num(y + 3.5) + " " +
            num(x - 4.5) + "," + num(y + 3.5) + "\"" + fill + "/>");
        break;
      default:
        add("<polygon points=\"" + num(x) + "," + num(y - 5) + " " + num(x + 5) + "," + num(y) + " " + num(x) + "," +
            num(y + 5) + " " + num(x - 5) + "," + num(y) + "\"" + fill + "/>");
    }
  }
  void error_bar(double x, double y0, double y1, const std::string& color) {
    const std::string st = "stroke=\"" + color + "\"";
    line(x, y0, x, y1, st);
    line(x - 3, y0, x + 3, y0, st);
    line(x - 3, y1, x + 3, y1, st);
  }
  // A five-pointed star; `attrs` names it (class, data-config) for readers and tests.
  void star(double x, double y, double r, const std::string& attrs, bool filled = true) {
    std::string pts;
    for (int i = 0; i < 10; ++i) {
      const double a = -std::numbers::pi / 2 + i * std::numbers::pi / 5, ri = i % 2 ? r * 0.45 : r;
      if (i) pts += ' ';
      pts += num(x + ri * std::cos(a)) + "," + num(y + ri * std::sin(a));
    }
    add("<polygon " + attrs + " points=\"" + pts + "\" fill=\"" + (filled ? "#ffc000" : "none") +
        "\" stroke=\"#7a5c00\"/>");
  }
};

// Tick step giving about `n` ticks over [0, hi]: 1, 2 or 5 times a power of ten.
double nice_step(double hi, int n) {
  const double raw = hi / n, mag = std::pow(10.0, std::floor(std::log10(raw))), norm = raw / mag;
  return (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
}

// ---- families: the lines of the budget panels ---------------------------------------

// The parts of a row's group (temperature, --io-bw) that vary across the sweep: family
// names and bar headings say them, the header says the others once.
struct Varying {
  bool temp = false, placement = false;
  explicit Varying(const std::vector<BenchRow>& rows) {
    for (const BenchRow& r : rows) temp |= r.temp != rows[0].temp, placement |= r.io_bw != rows[0].io_bw;
  }
  std::string of(const BenchRow& r) const {  // "T=0.7, streamed at 2.1 GB/s"; "" when neither varies
    std::string s = temp ? "T=" + format_number("%g", r.temp) : "";
    return placement ? s + (s.empty() ? "" : ", ") + r.placement_label() : s;
  }
};

// The rows of one shape and draft in one group, by budget. One colour per draft (grey for
// the target alone), one dash per shape (the target alone dashed, chains dash-dotted,
// trees solid, --tree auto points only), one marker per temperature.
struct Family {
  std::string shape, draft, name, color;
  std::vector<const BenchRow*> rows;
  int marker = 0;  // the index of its temperature among the sweep's

  std::string stroke(double width) const {
    return "stroke=\"" + color + "\" stroke-width=\"" + format_number("%g", width) + "\"" +
           (shape == "target" ? " stroke-dasharray=\"6 4\"" : shape == "chain" ? " stroke-dasharray=\"8 3 2 3\"" : "");
  }
};

std::vector<Family> families_of(const std::vector<BenchRow>& rows, const Varying& v) {
  static const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                        "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
  std::vector<double> temps;
  std::vector<std::string> drafts;
  for (const BenchRow& r : rows) {
    if (std::find(temps.begin(), temps.end(), r.temp) == temps.end()) temps.push_back(r.temp);
    if (!r.draft.empty() && std::find(drafts.begin(), drafts.end(), r.draft) == drafts.end()) drafts.push_back(r.draft);
  }
  std::vector<Family> fams;
  for (const BenchRow& r : rows) {
    auto f = std::find_if(fams.begin(), fams.end(), [&](const Family& o) {
      return o.shape == r.shape && o.draft == r.draft && o.rows[0]->same_group(r);
    });
    if (f == fams.end()) {
      const std::string shape = r.shape == "target" ? "target only" : r.shape == "tree-auto" ? "tree auto" : r.shape;
      std::string name = shape;
      if (drafts.size() > 1 && !r.draft.empty()) name += " " + std::filesystem::path(r.draft).filename().string();
      const std::string group = v.of(r);
      const size_t d = size_t(std::find(drafts.begin(), drafts.end(), r.draft) - drafts.begin());
      fams.push_back({r.shape, r.draft, name + (group.empty() ? "" : ", " + group),
                      r.draft.empty() ? "#444444" : kColors[d % std::size(kColors)], {},
                      int(std::find(temps.begin(), temps.end(), r.temp) - temps.begin())});
      f = fams.end() - 1;
    }
    f->rows.push_back(&r);
  }
  for (Family& f : fams)
    std::sort(f.rows.begin(), f.rows.end(), [](const BenchRow* a, const BenchRow* b) { return a->budget < b->budget; });
  return fams;
}

// ---- the budget panels -----------------------------------------------------------------

// The x axis: an evenly spaced slot per draft budget of the sweep, after a "none" slot for
// the target alone and before an "auto" slot for --tree auto (its budget changes every pass).
std::string slot_of(const BenchRow& r) {
  return r.shape == "target" ? "none" : r.shape == "tree-auto" ? "auto" : std::to_string(r.budget);
}
std::vector<std::string> slots_of(const std::vector<BenchRow>& rows) {
  std::set<int64_t> budgets;
  bool none = false, automatic = false;
  for (const BenchRow& r : rows) {
    none |= r.shape == "target", automatic |= r.shape == "tree-auto";
    if (r.shape == "chain" || r.shape == "tree") budgets.insert(r.budget);
  }
  std::vector<std::string> s(none ? 1 : 0, "none");
  for (int64_t b : budgets) s.push_back(std::to_string(b));
  if (automatic) s.push_back("auto");
  return s;
}

// What a panel plots: a row's measurement over the repetitions, drawn as its mean with an
// error bar of one sample stddev where there are several values.
struct Metric {
  const char *cls, *title, *y_label;  // cls: the series' class, "tau", "tps", "speedup" or "acceptance"
  RepStat (*of)(const BenchRow&);
  bool mark_fastest;
  bool drafted_only = false;  // rows that drafted nothing (the target alone) have no value
};
const Metric kMetrics[] = {
    {"tau", "tau vs draft budget", "tau (tokens per target pass)",
     [](const BenchRow& r) { return RepStat{{r.totals.tau()}}; }, false},  // one value: counts summed over all reps
    {"tps", "tokens/s vs draft budget", "tokens/s (decode)", [](const BenchRow& r) { return r.tokens_per_s; }, true},
    {"speedup", "speedup vs draft budget", "speedup over the target alone (x)",
     [](const BenchRow& r) { return r.speedup; }, true},
    {"acceptance", "acceptance vs draft budget", "acceptance (accepted / drafted)",
     [](const BenchRow& r) { return RepStat{{r.totals.acceptance()}}; }, false, true}};

// A family's line: class "series tau" (tps, speedup); "series tau reference" for the target alone.
void polyline(Svg& s, const std::string& cls, const Family& f, const std::vector<std::pair<double, double>>& pts) {
  std::string p;
  for (const auto& [x, y] : pts) {
    if (!p.empty()) p += ' ';  // piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + string
    p += num(x) + "," + num(y);
  }
  s.add("<polyline class=\"series " + cls + "\" data-family=\"" + escaped(f.name) + "\" fill=\"none\" " +
        f.stroke(f.shape == "target" ? 1.5 : 2) + " points=\"" + p + "\"/>");
}

// One panel, its plot area x0..x1 by y0..y1.
void draw_panel(Svg& s, double x0, double y0, double x1, double y1, const Metric& m, const std::vector<BenchRow>& rows,
                const std::vector<Family>& fams) {
  // The y axis: from 0 to a round number above the highest value (tau and speedup: at
  // least the target alone's 1).
  double top = 1.0;
  for (const BenchRow& r : rows) top = std::max(top, m.of(r).mean() + m.of(r).stddev().value_or(0));
  const double step = nice_step(top * 1.1, 5), y_max = std::ceil(top * 1.1 / step) * step;
  const std::vector<std::string> slots = slots_of(rows);
  auto X = [&](const std::string& slot) {
    const size_t i = size_t(std::find(slots.begin(), slots.end(), slot) - slots.begin());
    return x0 + (x1 - x0) * (double(i) + 0.5) / double(slots.size());
  };
  auto Y = [&](double v) { return y1 - (y1 - y0) * std::clamp(v / y_max, 0.0, 1.0); };

  s.rect(x0, y0, x1 - x0, y1 - y0, "fill=\"#ffffff\" stroke=\"#333333\"");
  for (double t = 0; t <= y_max + step * 1e-6; t += step) {
    s.line(x0, Y(t), x1, Y(t), "stroke=\"#e5e5e5\"");
    s.text(x0 - 6, Y(t) + 4, format_number("%g", std::round(t * 1e6) / 1e6), font(11, "end"));
  }
  for (const std::string& slot : slots) s.text(X(slot), y1 + 18, slot, font(11, "middle"));
  s.text((x0 + x1) / 2, y0 - 12, m.title, font(14, "middle") + kBold);
  s.text((x0 + x1) / 2, y1 + 38, "draft budget (tokens per pass)", font(12, "middle"));
  const double lx = x0 - 52, ly = (y0 + y1) / 2;
  s.text(lx, ly, m.y_label, font(12, "middle") + " transform=\"rotate(-90 " + num(lx) + " " + num(ly) + ")\"");

  auto shown = [&](const BenchRow& r) { return !m.drafted_only || r.totals.drafted > 0; };
  for (const Family& f : fams) {  // the references first, under the lines
    const double y = Y(m.of(*f.rows[0]).mean());
    if (f.shape == "target" && shown(*f.rows[0])) polyline(s, m.cls + std::string(" reference"), f, {{x0, y}, {x1, y}});
  }
  for (const Family& f : fams) {
    std::vector<std::pair<double, double>> pts;
    std::vector<const BenchRow*> drawn;
    for (const BenchRow* r : f.rows)
      if (shown(*r)) pts.push_back({X(slot_of(*r)), Y(m.of(*r).mean())}), drawn.push_back(r);
    if ((f.shape == "chain" || f.shape == "tree") && !pts.empty()) polyline(s, m.cls, f, pts);
    for (size_t i = 0; i < pts.size(); ++i) {
      const RepStat v = m.of(*drawn[i]);
      const double sd = v.stddev().value_or(0);
      if (sd > 0) s.error_bar(pts[i].first, Y(v.mean() - sd), Y(v.mean() + sd), f.color);
      s.marker(pts[i].first, pts[i].second, f.color, f.marker);
    }
  }
  if (m.cls == std::string("tps")) {  // each point's spread over its prompts, behind it
    for (const BenchRow& r : rows) {
      double lo = INFINITY, hi = -INFINITY;
      for (const PromptFigures& p : r.per_prompt)
        if (!p.tokens_per_s.values.empty()) lo = std::min(lo, p.tokens_per_s.mean()), hi = std::max(hi, p.tokens_per_s.mean());
      if (lo > hi) continue;
      const double x = X(slot_of(r)) + 6;
      s.add("<g class=\"prompt-spread\" data-config=\"" + escaped(r.config) + "\">");
      s.line(x, Y(lo), x, Y(hi), "stroke=\"#999999\" stroke-dasharray=\"2,2\"");
      s.line(x - 2, Y(lo), x + 2, Y(lo), "stroke=\"#999999\"");
      s.line(x - 2, Y(hi), x + 2, Y(hi), "stroke=\"#999999\"");
      s.add("</g>");
    }
  }
  for (const BenchRow& r : rows) {
    if (!m.mark_fastest || (r.rank != "fastest" && r.rank != "within noise")) continue;
    const bool fastest = r.fastest();
    s.star(X(slot_of(r)), Y(m.of(r).mean()), 9,
           std::string("class=\"") + (fastest ? "fastest" : "within-noise") + "\" data-config=\"" + escaped(r.config) + "\"",
           fastest);
  }
}

// ---- panels over measured axes: acceptance by depth, the economics curve -----------

// A series of an x-y panel: its points in data units, joined or not.
struct XySeries {
  std::string cls, config, color;
  int marker = 0;
  bool joined = true;
  std::vector<std::pair<double, double>> pts;
};

// A panel with numeric axes from 0 (x from x_min) to round numbers above the data; each
// series a polyline (when joined) and markers, classed for readers and tests.
void draw_xy_panel(Svg& s, double x0, double y0, double x1, double y1, const std::string& cls, const std::string& title,
                   const std::string& x_label, const std::string& y_label, const std::vector<XySeries>& series,
                   double x_min, double y_floor_max) {
  double xm = x_min + 1, ym = y_floor_max;
  for (const XySeries& se : series)
    for (const auto& [x, y] : se.pts) xm = std::max(xm, x), ym = std::max(ym, y);
  const double xs = nice_step(xm - x_min, 5), ys = nice_step(ym * 1.05, 5);
  const double x_max = x_min + std::ceil((xm - x_min) / xs) * xs, y_max = std::ceil(ym * 1.05 / ys) * ys;
  auto X = [&](double v) { return x0 + (x1 - x0) * (v - x_min) / (x_max - x_min); };
  auto Y = [&](double v) { return y1 - (y1 - y0) * std::clamp(v / y_max, 0.0, 1.0); };
  s.add("<g class=\"panel " + cls + "\">");
  s.rect(x0, y0, x1 - x0, y1 - y0, "fill=\"#ffffff\" stroke=\"#333333\"");
  for (double t = 0; t <= y_max + ys * 1e-6; t += ys) {
    s.line(x0, Y(t), x1, Y(t), "stroke=\"#e5e5e5\"");
    s.text(x0 - 6, Y(t) + 4, format_number("%g", std::round(t * 1e6) / 1e6), font(11, "end"));
  }
  for (double t = x_min; t <= x_max + xs * 1e-6; t += xs)
    s.text(X(t), y1 + 18, format_number("%g", std::round(t * 1e6) / 1e6), font(11, "middle"));
  s.text((x0 + x1) / 2, y0 - 12, title, font(14, "middle") + kBold);
  s.text((x0 + x1) / 2, y1 + 38, x_label, font(12, "middle"));
  const double lx = x0 - 52, ly = (y0 + y1) / 2;
  s.text(lx, ly, y_label, font(12, "middle") + " transform=\"rotate(-90 " + num(lx) + " " + num(ly) + ")\"");
  for (const XySeries& se : series) {
    const std::string attrs = "class=\"" + se.cls + "\" data-config=\"" + escaped(se.config) + "\"";
    if (se.joined && se.pts.size() > 1) {
      std::string p;
      for (const auto& [x, y] : se.pts) {
        if (!p.empty()) p += ' ';
        p += num(X(x)) + "," + num(Y(y));
      }
      s.add("<polyline " + attrs + " fill=\"none\" stroke=\"" + se.color + "\" stroke-width=\"1.5\" points=\"" + p + "\"/>");
    }
    for (const auto& [x, y] : se.pts) s.marker(X(x), Y(y), se.color, se.marker, attrs);
  }
  s.add("</g>");
}

// Acceptance rate at each depth of the draft (1 = the root's children), one line per
// configuration that drafted.
std::vector<XySeries> depth_series(const std::vector<Family>& fams) {
  std::vector<XySeries> out;
  for (const Family& f : fams)
    for (const BenchRow* r : f.rows) {
      const std::vector<double> rate = r->totals.accept_rate_by_depth();
      if (r->totals.drafted == 0 || rate.empty()) continue;
      XySeries se{"depth-series", r->config, f.color, f.marker, true, {}};
      for (size_t d = 0; d < rate.size(); ++d) se.pts.push_back({double(d + 1), rate[d]});
      out.push_back(se);
    }
  return out;
}

// Tokens per pass against rows verified per pass: each family's budgets joined in order
// (the curve --tree auto chooses its operating points on), the target alone at (1, 1),
// --tree auto as a diamond at the rows it actually verified.
std::vector<XySeries> economics_series(const std::vector<Family>& fams) {
  std::vector<XySeries> out;
  for (const Family& f : fams) {
    if (f.shape == "tree-auto") {
      for (const BenchRow* r : f.rows)
        out.push_back({"auto-point", r->config, f.color, 3, false, {{r->rows_per_pass(), r->totals.tau()}}});
      continue;
    }
    XySeries se{f.shape == "target" ? "economics-target" : "economics-series", f.rows[0]->config, f.color, f.marker,
                true, {}};
    for (const BenchRow* r : f.rows) se.pts.push_back({r->rows_per_pass(), r->totals.tau()});
    out.push_back(se);
  }
  return out;
}

// ---- header and legend -----------------------------------------------------------------

void draw_header(Svg& s, const std::vector<BenchRow>& rows, const BenchMeta& m, const Varying& v) {
  auto file = [](const std::string& p) { return std::filesystem::path(p).filename().string(); };
  std::string draft;
  for (const std::string& d : m.drafts) draft += (draft.empty() ? " + draft " : ", ") + file(d);
  s.text(kWidth / 2, 30, "flashspec bench: " + file(m.target_path) + draft, font(18, "middle") + kBold);
  std::string run = std::to_string(m.prompts) + " prompts × " + std::to_string(m.reps) +
                    (m.reps == 1 ? " repetition" : " repetitions") + ", n=" + std::to_string(m.n_predict) + ", KV " +
                    m.kv_type;
  if (!rows.empty() && !v.temp) run += ", T=" + format_number("%g", rows[0].temp);
  if (!rows.empty() && !v.placement) run += ", target " + rows[0].placement_label();
  s.text(kWidth / 2, 52, run, font(13, "middle"));
  s.text(kWidth / 2, 70, m.backend + " on " + m.cpu + ", commit " + m.commit, font(12, "middle") + " fill=\"#555555\"");
}

// The families, the star and (with repetitions) the error bars, in two columns; returns
// the y below the legend.
double draw_legend(Svg& s, double y0, const std::vector<Family>& fams, const BenchMeta& m) {
  int n = 0;
  s.add("<g class=\"legend\">");
  auto entry = [&](const std::string& text) {  // writes the words; returns where the symbol goes
    const double x = kLeft + (n % 2) * (kWidth - kLeft) / 2, y = y0 + (n / 2) * 20;
    ++n;
    s.text(x + 36, y, text, font(12));
    return std::pair{x + 14, y - 4};
  };
  for (const Family& f : fams) {
    const auto [x, y] = entry(f.name);
    if (f.shape != "tree-auto") s.line(x - 14, y, x + 14, y, f.stroke(2));
    s.marker(x, y, f.color, f.marker);
  }
  const auto [sx, sy] = entry("fastest (tokens/s) at its temperature and placement: 95% intervals apart");
  s.star(sx, sy, 8, "class=\"legend-star\"");
  const auto [nx, ny] = entry("within noise of the fastest (95% intervals overlap)");
  s.star(nx, ny, 8, "class=\"legend-within-noise\"", false);
  const auto [px, py] = entry("spread of tokens/s over the prompts (lowest to highest prompt)");
  s.line(px, py - 7, px, py + 7, "stroke=\"#999999\" stroke-dasharray=\"2,2\"");
  if (m.reps > 1) {
    const auto [ex, ey] = entry("error bars: one sample stddev over " + std::to_string(m.reps) + " repetitions");
    s.error_bar(ex, ey + 7, ey - 7, "#333333");
  }
  if (std::any_of(fams.begin(), fams.end(), [](const Family& f) { return f.shape == "tree-auto"; })) {
    const auto [ax, ay] = entry("tree auto in tokens per pass vs rows: a diamond at the rows it verified");
    s.marker(ax, ay, "#444444", 3);
  }
  s.add("</g>");
  return y0 + ((n + 1) / 2) * 20;
}

// ---- the pass breakdown ----------------------------------------------------------------

// The parts of a decode pass, in the order they stack.
struct Part {
  const char *color, *legend, *name;  // name: in the figures beside a bar
  double PassBreakdown::*ms;
};
const Part kParts[] = {{"#b07aa1", "draft (incl. waiting for pre-growing)", "draft", &PassBreakdown::draft},
                       {"#4e79a7", "verify compute", "verify", &PassBreakdown::compute},
                       {"#f28e2b", "I/O wait (streamed weights)", "I/O", &PassBreakdown::io_wait},
                       {"#c7c7c7", "other (sampling, acceptance)", "other", &PassBreakdown::other}};

// Milliseconds with two or three significant digits (%g would write 1.2e+02).
std::string format_ms(double ms) {
  return format_number(ms >= 100 ? "%.0f" : ms >= 10 ? "%.1f" : ms >= 1 ? "%.2f" : "%.2g", ms);
}

// The figures beside a bar, so that short bars can be read: "2.40 ms/pass = draft 0.30 +
// verify 2.10; tau 2.49, 1066 tok/s" (parts under 1% of the pass left out).
std::string bar_note(const BenchRow& r, const PassBreakdown& b) {
  std::string parts;
  for (const Part& p : kParts)
    if (b.*p.ms >= 0.01 * b.total())
      parts += (parts.empty() ? " = " : " + ") + std::string(p.name) + " " + format_ms(b.*p.ms);
  return format_ms(b.total()) + " ms/pass" + parts + "; tau " + format_number("%.2f", r.totals.tau()) + ", " +
         format_number("%.0f", r.tokens_per_s.mean()) + " tok/s";
}

// A bar per configuration, under a heading per group when there are several; returns the
// y below the panel.
double draw_breakdown(Svg& s, double y0, const std::vector<BenchRow>& rows, const Varying& v) {
  constexpr double kBar0 = 240, kBar1 = 760, kHeight = 14, kPitch = 22;
  s.text(kLeft, y0, "Where a decode pass goes (mean per configuration)", font(14) + kBold);
  double lx = kLeft;
  for (const Part& p : kParts) {
    s.rect(lx, y0 + 14, 12, 12, "fill=\"" + std::string(p.color) + "\"");
    s.text(lx + 17, y0 + 24, p.legend, font(12));
    lx += 41 + 7.0 * double(std::strlen(p.legend));
  }
  std::vector<const BenchRow*> lines;  // nullptr: the heading of the next row's group
  for (const BenchRow& r : rows) {
    if (!v.of(r).empty() && (lines.empty() || !r.same_group(*lines.back()))) lines.push_back(nullptr);
    lines.push_back(&r);
  }
  double ms_max = 0;
  for (const BenchRow& r : rows) ms_max = std::max(ms_max, r.per_pass().total());
  const double step = nice_step(ms_max > 0 ? ms_max : 1, 8);
  ms_max = std::max(step, std::ceil(ms_max / step) * step);
  auto X = [&](double ms) { return kBar0 + (kBar1 - kBar0) * ms / ms_max; };
  const double top = y0 + 44, bottom = top + kPitch * double(lines.size());
  for (double t = 0; t <= ms_max + step * 1e-6; t += step) {  // grid behind the bars, ticks below
    s.line(X(t), top - 4, X(t), bottom + 5, "stroke=\"#e5e5e5\"");
    s.text(X(t), bottom + 18, format_number("%g", std::round(t * 1e6) / 1e6), font(11, "middle"));
  }
  s.line(kBar0, bottom, kBar1, bottom, "stroke=\"#333333\"");
  s.text((kBar0 + kBar1) / 2, bottom + 36, "ms per decode pass (mean over the passes after the prefill)",
         font(12, "middle"));
  for (size_t i = 0; i < lines.size(); ++i) {
    const double y = top + kPitch * double(i);
    const BenchRow& r = *(lines[i] ? lines[i] : lines[i + 1]);
    if (!lines[i]) {
      s.text(24, y + kHeight - 2, v.of(r), font(12) + kBold);
      continue;
    }
    const PassBreakdown b = r.per_pass();
    s.add("<g class=\"pass-bar\" data-config=\"" + escaped(r.config) + "\">");
    double at = 0;  // where the next part starts, ms
    for (const Part& p : kParts) {
      if (b.*p.ms > 0) s.rect(X(at), y, X(at + b.*p.ms) - X(at), kHeight, "fill=\"" + std::string(p.color) + "\"");
      at += std::max(0.0, b.*p.ms);
    }
    s.add("</g>");
    s.text(kBar0 - 8, y + kHeight - 3, r.config, font(12, "end"));
    if (r.fastest()) s.star(150, y + kHeight / 2, 7, "class=\"fastest-bar\"");
    s.text(kBar1 + 12, y + kHeight - 3, bar_note(r, b), font(11) + " fill=\"#333333\"");
  }
  return bottom + 50;
}

}  // namespace

std::string bench_svg(const std::vector<BenchRow>& rows, const BenchMeta& m) {
  const Varying v(rows);
  const std::vector<Family> fams = families_of(rows, v);
  Svg body;
  draw_header(body, rows, m, v);
  // Two rows of three panels, 80 px apart for the next panel's y-axis words: tau, tokens/s
  // and speedup against the budget; acceptance against the budget, acceptance by depth and
  // tokens per pass against rows verified.
  auto x0_of = [](int i) { return kLeft + i * (336 + 80); };
  for (int i = 0; i < 3; ++i) draw_panel(body, x0_of(i), 120, x0_of(i) + 336, 380, kMetrics[i], rows, fams);
  draw_panel(body, x0_of(0), 470, x0_of(0) + 336, 730, kMetrics[3], rows, fams);
  draw_xy_panel(body, x0_of(1), 470, x0_of(1) + 336, 730, "by-depth", "acceptance by draft depth", "depth (1: the root's children)",
                "acceptance at that depth", depth_series(fams), 0, 1.0);
  draw_xy_panel(body, x0_of(2), 470, x0_of(2) + 336, 730, "economics", "tokens per pass vs rows verified",
                "rows verified per pass (mean)", "tokens per target pass (tau)", economics_series(fams), 0, 1.0);
  const double height = draw_breakdown(body, draw_legend(body, 802, fams, m) + 30, rows, v);
  const std::string w = format_number("%.0f", kWidth), h = format_number("%.0f", height);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w +
         " " + h + "\" font-family=\"Helvetica, Arial, sans-serif\">\n" +
         "<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\n" + body.out + "</svg>\n";
}

}  // namespace flashspec
