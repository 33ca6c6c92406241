// What a replay reports: JSON metrics for scripts, a per-job CSV, and a
// self-contained HTML page (inline SVG charts, no scripts or downloads) with the
// JCT distribution per policy and GPU utilisation over time.
//
// Thread-safety: functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "sim/engine.h"

namespace meridian::sim {

// Metrics of one run; `timing` adds the wall-clock figures (not deterministic).
nlohmann::json ResultToJson(const SimResult& r, bool timing = true);

// One line per job: name, arrival, start, finish, JCT, outcome, restarts, cost.
std::string OutcomesCsv(const SimResult& r);

std::string HtmlReport(const std::vector<SimResult>& results, const std::string& title);

// Writes metrics.json, report.html and jobs-<policy>.csv under `dir` (created).
Status WriteReport(const std::vector<SimResult>& results, const std::string& title, const std::string& dir);

}  // namespace meridian::sim
