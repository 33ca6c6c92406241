// Fleet files (YAML) -> model::Fleet and its throughput table, validated whole.
// The format is documented in docs/fleet-spec.md. Any error names the file, line,
// column and field; on error nothing is returned (no half-loaded fleet).
//
// Thread-safety: pure functions (they read the files they are given).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "model/fleet.h"
#include "model/throughput.h"

namespace meridian::spec {

struct FleetSpec {
  model::Fleet fleet;
  model::ThroughputTable throughput;
};

// `file` names the text in errors; relative paths inside the spec (Gavel table,
// node lists) resolve against `base_dir`.
StatusOr<FleetSpec> ParseFleet(std::string_view text, std::string_view file,
                               const std::string& base_dir);
StatusOr<FleetSpec> LoadFleet(const std::string& path);

}  // namespace meridian::spec
