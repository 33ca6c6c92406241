#include "workloads/chain/generate.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <sodium.h>

#include "common/parallel.h"
#include "kernels/generate.h"

namespace meridian::workloads::chain {
namespace kc = kernels::chain;
namespace {

constexpr int64_t kMaxTransactions = 20'000'000;  // 2.7 GiB of blocks, held in memory
constexpr uint64_t kStartingBalance = 1'000'000'000;
constexpr uint64_t kMaxAmount = 10'000;
constexpr uint64_t kGenesisTime = 1'767'225'600;  // 2026-01-01, then a block every 12 s

struct Account {
  kc::PublicKey pk{};
  std::array<uint8_t, kc::kSecretKeyBytes> sk{};
  uint64_t balance = kStartingBalance;
  uint64_t nonce = 0;
};

Status CheckRange(std::string_view name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) return InvalidArgumentError(fmt::format("{}: {} is outside [{}, {}]", name, v, lo, hi));
  return OkStatus();
}

// The random stream of the chain's choices: draw k is a function of (seed, k).
class Draws {
 public:
  explicit Draws(uint64_t seed) : seed_(seed) {}
  uint64_t Next() { return kernels::gen::Bits(seed_, counter_++); }
  uint64_t Below(uint64_t n) { return Next() % n; }
  double Unit() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

std::vector<Account> MakeAccounts(uint64_t seed, int64_t count) {
  std::vector<Account> accounts(static_cast<size_t>(count));
  ParallelFor(accounts.size(), std::max(1u, std::thread::hardware_concurrency()), [&](size_t a) {
    // The key seed: SHA-256 of the chain's seed and the account's number.
    const std::string material = fmt::format("meridian-chain/{}/{}", seed, a);
    uint8_t key_seed[crypto_sign_SEEDBYTES];
    crypto_hash_sha256(key_seed, reinterpret_cast<const uint8_t*>(material.data()), material.size());
    crypto_sign_seed_keypair(accounts[a].pk.data(), accounts[a].sk.data(), key_seed);
  });
  return accounts;
}

}  // namespace

StatusOr<GeneratedChain> Generate(const GenerateOptions& o) {
  MERIDIAN_RETURN_IF_ERROR(CheckRange("blocks", o.blocks, 1, 1'000'000));
  MERIDIAN_RETURN_IF_ERROR(CheckRange("transactions per block", o.transactions_per_block, 1, kc::kMaxTxsPerBlock));
  MERIDIAN_RETURN_IF_ERROR(CheckRange("accounts", o.accounts, 2, 1'000'000));
  if (o.blocks * o.transactions_per_block > kMaxTransactions) {
    return InvalidArgumentError(fmt::format("{} blocks of {} transactions: at most {} transactions in all", o.blocks,
                                            o.transactions_per_block, kMaxTransactions));
  }
  const int64_t total = o.blocks * o.transactions_per_block;
  MERIDIAN_RETURN_IF_ERROR(CheckRange("forged", o.forged, 0, total));
  MERIDIAN_RETURN_IF_ERROR(CheckRange("tampered", o.tampered, 0, total - o.forged));
  MERIDIAN_CHECK(sodium_init() >= 0);

  std::vector<Account> accounts = MakeAccounts(o.seed, o.accounts);
  Draws draw(o.seed);
  // Which transactions are bad: distinct positions, the first `forged` forged.
  std::vector<uint64_t> bad_order;
  std::set<uint64_t> bad;
  while (bad_order.size() < static_cast<size_t>(o.forged + o.tampered)) {
    const uint64_t k = draw.Below(static_cast<uint64_t>(total));
    if (bad.insert(k).second) bad_order.push_back(k);
  }
  const std::set<uint64_t> forged(bad_order.begin(), bad_order.begin() + o.forged);
  const std::set<uint64_t> tampered(bad_order.begin() + o.forged, bad_order.end());

  // The transfers, in order (balances and nonces depend on every earlier one). A
  // sender is drawn with density falling as 1/sqrt: the first accounts are busy.
  std::vector<kc::Transaction> txs(static_cast<size_t>(total));
  std::vector<uint32_t> signer(txs.size());
  const uint64_t n = static_cast<uint64_t>(o.accounts);
  for (size_t k = 0; k < txs.size(); ++k) {
    const double u = draw.Unit();
    uint64_t from = std::min<uint64_t>(n - 1, static_cast<uint64_t>(u * u * static_cast<double>(n)));
    while (accounts[from].balance == 0) from = (from + 1) % n;  // someone always has funds: the total is kept
    uint64_t to = draw.Below(n - 1);
    if (to >= from) ++to;
    Account& sender = accounts[from];
    kc::Transaction& tx = txs[k];
    tx.from = sender.pk;
    tx.to = accounts[to].pk;
    tx.amount = 1 + draw.Below(std::min(sender.balance, kMaxAmount));
    tx.nonce = sender.nonce++;
    sender.balance -= tx.amount;
    accounts[to].balance += tx.amount;
    // A forger signs with a key of its own (here, the receiver's): the signature is
    // well formed but not the sender's.
    signer[k] = static_cast<uint32_t>(forged.count(k) ? to : from);
  }
  // Signing is the costly part: on every core.
  ParallelFor(txs.size(), std::max(1u, std::thread::hardware_concurrency()),
              [&](size_t k) { kc::Sign(txs[k], accounts[signer[k]].sk); });

  GeneratedChain out;
  out.transactions = static_cast<uint64_t>(total);
  kc::Hash prev{};
  const size_t per_block = static_cast<size_t>(o.transactions_per_block);
  for (int64_t b = 0; b < o.blocks; ++b) {
    const uint64_t height = static_cast<uint64_t>(b);
    std::string bytes;
    MERIDIAN_ASSIGN_OR_RETURN(prev, kc::AppendBlock(kernels::CpuOps(), height, prev, kGenesisTime + 12 * height,
                                                    {txs.data() + b * per_block, per_block}, bytes));
    out.blocks.push_back(std::move(bytes));
  }
  out.head = prev;
  for (uint64_t k : bad_order) {
    const uint64_t height = k / per_block, index = k % per_block;
    out.expected.push_back({kc::Finding::Kind::kSignature, height, index});
    if (tampered.count(k)) {
      // After sealing: the amount's lowest bit flipped, so it is not what was signed.
      std::string& block = out.blocks[height];
      const size_t amount_at = kc::kHeaderBytes + index * kc::kTxBytes + 2 * kc::kKeyBytes;
      block[amount_at] = static_cast<char>(static_cast<uint8_t>(block[amount_at]) ^ 0x01);
      kc::Finding merkle{kc::Finding::Kind::kMerkle, height, 0};
      if (std::find(out.expected.begin(), out.expected.end(), merkle) == out.expected.end()) {
        out.expected.push_back(merkle);
      }
    }
  }
  std::sort(out.expected.begin(), out.expected.end());
  return out;
}

std::string ExpectedReport(const GeneratedChain& chain) {
  kc::Report r;
  r.blocks = chain.blocks.size();
  r.transactions = chain.transactions;
  r.last = chain.blocks.empty() ? 0 : chain.blocks.size() - 1;
  r.head = chain.head;
  r.findings = chain.expected;
  return kc::FormatReport(r);
}

StatusOr<std::vector<std::string>> WriteShards(const GeneratedChain& chain, const std::string& dir, int64_t shards,
                                               const std::vector<std::string>& sites) {
  const int64_t blocks = static_cast<int64_t>(chain.blocks.size());
  MERIDIAN_RETURN_IF_ERROR(CheckRange("shards", shards, 1, std::max<int64_t>(1, blocks)));
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  for (int64_t s = 0; s < shards; ++s) {
    const int64_t first = blocks * s / shards, end = blocks * (s + 1) / shards;
    fs::path where = sites.empty() ? fs::path(dir) : fs::path(dir) / sites[static_cast<size_t>(s) % sites.size()];
    std::error_code ec;
    fs::create_directories(where, ec);
    if (ec) return InternalError(fmt::format("{}: {}", where.string(), ec.message()));
    const fs::path path = where / fmt::format("blocks-{:06}-{:06}.mbk", first, end - 1);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (int64_t b = first; b < end; ++b) f.write(chain.blocks[b].data(), static_cast<std::streamsize>(chain.blocks[b].size()));
    f.close();
    if (!f) return InternalError(fmt::format("{}: could not write the shard", path.string()));
    paths.push_back(path.string());
  }
  return paths;
}

}  // namespace meridian::workloads::chain
