// Fleets for simulation beyond what a fleet file declares: the same fleet N times
// over (for size experiments), and nodes added later in a run.
//
// Fleets from node lists, split over sites with links and catalog prices, are
// the fleet file's node_lists section (docs/fleet-spec.md); the simulator loads the
// same files as `meridian up`.
//
// Thread-safety: functions of their arguments.
#pragma once

#include "model/fleet.h"

namespace meridian::sim {

// Every node `factor` times, at its own site; names get a "-xK" suffix for copy K
// > 0. Sites, links and tenants are kept.
model::Fleet ScaleFleet(const model::Fleet& fleet, int factor);

// Appends a copy of node `like` (healthy, named "<name>-add-K") and returns its id.
NodeId AddNodeLike(model::Fleet* fleet, NodeId like);

}  // namespace meridian::sim
