// What a gang member's command is told of its gang: the variables distributed
// frameworks read (PyTorch's env:// rendezvous, torchrun's, Lightning's) and a file
// listing every rank's node, site and host. See docs/runtime.md, "Gangs".
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/run_state.h"
#include "model/work.h"

namespace meridian::agent {

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (ranks on this member's node),
// NODE_RANK and GROUP_RANK (its node's place among the gang's nodes, in order of
// their lowest rank), MASTER_ADDR, MASTER_PORT and MERIDIAN_GANG, as NAME=value.
// An error names what does not hold together (a rank outside the members, more than
// model::kMaxGangMembers of them, no port): the coordinator never sends such a gang.
StatusOr<std::vector<std::string>> GangEnvironment(const model::GangInfo& gang);

// The peers file (MERIDIAN_GANG_PEERS): a line per rank, "RANK NODE SITE HOST".
std::string GangPeersText(const model::GangInfo& gang);

// A close-on-exec socket listening on `port` on every address of this host (IPv4
// too, where it has IPv6); an error carries the system's reason.
StatusOr<int> ListenOnAllAddresses(int32_t port);

// Whether a listener could take `port` on this host (rank 0's MASTER_PORT, before its
// command starts): an error says it is taken.
Status CheckPortFree(int32_t port);

}  // namespace meridian::agent
