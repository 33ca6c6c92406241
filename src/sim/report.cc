#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "common/units.h"

namespace meridian::sim {
namespace {

nlohmann::json PercentilesJson(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p99", p.p99}, {"max", p.max}};
}

// One colour per policy, the same in every report whatever the order compared
// (colour-blind-safe where the palette allows); a policy not listed gets one from
// the rest by its name.
std::string PolicyColour(std::string_view policy) {
  static const std::pair<std::string_view, const char*> kKnown[] = {
      {"meridian", "#0072b2"},  {"agnostic", "#d55e00"}, {"best-fit", "#009e73"},       {"frag-aware", "#cc79a7"},
      {"first-fit", "#e69f00"}, {"random", "#56b4e9"},   {"cheapest-region", "#6b4c2a"},
  };
  for (const auto& [name, colour] : kKnown) {
    if (name == policy) return colour;
  }
  static const char* kOthers[] = {"#444444", "#882255", "#117733", "#999933", "#332288", "#aa4499"};
  uint32_t h = 2166136261u;  // FNV-1a: stable across runs and builds
  for (char c : policy) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return kOthers[h % (sizeof(kOthers) / sizeof(kOthers[0]))];
}

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Seconds(double s) {
  return s <= 0 ? std::string("0 s") : FormatDurationUs(static_cast<int64_t>(s * kSecondUs));
}

// A chart's size: the plot's margins leave room for the axis labels (the last x label
// is centred on the right edge, so the right margin holds half of the widest).
constexpr double kW = 760, kPlotH = 260, kLeft = 60, kRight = 56, kBottom = 40, kLegendRow = 18;

// The legend, above the plot: entries laid out left to right, wrapping to new rows,
// each as wide as its name (7 px a character at 12 px is generous). Returns the SVG
// and sets `height`.
std::string Legend(const std::vector<SimResult>& results, double& height) {
  std::string out;
  double x = kLeft, row = 0;
  for (const SimResult& r : results) {
    const double w = 28 + 7.0 * static_cast<double>(r.policy.size());
    if (x > kLeft && x + w > kW - kRight) {
      x = kLeft;
      ++row;
    }
    out += fmt::format("<text x='{}' y='{}' fill='{}' font-size='12'>&#9632; {}</text>", x, 14 + kLegendRow * row,
                       PolicyColour(r.policy), Escape(r.policy));
    x += w;
  }
  height = kLegendRow * (row + 1) + 8;
  return out;
}

// The opening of a chart's SVG, its legend inside; `top` is where the plot starts.
std::string ChartStart(const std::vector<SimResult>& results, double& top, double& height) {
  double legend_h = 0;
  std::string legend = Legend(results, legend_h);
  top = legend_h + 6;
  height = top + kPlotH + kBottom;
  return fmt::format("<svg viewBox='0 0 {0} {1}' width='{0}' height='{1}' role='img'>", kW, height) + legend;
}

// JCT distribution: x = JCT on a log scale, y = fraction of finished jobs.
std::string JctChart(const std::vector<SimResult>& results) {
  double lo = 1e300, hi = 0;
  for (const SimResult& r : results) {
    for (double v : r.jct_quantiles_s) {
      lo = std::min(lo, std::max(v, 1.0));
      hi = std::max(hi, v);
    }
  }
  if (hi <= 0) return "<p>No job finished.</p>";
  lo = std::pow(10, std::floor(std::log10(lo)));
  hi = std::pow(10, std::ceil(std::log10(std::max(hi, lo * 10))));
  auto x = [&](double v) {
    return kLeft + (std::log10(std::max(v, lo)) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) *
                       (kW - kLeft - kRight);
  };
  double top = 0, height = 0;
  std::string svg = ChartStart(results, top, height);
  auto y = [&](double f) { return top + (1 - f) * (height - top - kBottom); };
  for (double d = lo; d <= hi * 1.001; d *= 10) {
    svg += fmt::format("<line x1='{0}' x2='{0}' y1='{1}' y2='{2}' stroke='#ddd'/><text x='{0}' y='{3}' "
                       "font-size='11' text-anchor='middle'>{4}</text>",
                       x(d), top, height - kBottom, height - kBottom + 16, Escape(Seconds(d)));
  }
  for (int f = 0; f <= 4; ++f) {
    svg += fmt::format("<line x1='{0}' x2='{1}' y1='{2}' y2='{2}' stroke='#ddd'/><text x='{3}' y='{4}' "
                       "font-size='11' text-anchor='end'>{5}%</text>",
                       kLeft, kW - kRight, y(f / 4.0), kLeft - 6, y(f / 4.0) + 4, f * 25);
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& q = results[i].jct_quantiles_s;
    if (q.empty()) continue;
    std::string points;
    for (size_t k = 0; k < q.size(); ++k) points += fmt::format("{:.1f},{:.1f} ", x(q[k]), y(k / 100.0));
    svg += fmt::format("<polyline fill='none' stroke='{}' stroke-width='2' points='{}'/>", PolicyColour(results[i].policy), points);
  }
  svg += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>job completion time (log scale)</text>",
                     (kW + kLeft) / 2, height - 4);
  svg += "</svg>";
  return svg;
}

// A line per policy of a [0, 1] series over x.
template <typename Series, typename XLabel>
std::string LineChart(const std::vector<SimResult>& results, Series series, XLabel x_label, const char* title) {
  double t0 = 1e300, t1 = 0;
  for (const SimResult& r : results) {
    for (const SeriesPoint& p : series(r)) {
      t0 = std::min(t0, p.t_s);
      t1 = std::max(t1, p.t_s);
    }
  }
  if (t1 <= t0) return "<p>Nothing recorded.</p>";
  auto x = [&](double t) { return kLeft + (t - t0) / (t1 - t0) * (kW - kLeft - kRight); };
  double top = 0, height = 0;
  std::string svg = ChartStart(results, top, height);
  auto y = [&](double f) { return top + (1 - std::clamp(f, 0.0, 1.0)) * (height - top - kBottom); };
  for (int f = 0; f <= 4; ++f) {
    svg += fmt::format("<line x1='{0}' x2='{1}' y1='{2}' y2='{2}' stroke='#ddd'/><text x='{3}' y='{4}' "
                       "font-size='11' text-anchor='end'>{5}%</text>",
                       kLeft, kW - kRight, y(f / 4.0), kLeft - 6, y(f / 4.0) + 4, f * 25);
  }
  for (int k = 0; k <= 4; ++k) {
    double t = t0 + (t1 - t0) * k / 4;
    svg += fmt::format("<text x='{}' y='{}' font-size='11' text-anchor='middle'>{}</text>", x(t), height - kBottom + 16,
                       Escape(x_label(t, t0)));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    std::string points;
    for (const SeriesPoint& p : series(results[i])) points += fmt::format("{:.1f},{:.1f} ", x(p.t_s), y(p.value));
    svg += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.5' points='{}'/>", PolicyColour(results[i].policy), points);
  }
  svg += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>{}</text>", (kW + kLeft) / 2, height - 4,
                     title);
  svg += "</svg>";
  return svg;
}

std::string UtilisationChart(const std::vector<SimResult>& results) {
  return LineChart(
      results, [](const SimResult& r) -> const std::vector<SeriesPoint>& { return r.utilisation; },
      [](double t, double t0) { return Seconds(t - t0); }, "time since the first arrival");
}

std::string FillChart(const std::vector<SimResult>& results) {
  return LineChart(
      results, [](const SimResult& r) -> const std::vector<SeriesPoint>& { return r.fill_curve; },
      [](double x, double) { return fmt::format("{:.0f}%", 100 * x); }, "GPU demand arrived, share of capacity");
}

// The page around a body: self-contained, no scripts.
std::string Page(const std::string& title, const std::string& body) {
  return fmt::format(R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{0}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 64em; }}
table {{ border-collapse: collapse; font-size: 14px; margin-bottom: 1em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: right; }}
td {{ white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; }}
</style></head><body>
<h1>{0}</h1>
{1}</body></html>
)",
                     Escape(title), body);
}

}  // namespace

nlohmann::json ResultToJson(const SimResult& r, bool timing) {
  nlohmann::json links = nlohmann::json::object();
  for (const auto& [k, v] : r.wan_bytes) links[k] = v;
  nlohmann::json j = {
      {"policy", r.policy},
      {"trace", r.trace},
      {"seed", r.seed},
      {"nodes", r.nodes},
      {"gpus", r.gpus},
      {"jobs", r.jobs},
      {"tasks", r.tasks},
      {"finished_jobs", r.finished_jobs},
      {"infeasible_jobs", r.infeasible_jobs},
      {"failed_jobs", r.failed_jobs},
      {"unfinished_jobs", r.unfinished_jobs},
      {"jct_s", PercentilesJson(r.jct)},
      {"queueing_s", PercentilesJson(r.queueing)},
      {"makespan_s", r.makespan_s},
      {"gpu_utilisation", r.gpu_utilisation},
      {"unusable_gpus_while_waiting", r.unusable_gpus_while_waiting},
      {"free_gpus_while_waiting", r.free_gpus_while_waiting},
      {"gpu_waiting_s", r.gpu_waiting_s},
      {"compute_cost_usd", static_cast<double>(r.compute_cost_micro_usd) / 1e6},
      {"egress_cost_usd", static_cast<double>(r.egress_cost_micro_usd) / 1e6},
      {"wan_bytes", links},
      {"node_failures", r.node_failures},
      {"preemptions", r.preemptions},
      {"task_restarts", r.task_restarts},
      {"reasons", r.infeasible_reasons},
  };
  if (!r.fill_curve.empty()) {
    j["fill"] = {{"rejected_jobs", r.rejected_jobs},
                 {"unallocated_gpus_at_full", r.unallocated_gpus_at_full},
                 {"unallocated_gpus_end", r.unallocated_gpus_end}};
  }
  if (timing) {
    j["timing"] = {{"wall_s", r.wall_s},
                   {"sched_calls", r.sched_calls},
                   {"sched_decisions", r.sched_decisions},
                   {"sched_total_s", r.sched_total_s},
                   {"sched_call_p50_us", r.sched_call_p50_us},
                   {"sched_call_p99_us", r.sched_call_p99_us}};
  }
  return j;
}

std::string OutcomesCsv(const SimResult& r) {
  std::string out = "job,arrival_s,start_s,finish_s,jct_s,outcome,restarts,cost_usd,sites,device_types,reason\n";
  for (const JobOutcome& o : r.outcomes) {
    auto t = [](int64_t us) { return us < 0 ? std::string() : fmt::format("{:.3f}", static_cast<double>(us) / kSecondUs); };
    std::string outcome = o.infeasible ? "infeasible"
                          : o.failed   ? "failed"
                          : o.rejected ? "turned-away"
                          : o.finish_us >= 0 ? "finished"
                                             : "unfinished";
    std::string reason = o.reason;
    std::replace(reason.begin(), reason.end(), ',', ';');
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    out += fmt::format("{},{},{},{},{},{},{},{:.6f},{},{},{}\n", o.name, t(o.arrival_us), t(o.start_us),
                       t(o.finish_us), o.finish_us >= 0 ? t(o.finish_us - o.arrival_us) : std::string(), outcome,
                       o.restarts, static_cast<double>(o.cost_micro_usd) / 1e6, o.sites, o.device_types, reason);
  }
  return out;
}

std::string HtmlReport(const std::vector<SimResult>& results, const std::string& title) {
  const bool fill = !results.empty() && !results[0].fill_curve.empty();
  if (fill) {
    std::string rows;
    for (size_t i = 0; i < results.size(); ++i) {
      const SimResult& r = results[i];
      rows += fmt::format("<tr><td style='color:{}'>&#9632; {}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td>"
                          "<td>{:.3f} s</td></tr>\n",
                          PolicyColour(results[i].policy), Escape(r.policy), r.jobs - r.rejected_jobs - r.infeasible_jobs, r.rejected_jobs,
                          r.unallocated_gpus_at_full, r.unallocated_gpus_end, r.sched_total_s);
    }
    return Page(title, fmt::format(R"(<p>Fill experiment (Weng et al., ATC 2023): tasks arrive in trace order and never end; one that finds no room
is turned away. Fleet: {0} nodes, {1} GPUs; seed {2}.</p>
<table>
<tr><th>policy</th><th>placed</th><th>turned away</th><th>GPUs unallocated at 100% arrived</th>
<th>at the end</th><th>scheduler time</th></tr>
{3}</table>
<h2>GPU allocation as demand arrives</h2>
{4}
)",
                                   results[0].nodes, results[0].gpus, results[0].seed, rows, FillChart(results)));
  }
  std::string rows;
  for (size_t i = 0; i < results.size(); ++i) {
    const SimResult& r = results[i];
    rows += fmt::format(
        "<tr><td style='color:{}'>&#9632; {}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{:.1f}%</td><td>{:.1f}</td><td>{}</td><td>{:.3f} s</td></tr>\n",
        PolicyColour(results[i].policy), Escape(r.policy), r.finished_jobs, r.jobs, r.infeasible_jobs, Escape(Seconds(r.jct.mean)),
        Escape(Seconds(r.jct.p50)), Escape(Seconds(r.jct.p99)), Escape(Seconds(r.queueing.mean)),
        Escape(Seconds(r.makespan_s)), 100 * r.gpu_utilisation, r.unusable_gpus_while_waiting,
        Escape(FormatMicroUsd(r.compute_cost_micro_usd + r.egress_cost_micro_usd)), r.sched_total_s);
  }
  // Faults, data moved and cost: what each policy paid for its times.
  std::string faults;
  std::set<std::string> links;
  for (const SimResult& r : results) {
    int64_t wan = 0;
    for (const auto& [link, bytes] : r.wan_bytes) {
      wan += bytes;
      links.insert(link);
    }
    faults += fmt::format(
        "<tr><td style='color:{}'>&#9632; {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
        PolicyColour(r.policy), Escape(r.policy), r.failed_jobs, r.unfinished_jobs, r.node_failures, r.preemptions,
        r.task_restarts, Escape(FormatBytes(wan)), Escape(FormatMicroUsd(r.egress_cost_micro_usd)),
        Escape(FormatMicroUsd(r.compute_cost_micro_usd)),
        Escape(FormatMicroUsd(r.compute_cost_micro_usd + r.egress_cost_micro_usd)));
  }
  // Bytes over each link, a column per policy.
  std::string by_link;
  if (!links.empty()) {
    by_link = "<h2>WAN bytes by link</h2>\n<table>\n<tr><th>link</th>";
    for (const SimResult& r : results) {
      by_link += fmt::format("<th style='color:{}'>{}</th>", PolicyColour(r.policy), Escape(r.policy));
    }
    by_link += "</tr>\n";
    for (const std::string& link : links) {
      by_link += "<tr><td>" + Escape(link) + "</td>";
      for (const SimResult& r : results) {
        auto it = r.wan_bytes.find(link);
        by_link += "<td>" + Escape(FormatBytes(it == r.wan_bytes.end() ? 0 : it->second)) + "</td>";
      }
      by_link += "</tr>\n";
    }
    by_link += "</table>\n";
  }
  std::string meta;
  if (!results.empty()) {
    meta = fmt::format("trace <b>{}</b>: {} jobs, {} tasks; fleet: {} nodes, {} GPUs; seed {}",
                       Escape(results[0].trace), results[0].jobs, results[0].tasks, results[0].nodes, results[0].gpus,
                       results[0].seed);
  }
  return Page(title, fmt::format(R"(<p>{0}</p>
<table>
<tr><th>policy</th><th>finished</th><th>infeasible</th><th>mean JCT</th><th>p50 JCT</th><th>p99 JCT</th>
<th>mean queueing</th><th>makespan</th><th>GPU util.</th><th>GPUs unusable while work waits</th><th>cost</th>
<th>scheduler time</th></tr>
{1}</table>
<h2>Faults, data moved and cost</h2>
<table>
<tr><th>policy</th><th>failed jobs</th><th>unfinished</th><th>node failures</th><th>preemptions</th>
<th>task restarts</th><th>WAN bytes</th><th>egress</th><th>compute</th><th>cost</th></tr>
{4}</table>
{5}<h2>Job completion time</h2>
<p>Fraction of finished jobs done within a given time.</p>
{2}
<h2>GPU utilisation over time</h2>
{3}
<p style="font-size:12px;color:#666">Made by <code>meridian sim</code>. GPUs unusable: free GPU capacity that none of
the waiting GPU tasks could use, averaged over the time GPU tasks waited. Task restarts: runs killed by node
failures or spot preemptions and queued again. Each policy has its own colour in every report.</p>
)",
                                 meta, rows, JctChart(results), UtilisationChart(results), faults, by_link));
}

Status WriteReport(const std::vector<SimResult>& results, const std::string& title, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgumentError(fmt::format("--out {}: cannot create the directory: {}", dir, ec.message()));
  auto write = [&](const std::string& name, const std::string& text) -> Status {
    std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) return UnavailableError(fmt::format("{}: cannot write", path));
    return OkStatus();
  };
  nlohmann::json all = nlohmann::json::array();
  for (const SimResult& r : results) {
    all.push_back(ResultToJson(r));
    nlohmann::json& last = all.back();
    last["utilisation"] = nlohmann::json::array();
    for (const SeriesPoint& p : r.utilisation) last["utilisation"].push_back({p.t_s, p.value});
    last["jct_quantiles_s"] = r.jct_quantiles_s;
    MERIDIAN_RETURN_IF_ERROR(write(fmt::format("jobs-{}.csv", r.policy), OutcomesCsv(r)));
  }
  MERIDIAN_RETURN_IF_ERROR(write("metrics.json", all.dump(2) + "\n"));
  MERIDIAN_RETURN_IF_ERROR(write("report.html", HtmlReport(results, title)));
  return OkStatus();
}

}  // namespace meridian::sim
