#include "apps/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace flashspec {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

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

std::string join_rates(const std::vector<double>& v) {
  std::string o;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ';';
    o += fmt("%.4f", v[i]);
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

const char* const kPalette[] = {"#444444", "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};

struct Panel {
  double x0, y0, x1, y1;  // plot area
};

class Svg {
 public:
  void add(const std::string& s) { out_ += s; out_ += '\n'; }
  void text(double x, double y, const std::string& s, const char* extra = "") {
    add("<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", y) + "\" " + extra + ">" + xml_escape(s) +
        "</text>");
  }
  void line(double x0, double y0, double x1, double y1, const char* style) {
    add("<line x1=\"" + fmt("%.1f", x0) + "\" y1=\"" + fmt("%.1f", y0) + "\" x2=\"" + fmt("%.1f", x1) +
        "\" y2=\"" + fmt("%.1f", y1) + "\" " + style + "/>");
  }
  std::string str() const { return out_; }

 private:
  std::string out_;
};

// A y axis: linear from 0, or log10 when the values span more than a factor of 20
// (tokens/s with and without a bandwidth cap differ by orders of magnitude).
struct YAxis {
  bool log = false;
  double max = 1, step = 1;   // linear
  double lo = 0, hi = 1;      // log: decades
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
  // Fraction of the height (0 bottom, 1 top).
  double frac(double v) const {
    if (!log) return v / max;
    return v > 0 ? (std::log10(v) - lo) / (hi - lo) : 0.0;
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (!log) {
      for (double v = 0; v <= max + step * 1e-6; v += step) t.push_back(std::round(v * 1e6) / 1e6);
      return t;
    }
    for (double d = lo; d <= hi; ++d)
      for (double m : {1.0, 2.0, 5.0})
        if (d < hi || m == 1.0)
          if (m == 1.0 || hi - lo <= 3) t.push_back(m * std::pow(10.0, d));
    return t;
  }
};

// Frame, y grid/ticks and the axis titles of one panel.
void draw_axes(Svg& s, const Panel& p, const YAxis& ya, const std::string& title, const std::string& x_label,
               const std::string& y_label) {
  s.add("<rect x=\"" + fmt("%.1f", p.x0) + "\" y=\"" + fmt("%.1f", p.y0) + "\" width=\"" +
        fmt("%.1f", p.x1 - p.x0) + "\" height=\"" + fmt("%.1f", p.y1 - p.y0) +
        "\" fill=\"#ffffff\" stroke=\"#333333\"/>");
  for (double v : ya.ticks()) {
    const double y = p.y1 - (p.y1 - p.y0) * ya.frac(v);
    s.line(p.x0, y, p.x1, y, "stroke=\"#e5e5e5\"");
    s.line(p.x0 - 5, y, p.x0, y, "stroke=\"#333333\"");
    s.text(p.x0 - 8, y + 4, fmt("%g", v), "text-anchor=\"end\" font-size=\"11\"");
  }
  s.text((p.x0 + p.x1) / 2, p.y0 - 14, title, "text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\"");
  s.text((p.x0 + p.x1) / 2, p.y1 + 40, x_label, "text-anchor=\"middle\" font-size=\"12\"");
  const double ly = (p.y0 + p.y1) / 2, lx = p.x0 - 50;
  s.text(lx, ly, y_label + (ya.log ? " (log scale)" : ""),
         ("text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 " + fmt("%.1f", lx) + " " +
          fmt("%.1f", ly) + ")\"")
             .c_str());
}

void draw_series(Svg& s, const char* cls, const std::string& family, const std::string& color,
                 const std::vector<std::pair<double, double>>& pts, const std::vector<std::string>& labels) {
  std::string pl = "<polyline class=\"series " + std::string(cls) + "\" data-family=\"" + xml_escape(family) +
                   "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"" +
                   (family.rfind("target", 0) == 0 ? " stroke-dasharray=\"6 3\"" : "") + " points=\"";
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i) pl += ' ';
    pl += fmt("%.1f", pts[i].first) + "," + fmt("%.1f", pts[i].second);
  }
  s.add(pl + "\"/>");
  for (size_t i = 0; i < pts.size(); ++i) {
    s.add("<circle cx=\"" + fmt("%.1f", pts[i].first) + "\" cy=\"" + fmt("%.1f", pts[i].second) +
          "\" r=\"3.5\" fill=\"" + color + "\"/>");
    if (i < labels.size() && !labels[i].empty())
      s.text(pts[i].first + 5, pts[i].second - 6, labels[i],
             ("font-size=\"10\" fill=\"" + color + "\"").c_str());
  }
}

}  // namespace

std::vector<double> BenchRow::accept_by_depth() const {
  std::vector<double> r;
  for (size_t d = 0; d < drafted_by_depth.size(); ++d)
    r.push_back(drafted_by_depth[d] ? double(accepted_by_depth[d]) / double(drafted_by_depth[d]) : 0.0);
  return r;
}

std::string BenchRow::family() const { return shape + " T=" + fmt("%g", temp); }

std::string BenchRow::bandwidth_label() const { return io_bw_bytes > 0 ? io_bw : "unthrottled"; }

std::string bench_json_line(const BenchRow& r) {
  return nlohmann::json{{"config", r.config},
                        {"shape", r.shape},
                        {"budget", r.budget},
                        {"temp", r.temp},
                        {"io_bw", r.io_bw},
                        {"io_bw_bytes", r.io_bw_bytes},
                        {"prompts", r.prompts},
                        {"n_predict", r.n_predict},
                        {"prompt_tokens", r.prompt_tokens},
                        {"generated", r.generated},
                        {"target_passes", r.target_passes},
                        {"tau", r.tau()},
                        {"drafted", r.drafted},
                        {"accepted", r.accepted},
                        {"accept_by_depth", r.accept_by_depth()},
                        {"drafted_by_depth", r.drafted_by_depth},
                        {"accepted_by_depth", r.accepted_by_depth},
                        {"tokens_per_s", r.tokens_per_s()},
                        {"ttft_ms", r.ttft_ms},
                        {"tpot_ms", r.tpot_ms},
                        {"prefill_ms", r.prefill_ms},
                        {"decode_ms", r.decode_ms},
                        {"bytes_read", r.bytes_read},
                        {"read_gbps", r.read_gbps()},
                        {"io_busy", r.io_busy()},
                        {"io_wait_ms", r.io_wait_ms},
                        {"speedup", r.speedup}}
      .dump();
}

std::string bench_csv(const std::vector<BenchRow>& rows) {
  std::string o =
      "config,shape,budget,temp,io_bw,io_bw_bytes,prompts,n_predict,prompt_tokens,generated,target_passes,"
      "tau,drafted,accepted,accept_by_depth,tokens_per_s,ttft_ms,tpot_ms,bytes_read,read_gbps,io_busy,"
      "speedup\n";
  for (const BenchRow& r : rows) {
    o += r.config + "," + r.shape + "," + std::to_string(r.budget) + "," + fmt("%g", r.temp) + "," + r.io_bw +
         "," + fmt("%.0f", r.io_bw_bytes) + "," + std::to_string(r.prompts) + "," + std::to_string(r.n_predict) +
         "," + std::to_string(r.prompt_tokens) + "," + std::to_string(r.generated) + "," +
         std::to_string(r.target_passes) + "," + fmt("%.4f", r.tau()) + "," + std::to_string(r.drafted) + "," +
         std::to_string(r.accepted) + "," + join_rates(r.accept_by_depth()) + "," +
         fmt("%.2f", r.tokens_per_s()) + "," + fmt("%.3f", r.ttft_ms) + "," + fmt("%.4f", r.tpot_ms) + "," +
         std::to_string(r.bytes_read) + "," + fmt("%.4f", r.read_gbps()) + "," + fmt("%.4f", r.io_busy()) +
         "," + fmt("%.4f", r.speedup) + "\n";
  }
  return o;
}

std::string bench_svg(const std::vector<BenchRow>& rows, const std::string& subtitle) {
  // Families in first-seen order; colours are shared by both panels.
  std::vector<std::string> families;
  for (const BenchRow& r : rows)
    if (std::find(families.begin(), families.end(), r.family()) == families.end()) families.push_back(r.family());
  auto color = [&](const std::string& f) {
    const size_t i = size_t(std::find(families.begin(), families.end(), f) - families.begin());
    return std::string(kPalette[i % (sizeof kPalette / sizeof *kPalette)]);
  };
  // Bandwidths: throttled ones by rate, unthrottled last.
  std::vector<std::pair<double, std::string>> bws;
  for (const BenchRow& r : rows) {
    const std::pair<double, std::string> k{r.io_bw_bytes > 0 ? r.io_bw_bytes : INFINITY, r.bandwidth_label()};
    if (std::find(bws.begin(), bws.end(), k) == bws.end()) bws.push_back(k);
  }
  std::sort(bws.begin(), bws.end());

  const double W = 1000;
  const size_t legend_rows = (families.size() + 1) / 2;
  const double legend_y = 440;
  const double H = legend_y + 20 + double(legend_rows) * 18 + 10;
  Svg s;
  s.add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", W) + "\" height=\"" + fmt("%.0f", H) +
        "\" viewBox=\"0 0 " + fmt("%.0f", W) + " " + fmt("%.0f", H) +
        "\" font-family=\"Helvetica, Arial, sans-serif\">");
  s.add("<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>");
  s.text(W / 2, 24, "flashspec bench: " + subtitle, "text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\"");

  // ---- panel 1: tau vs draft budget (rows at the first bandwidth: tau does not depend on it)
  {
    const Panel p{80, 70, 470, 380};
    const std::string bw0 = rows.empty() ? "0" : rows.front().io_bw;
    std::map<std::string, std::vector<const BenchRow*>> fam;
    double lo = INFINITY, hi = -INFINITY, tau_max = 1.0;
    for (const BenchRow& r : rows) {
      if (r.io_bw != bw0 || r.budget <= 0 || (r.shape != "chain" && r.shape != "tree")) continue;
      fam[r.family()].push_back(&r);
      lo = std::min(lo, std::log2(double(r.budget)));
      hi = std::max(hi, std::log2(double(r.budget)));
      tau_max = std::max(tau_max, r.tau());
    }
    if (!(lo <= hi)) lo = 0, hi = 1;
    lo = std::floor(lo);
    hi = std::ceil(hi);
    if (hi - lo < 1) lo -= 1, hi += 1;
    const YAxis ya = YAxis::for_values({tau_max}, false);
    draw_axes(s, p, ya, "tau vs draft budget", "draft budget (tokens per pass, log2 scale)",
              "tau (tokens per target pass)");
    auto X = [&](double budget) { return p.x0 + 10 + (p.x1 - p.x0 - 20) * (std::log2(budget) - lo) / (hi - lo); };
    auto Y = [&](double v) { return p.y1 - (p.y1 - p.y0) * ya.frac(v); };
    const int every = hi - lo > 10 ? 2 : 1;
    for (int k = int(lo); k <= int(hi); k += every) {
      const double x = X(std::ldexp(1.0, k));
      s.line(x, p.y1, x, p.y1 + 5, "stroke=\"#333333\"");
      s.text(x, p.y1 + 18, fmt("%.0f", std::ldexp(1.0, k)), "text-anchor=\"middle\" font-size=\"11\"");
    }
    s.line(p.x0, Y(1), p.x1, Y(1), "stroke=\"#444444\" stroke-dasharray=\"6 4\"");
    s.text(p.x1 - 4, Y(1) - 5, "target-only (tau = 1)", "text-anchor=\"end\" font-size=\"10\" fill=\"#444444\"");
    for (const std::string& f : families) {
      auto it = fam.find(f);
      if (it == fam.end()) continue;
      std::vector<const BenchRow*> v = it->second;
      std::sort(v.begin(), v.end(), [](const BenchRow* a, const BenchRow* b) { return a->budget < b->budget; });
      std::vector<std::pair<double, double>> pts;
      for (const BenchRow* r : v) pts.push_back({X(double(r->budget)), Y(r->tau())});
      draw_series(s, "tau", f, color(f), pts, {});
    }
  }

  // ---- panel 2: tokens/s vs bandwidth (best budget of each family at each bandwidth)
  {
    const Panel p{580, 70, 970, 380};
    std::vector<double> tps;
    for (const BenchRow& r : rows) tps.push_back(r.tokens_per_s());
    const YAxis ya = YAxis::for_values(tps, true);
    draw_axes(s, p, ya, "tokens/s vs storage bandwidth", "storage bandwidth (--io-bw, bytes/s)",
              "tokens/s (decode)");
    const double slot = (p.x1 - p.x0) / double(std::max<size_t>(bws.size(), 1));
    auto Y = [&](double v) { return p.y1 - (p.y1 - p.y0) * ya.frac(v); };
    for (size_t i = 0; i < bws.size(); ++i) {
      const double x = p.x0 + slot * (double(i) + 0.5);
      s.line(x, p.y1, x, p.y1 + 5, "stroke=\"#333333\"");
      s.text(x, p.y1 + 18, bws[i].second, "text-anchor=\"middle\" font-size=\"11\"");
    }
    for (const std::string& f : families) {
      std::vector<std::pair<double, double>> pts;
      std::vector<std::string> labels;
      for (size_t i = 0; i < bws.size(); ++i) {
        const BenchRow* best = nullptr;
        for (const BenchRow& r : rows)
          if (r.family() == f && r.bandwidth_label() == bws[i].second &&
              (!best || r.tokens_per_s() > best->tokens_per_s()))
            best = &r;
        if (!best) continue;
        pts.push_back({p.x0 + slot * (double(i) + 0.5), Y(best->tokens_per_s())});
        labels.push_back(best->shape == "chain"  ? "K=" + std::to_string(best->budget)
                         : best->shape == "tree" ? "B=" + std::to_string(best->budget)
                                                 : "");
      }
      if (!pts.empty()) draw_series(s, "tps", f, color(f), pts, labels);
    }
  }

  // ---- legend (shared)
  s.text(80, legend_y, "Legend (line colour = family; points in the right panel show the best budget):",
         "font-size=\"12\"");
  for (size_t i = 0; i < families.size(); ++i) {
    const double x = 80 + double(i % 2) * 450, y = legend_y + 20 + double(i / 2) * 18;
    const std::string c = color(families[i]);
    const std::string dash = families[i].rfind("target", 0) == 0 ? " stroke-dasharray=\"6 3\"" : "";
    s.line(x, y - 4, x + 28, y - 4, ("stroke=\"" + c + "\" stroke-width=\"2\"" + dash).c_str());
    s.add("<circle cx=\"" + fmt("%.1f", x + 14) + "\" cy=\"" + fmt("%.1f", y - 4) + "\" r=\"3.5\" fill=\"" + c +
          "\"/>");
    const std::string& f = families[i];
    std::string desc = f;
    if (f.rfind("target", 0) == 0) desc += " (no draft, speedup reference)";
    else if (f.rfind("chain", 0) == 0) desc += " (draft chain of K tokens)";
    else if (f.rfind("tree-auto", 0) == 0) desc += " (adaptive tree budget)";
    else desc += " (draft tree of B tokens)";
    s.text(x + 36, y, desc, "font-size=\"12\"");
  }
  s.add("</svg>");
  return s.str();
}

std::string bench_table(const std::vector<BenchRow>& rows) {
  const std::vector<std::string> head = {"config", "temp",    "io-bw",   "tau",     "drafted", "accepted",
                                         "tok/s",  "TTFT ms", "TPOT ms", "read MB", "read GB/s", "speedup"};
  std::vector<std::vector<std::string>> cells;
  for (const BenchRow& r : rows) {
    cells.push_back({r.config, fmt("%g", r.temp), r.bandwidth_label(), fmt("%.2f", r.tau()),
                     std::to_string(r.drafted), std::to_string(r.accepted), fmt("%.1f", r.tokens_per_s()),
                     fmt("%.2f", r.ttft_ms), fmt("%.3f", r.tpot_ms), fmt("%.1f", double(r.bytes_read) / 1e6),
                     fmt("%.2f", r.read_gbps()), fmt("%.2fx", r.speedup)});
  }
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = head[c].size();
    for (const auto& row : cells) w[c] = std::max(w[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& v) {
    std::string o;
    for (size_t c = 0; c < v.size(); ++c) {
      const std::string pad(w[c] - v[c].size(), ' ');
      if (c) o += "  ";
      o += c < 3 ? v[c] + pad : pad + v[c];  // text columns left, numbers right
    }
    while (!o.empty() && o.back() == ' ') o.pop_back();
    return o + "\n";
  };
  std::string o = line(head);
  size_t total = 0;
  for (size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
  o += std::string(total, '-') + "\n";
  for (const auto& row : cells) o += line(row);
  return o;
}

}  // namespace flashspec
