// Gavel's measured throughput table (stanford-futuredata/gavel,
// scheduler/simulation_throughputs.json; Narayanan et al., OSDI 2020) as a
// model::ThroughputTable. Device types k80/p100/v100 become K80/P100/V100; the
// "unconsolidated" variants are skipped. Work kinds are normalised:
// "ResNet-50 (batch size 64)" -> "resnet-50-b64", "A3C" -> "a3c"; the unit is
// "step"; a scale factor of N is an entry for N devices. Co-located figures are
// not used (the scheduler does not co-locate yet).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "model/throughput.h"

namespace meridian::spec {

StatusOr<model::ThroughputTable> ParseGavelThroughputs(std::string_view json_text,
                                                       std::string_view file);
StatusOr<model::ThroughputTable> LoadGavelThroughputs(const std::string& path);
// "ResNet-50 (batch size 64)" -> "resnet-50-b64".
std::string NormaliseGavelModel(std::string_view model);

}  // namespace meridian::spec
