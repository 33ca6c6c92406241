#include "model/throughput.h"

#include <set>

namespace meridian::model {

void ThroughputTable::Set(std::string_view device_type, std::string_view kind,
                          double units_per_second, int32_t devices) {
  rates_[Key{std::string(kind), std::string(device_type), devices}] = units_per_second;
}

std::optional<double> ThroughputTable::Lookup(std::string_view device_type,
                                               std::string_view kind, int32_t devices) const {
  auto it = rates_.find(Key{std::string(kind), std::string(device_type), devices});
  if (it != rates_.end()) return it->second;
  if (devices != 1) {
    auto one = rates_.find(Key{std::string(kind), std::string(device_type), 1});
    if (one != rates_.end()) return one->second * devices;
  }
  return std::nullopt;
}

void ThroughputTable::SetUnit(std::string_view kind, std::string_view unit) {
  units_[std::string(kind)] = std::string(unit);
}

std::string_view ThroughputTable::Unit(std::string_view kind) const {
  auto it = units_.find(kind);
  return it == units_.end() ? std::string_view("unit") : std::string_view(it->second);
}

bool ThroughputTable::HasKind(std::string_view kind) const {
  auto it = rates_.lower_bound(Key{std::string(kind), "", 0});
  return it != rates_.end() && it->first.kind == kind;
}

std::vector<std::string> ThroughputTable::Kinds() const {
  std::vector<std::string> out;
  for (const auto& [key, rate] : rates_) {
    if (out.empty() || out.back() != key.kind) out.push_back(key.kind);
  }
  return out;
}

std::vector<std::string> ThroughputTable::DeviceTypes(std::string_view kind) const {
  std::set<std::string> types;
  for (auto it = rates_.lower_bound(Key{std::string(kind), "", 0});
       it != rates_.end() && it->first.kind == kind; ++it) {
    types.insert(it->first.device_type);
  }
  return {types.begin(), types.end()};
}

void ThroughputTable::Merge(const ThroughputTable& other) {
  for (const auto& [key, rate] : other.rates_) rates_[key] = rate;
  for (const auto& [kind, unit] : other.units_) units_[kind] = unit;
}

}  // namespace meridian::model
