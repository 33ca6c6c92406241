#include "workloads/chain/generate.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "kernels/kernel.h"

namespace meridian::workloads::chain {
namespace {
namespace kc = kernels::chain;

std::atomic<bool> no_stop{false};

std::string Joined(const GeneratedChain& c) {
  std::string all;
  for (const std::string& b : c.blocks) all += b;
  return all;
}

uint64_t U64At(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

GenerateOptions Small() {
  GenerateOptions o;
  o.seed = 42;
  o.blocks = 7;
  o.transactions_per_block = 40;
  o.accounts = 25;
  o.forged = 4;
  o.tampered = 2;
  return o;
}

TEST(ChainGenerateTest, VerificationFindsExactlyTheBadTransactionsItPlanted) {
  StatusOr<GeneratedChain> c = Generate(Small());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->blocks.size(), 7u);
  EXPECT_EQ(c->transactions, 280u);
  // 6 bad transactions, and a Merkle finding per block holding a tampered one.
  EXPECT_EQ(std::count_if(c->expected.begin(), c->expected.end(),
                          [](const kc::Finding& f) { return f.kind == kc::Finding::Kind::kSignature; }),
            6);
  const auto merkle = std::count_if(c->expected.begin(), c->expected.end(),
                                    [](const kc::Finding& f) { return f.kind == kc::Finding::Kind::kMerkle; });
  EXPECT_GE(merkle, 1);
  EXPECT_LE(merkle, 2);
  StatusOr<kc::Report> r = kc::Verify(Joined(*c), kernels::CpuOps(), no_stop);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->findings, c->expected);
  EXPECT_EQ(r->head, c->head);
  EXPECT_EQ(r->first, 0u);
  EXPECT_EQ(r->last, 6u);
  EXPECT_EQ(r->transactions, 280u);
}

TEST(ChainGenerateTest, TransfersKeepNoncesInOrderAndTheSameSeedGivesTheSameBytes) {
  StatusOr<GeneratedChain> a = Generate(Small()), b = Generate(Small());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->blocks, b->blocks);
  GenerateOptions other = Small();
  other.seed = 43;
  StatusOr<GeneratedChain> c = Generate(other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->blocks, a->blocks);
  // Each sender's nonces count 0, 1, 2, ... in chain order; busy senders are few.
  std::map<std::string, uint64_t> next;
  for (uint64_t h = 0; h < a->blocks.size(); ++h) {
    const std::string& block = a->blocks[h];
    for (uint64_t i = 0; i < 40; ++i) {
      const bool bad = std::find(a->expected.begin(), a->expected.end(),
                                 kc::Finding{kc::Finding::Kind::kSignature, h, i}) != a->expected.end();
      const size_t at = kc::kHeaderBytes + i * kc::kTxBytes;
      const std::string from = block.substr(at, kc::kKeyBytes);
      EXPECT_NE(from, block.substr(at + kc::kKeyBytes, kc::kKeyBytes)) << "a transfer to oneself";
      EXPECT_EQ(U64At(block, at + 72), next[from]++);
      const uint64_t amount = U64At(block, at + 64);
      if (!bad) {
        EXPECT_GE(amount, 1u);
      }
      EXPECT_LE(amount, bad ? 10'001u : 10'000u);  // a tampered one has its low bit flipped
    }
  }
  uint64_t busiest = 0;
  for (const auto& [from, n] : next) busiest = std::max(busiest, n);
  EXPECT_GT(busiest, 280u / 25 * 2) << "the first accounts send far more than an even share";
}

TEST(ChainGenerateTest, ShardsVerifiedApartMergeToTheWholeChainsReport) {
  StatusOr<GeneratedChain> c = Generate(Small());
  ASSERT_TRUE(c.ok());
  StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Make("chain-test");
  ASSERT_TRUE(dir.ok());
  StatusOr<std::vector<std::string>> paths = WriteShards(*c, (*dir)->path(), 3, {"east", "west"});
  ASSERT_TRUE(paths.ok()) << paths.status().message();
  ASSERT_EQ(paths->size(), 3u);
  EXPECT_EQ((*paths)[0], (*dir)->path() + "/east/blocks-000000-000001.mbk");
  EXPECT_EQ((*paths)[1], (*dir)->path() + "/west/blocks-000002-000003.mbk");
  EXPECT_EQ((*paths)[2], (*dir)->path() + "/east/blocks-000004-000006.mbk");
  const kernels::KernelInfo* k = kernels::FindKernel("chain-verify");
  std::map<std::string, std::string> args;
  std::vector<std::string> reports;
  for (const std::string& p : *paths) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream bytes;
    bytes << f.rdbuf();
    std::vector<std::string> in = {bytes.str()};
    StatusOr<std::string> r = k->run({args, in, 0, no_stop});
    ASSERT_TRUE(r.ok()) << r.status().message();
    reports.push_back(*r);
  }
  StatusOr<std::string> merged = k->run({args, reports, 0, no_stop});
  std::vector<std::string> whole = {Joined(*c)};
  StatusOr<std::string> direct = k->run({args, whole, 0, no_stop});
  ASSERT_TRUE(merged.ok() && direct.ok());
  EXPECT_EQ(*merged, *direct);
  kc::Report want;
  want.blocks = 7;
  want.transactions = 280;
  want.last = 6;
  want.head = c->head;
  want.findings = c->expected;
  EXPECT_EQ(*merged, kc::FormatReport(want));
}

TEST(ChainGenerateTest, OptionsOutOfBoundsAreRefusedByName) {
  GenerateOptions o = Small();
  o.blocks = 0;
  EXPECT_EQ(Generate(o).status().message(), "blocks: 0 is outside [1, 1000000]");
  o = Small();
  o.accounts = 1;
  EXPECT_EQ(Generate(o).status().message(), "accounts: 1 is outside [2, 1000000]");
  o = Small();
  o.forged = 200;
  o.tampered = 81;
  EXPECT_EQ(Generate(o).status().message(), "tampered: 81 is outside [0, 80]");
  o = Small();
  o.blocks = 100'000;
  o.transactions_per_block = 1'000;
  EXPECT_EQ(Generate(o).status().message(),
            "100000 blocks of 1000 transactions: at most 20000000 transactions in all");
  StatusOr<GeneratedChain> c = Generate(Small());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(WriteShards(*c, "/tmp", 8, {}).status().message(), "shards: 8 is outside [1, 7]");
}

}  // namespace
}  // namespace meridian::workloads::chain
