// The trace and table readers of the simulator (Alibaba pods and nodes, Sia/Philly,
// Meridian's CSV): the first byte picks the reader, the rest is the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/trace.h"
#include "spec/csv.h"
#include "spec/fleet_spec.h"
#include "spec/node_list.h"

namespace {

const meridian::spec::FleetSpec& Fleet() {
  static const meridian::spec::FleetSpec fleet = *meridian::spec::ParseFleet(
      "sites:\n  - {name: a, kind: cloud, provider: aws, region: us-east-1}\n"
      "nodes:\n  - {name: n, site: a, count: 2, cpu: 8, memory: 64GiB, devices: {type: V100, count: 4}}\n",
      "fleet.yaml", "/nonexistent");
  return fleet;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: meridian::sim::ParseAlibabaPods(text, "pods.csv").status().IgnoreError(); break;
    case 1: meridian::sim::ParseSiaPhilly(text, "sia.csv", Fleet().throughput).status().IgnoreError(); break;
    case 2: meridian::sim::ParseGenericTrace(text, "trace.csv", Fleet().fleet).status().IgnoreError(); break;
    case 3: meridian::spec::ParseAlibabaNodeList(text, "nodes.csv").status().IgnoreError(); break;
    default: {
      meridian::StatusOr<meridian::spec::CsvTable> t = meridian::spec::CsvTable::Parse(text, "t.csv");
      if (t.ok()) {
        for (size_t r = 0; r < t->rows(); ++r) {
          for (size_t c = 0; c < t->header().size(); ++c) t->Int(r, c).status().IgnoreError();
        }
      }
    }
  }
  return 0;
}
