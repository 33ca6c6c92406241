#include "model/work.h"

#include <algorithm>

namespace meridian::model {

std::string_view ObjectiveName(Objective objective) {
  switch (objective) {
    case Objective::kFastest: return "fastest";
    case Objective::kCheapest: return "cheapest";
    case Objective::kBalanced: return "balanced";
  }
  return "fastest";
}

std::optional<Objective> ParseObjective(std::string_view name) {
  if (name == "fastest") return Objective::kFastest;
  if (name == "cheapest") return Objective::kCheapest;
  if (name == "balanced") return Objective::kBalanced;
  return std::nullopt;
}

const Task* Job::FindTask(std::string_view name) const {
  for (const Task& t : tasks) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Job WithFallbackRegions(const Job& job) {
  Job out = job;
  out.allowed_regions.insert(out.allowed_regions.end(), job.fallback_regions.begin(), job.fallback_regions.end());
  return out;
}

bool SiteMatchesAnyRegionRule(const Site& site, const std::vector<std::string>& rules) {
  return std::any_of(rules.begin(), rules.end(), [&](const std::string& rule) { return SiteMatchesRegionRule(site, rule); });
}

bool SiteMatchesRegionRule(const Site& site, std::string_view rule) {
  if (rule.empty()) return false;
  if (site.name == rule || site.region == rule) return true;
  std::string_view region = site.region;
  return region.size() > rule.size() && region.substr(0, rule.size()) == rule &&
         region[rule.size()] == '-';
}

}  // namespace meridian::model
