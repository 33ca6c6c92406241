// A realistic chain to verify: accounts with Ed25519 keys, blocks of transfers between
// them that respect balances and per-account nonces (a few accounts are busy, most are
// not), and a known set of bad transactions — forged ones, signed by a key other than
// the sender's, and tampered ones, whose amount was changed after their block was
// sealed — so that a verification's findings can be checked exactly.
//
// Deterministic: the same options give the same bytes (keys come from the seed, and
// Ed25519 signatures are deterministic).
//
// Thread-safety: pure functions (Generate signs on several threads of its own).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/chain.h"

namespace meridian::workloads::chain {

struct GenerateOptions {
  uint64_t seed = 1;
  int64_t blocks = 100;
  int64_t transactions_per_block = 1000;
  int64_t accounts = 1000;
  int64_t forged = 3;    // transactions signed by someone other than their sender
  int64_t tampered = 1;  // transactions altered after sealing (their signature and block root fail)
};

struct GeneratedChain {
  std::vector<std::string> blocks;  // each block's bytes, height 0 first
  uint64_t transactions = 0;
  kernels::chain::Hash head{};  // the last block's hash
  // What verifying the whole chain must find: a signature finding per forged or
  // tampered transaction and a Merkle finding per block holding a tampered one, in
  // the report's order.
  std::vector<kernels::chain::Finding> expected;
};

// Checks the options (an error names the one out of bounds) and makes the chain.
StatusOr<GeneratedChain> Generate(const GenerateOptions& o);
// What chain-verify must output for the whole chain (kernels/chain.h's format).
std::string ExpectedReport(const GeneratedChain& chain);

// Writes the chain as `shards` files of consecutive blocks (as even as they divide)
// under `dir`, named blocks-FIRST-LAST.mbk; with sites, shard i goes in
// dir/sites[i % sites.size()]/ (for `meridian data put --by-site`). Returns the paths.
StatusOr<std::vector<std::string>> WriteShards(const GeneratedChain& chain, const std::string& dir, int64_t shards,
                                               const std::vector<std::string>& sites);

}  // namespace meridian::workloads::chain
