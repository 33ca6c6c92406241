// meridian fleet sites|links FLEET: a fleet file's sites and links as tab-separated
// lines, for scripts that build a network after the fleet (scripts/netsim.sh).
#include <fmt/format.h>

#include "cli/commands.h"
#include "spec/fleet_spec.h"

namespace meridian::cli {

Status RunFleetShow(const FleetShowOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec spec, spec::LoadFleet(o.fleet));
  const model::Fleet& fleet = spec.fleet;
  if (o.what == "sites") {
    for (const model::Site& s : fleet.sites) out << fmt::format("{}\t{}\n", s.name, model::SiteKindName(s.kind));
  } else if (o.what == "links") {
    for (const model::Link& l : fleet.links) {
      out << fmt::format("{}\t{}\t{}\t{}\n", fleet.site(l.a).name, fleet.site(l.b).name, l.rtt_us, l.bandwidth_bps);
    }
  } else {
    return InvalidArgumentError(fmt::format("fleet: '{}' is not sites or links", o.what));
  }
  return OkStatus();
}

}  // namespace meridian::cli
