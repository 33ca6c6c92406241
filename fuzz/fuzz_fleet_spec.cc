// Fleet files and node files. Node lists name files; the base directory does not
// exist, so only absolute paths reach the disk, and those must be refused or read
// within bounds (never /dev/zero for ever).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "model/fleet.h"
#include "spec/fleet_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  meridian::StatusOr<meridian::spec::FleetSpec> fleet = meridian::spec::ParseFleet(text, "fuzz.yaml", "/nonexistent");
  if (fleet.ok()) {
    for (const meridian::model::Node& n : fleet->fleet.nodes) {
      MERIDIAN_CHECK_MSG(n.site.value() < fleet->fleet.sites.size(), "a node at an unknown site");
    }
  }
  meridian::StatusOr<meridian::spec::NodeConfig> node = meridian::spec::ParseNodeConfig(text, "node.yaml");
  if (node.ok()) meridian::model::CheckNodeSpec(node->node).IgnoreError();
  return 0;
}
