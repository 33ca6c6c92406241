// meridian chain generate: a realistic chain written as shards to verify on a cluster
// (docs/chain.md).
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/units.h"
#include "workloads/chain/generate.h"

namespace meridian::cli {

StatusOr<ChainGenerated> GenerateChain(const ChainGenerateOptions& o) {
  namespace fs = std::filesystem;
  if (o.out.empty()) return InvalidArgumentError("--out is required: the directory to write the shards in");
  std::error_code ec;
  if (fs::exists(o.out, ec) && !fs::is_empty(o.out, ec)) {
    return AlreadyExistsError(fmt::format("{} is not empty: give a new directory, so that only this chain's shards are in it",
                                          o.out));
  }
  MERIDIAN_ASSIGN_OR_RETURN(workloads::chain::GeneratedChain chain, workloads::chain::Generate(o.chain));
  const int64_t shards = o.shards > 0 ? o.shards : std::min<int64_t>(o.chain.blocks, 8);
  ChainGenerated out;
  MERIDIAN_ASSIGN_OR_RETURN(out.shards, workloads::chain::WriteShards(chain, o.out, shards, o.sites));
  for (const std::string& b : chain.blocks) out.bytes += static_cast<int64_t>(b.size());
  out.expected_report = workloads::chain::ExpectedReport(chain);
  out.transactions = chain.transactions;
  out.blocks = static_cast<int64_t>(chain.blocks.size());
  return out;
}

Status RunChainGenerate(const ChainGenerateOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(ChainGenerated g, GenerateChain(o));
  if (o.json) {
    nlohmann::json j = {{"dir", o.out},         {"blocks", g.blocks},
                        {"transactions", g.transactions}, {"bytes", g.bytes},
                        {"shards", g.shards},    {"forged", o.chain.forged},
                        {"tampered", o.chain.tampered}, {"expected_report", g.expected_report}};
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("wrote {} blocks of {} transactions ({}) as {} shards under {}\n", g.blocks,
                     o.chain.transactions_per_block, FormatBytes(g.bytes), g.shards.size(), o.out);
  out << fmt::format("planted {} forged and {} tampered transactions; verifying the whole chain must report:\n",
                     o.chain.forged, o.chain.tampered);
  out << g.expected_report;
  return OkStatus();
}

}  // namespace meridian::cli
