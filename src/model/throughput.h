// How fast each accelerator type runs each kind of work: units of work per second,
// per (device type, work kind), optionally per device count when scaling is not
// linear. Never one scalar per device: in Gavel's measurements a V100 runs one model
// 11.6x faster than a K80 and another 0.66x as fast.
//
// Thread-safety: a const table may be shared between threads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meridian::model {

class ThroughputTable {
 public:
  // units_per_second for `devices` devices of `device_type` working together on one
  // task of `kind`. Replaces an earlier entry for the same key.
  void Set(std::string_view device_type, std::string_view kind, double units_per_second,
           int32_t devices = 1);
  // The rate for `devices` devices: the entry for exactly that count, else the
  // single-device rate times `devices` (linear scaling), else nothing.
  std::optional<double> Lookup(std::string_view device_type, std::string_view kind,
                               int32_t devices = 1) const;

  void SetUnit(std::string_view kind, std::string_view unit);
  // "step", "TFLOP", ... ("unit" when never set).
  std::string_view Unit(std::string_view kind) const;

  bool HasKind(std::string_view kind) const;
  std::vector<std::string> Kinds() const;
  // Device types with an entry for `kind`.
  std::vector<std::string> DeviceTypes(std::string_view kind) const;
  size_t size() const { return rates_.size(); }

  // Adds every entry of `other`, replacing equal keys.
  void Merge(const ThroughputTable& other);

 private:
  struct Key {
    std::string kind;
    std::string device_type;
    int32_t devices;
    friend auto operator<=>(const Key&, const Key&) = default;
  };
  std::map<Key, double, std::less<>> rates_;
  std::map<std::string, std::string, std::less<>> units_;
};

}  // namespace meridian::model
