#include "kernels/chain.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sodium.h>

#include "kernels/kernel.h"
#include "kernels/sha256.h"

namespace meridian::kernels::chain {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Hash Sodium256d(std::span<const uint8_t> m) {
  Hash first{}, out{};
  crypto_hash_sha256(first.data(), m.data(), m.size());
  crypto_hash_sha256(out.data(), first.data(), first.size());
  return out;
}

// A Merkle root computed the plain way, with libsodium, one level at a time.
Hash SodiumMerkle(std::vector<Hash> level) {
  if (level.empty()) return Hash{};
  while (level.size() > 1) {
    if (level.size() % 2 == 1) level.push_back(level.back());
    std::vector<Hash> up;
    for (size_t i = 0; i < level.size(); i += 2) {
      uint8_t pair[64];
      std::memcpy(pair, level[i].data(), 32);
      std::memcpy(pair + 32, level[i + 1].data(), 32);
      up.push_back(Sodium256d(pair));
    }
    level = std::move(up);
  }
  return level.front();
}

Hash FromHex(std::string_view hex, bool reversed = false) {
  Hash h{};
  size_t got = 0;
  EXPECT_EQ(sodium_hex2bin(h.data(), h.size(), hex.data(), hex.size(), nullptr, &got, nullptr), 0);
  if (reversed) std::reverse(h.begin(), h.end());
  return h;
}

struct Keys {
  std::array<uint8_t, 32> pk;
  std::array<uint8_t, 64> sk;
};

Keys KeysFor(uint8_t who) {
  Keys k{};
  std::array<uint8_t, 32> seed{};
  seed.fill(who);
  EXPECT_EQ(sodium_init() >= 0, true);
  crypto_sign_seed_keypair(k.pk.data(), k.sk.data(), seed.data());
  return k;
}

// `blocks` blocks from `height` after `prev`, of `txs` signed transfers each between
// three accounts; *head gets the last block's hash.
std::string MakeBlocks(uint64_t height, uint64_t blocks, uint32_t txs, Hash prev, Hash* head = nullptr) {
  const Keys keys[3] = {KeysFor(1), KeysFor(2), KeysFor(3)};
  std::string out;
  for (uint64_t b = 0; b < blocks; ++b) {
    std::vector<Transaction> list;
    for (uint32_t i = 0; i < txs; ++i) {
      const Keys& from = keys[(height + b + i) % 3];
      Transaction tx;
      tx.from = from.pk;
      tx.to = keys[(height + b + i + 1) % 3].pk;
      tx.amount = 100 + i;
      tx.nonce = (height + b) * 1000 + i;
      Sign(tx, from.sk);
      list.push_back(tx);
    }
    StatusOr<Hash> h = AppendBlock(CpuOps(), height + b, prev, 1'700'000'000 + 12 * (height + b), list, out);
    EXPECT_TRUE(h.ok()) << h.status().message();
    prev = *h;
  }
  if (head != nullptr) *head = prev;
  return out;
}

// The byte offset of transaction `i` of the block at position `b` of blocks of `txs` each.
size_t TxAt(size_t b, uint32_t txs, uint32_t i) {
  return b * (kHeaderBytes + txs * kTxBytes) + kHeaderBytes + i * kTxBytes;
}

std::atomic<bool> no_stop{false};

TEST(Sha256Test, TheSharedCodeMatchesLibsodiumAndTheStandardsVector) {
  // FIPS 180-2's "abc".
  uint8_t out[32];
  sha256::Digest(reinterpret_cast<const uint8_t*>("abc"), 3, out);
  EXPECT_EQ(Hex(out), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Every length across the one- and two-block padding cases and a few blocks.
  std::vector<uint8_t> m(300);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t len = 0; len <= m.size(); ++len) {
    uint8_t ours[32], theirs[32];
    sha256::Digest(m.data(), len, ours);
    crypto_hash_sha256(theirs, m.data(), len);
    ASSERT_EQ(Hex(ours), Hex(theirs)) << "length " << len;
    sha256::DoubleDigest(m.data(), len, ours);
    ASSERT_EQ(Hex(ours), Hex(Sodium256d({m.data(), len}))) << "length " << len;
  }
}

TEST(Sha256Test, OpsHashWholeMessagesAndRefuseTheRest) {
  std::string m(144 * 5, '\0');
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<char>(i);
  StatusOr<std::vector<Hash>> got = HashAll(CpuOps(), Bytes(m), 144);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ((*got)[i], Sodium256d(Bytes(m).subspan(144 * i, 144))) << i;
  std::vector<uint8_t> digests(32 * 5);
  Status s = CpuOps().Sha256d(Bytes(m).first(143 * 5), 144, digests);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "715 bytes are not whole messages of 144 bytes");
  s = CpuOps().Sha256d(Bytes(m), 144, std::span<uint8_t>(digests).first(64));
  EXPECT_EQ(s.message(), "5 messages need 160 bytes of digests, not 64");
}

TEST(MerkleTest, BitcoinBlock100000HasItsPublishedRoot) {
  // Block 100,000's transaction ids and Merkle root as block explorers print them
  // (byte-reversed).
  std::vector<Hash> ids = {
      FromHex("8c14f0db3df150123e6f3dbbf30f8b955a8249b62ac1d1ff16284aefa3d06d87", true),
      FromHex("fff2525b8931402dd09222c50775608f75787bd2b87e56995a7bdd30f79702c4", true),
      FromHex("6359f0868171b1d194cbee1af2f16ea598ae8fad666d9b012c8ed2b79a236ec4", true),
      FromHex("e9a66845e05d5abc0ad04ec80f774a7e585c6e8db975962d069a522137b80c1d", true)};
  const uint32_t four = 4;
  StatusOr<std::vector<Hash>> root = MerkleRoots(CpuOps(), ids, {&four, 1});
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(root->front(), FromHex("f3e94742aca4b5ef85488dc37c06c3282295ffec960994b2c0d5ac2a25a95766", true));
}

TEST(MerkleTest, GroupsOfEverySizeMatchLibsodiumLevelByLevel) {
  // Groups of 0 to 17 leaves hashed together in one batch per level.
  std::vector<Hash> leaves;
  std::vector<uint32_t> groups;
  for (uint32_t n = 0; n <= 17; ++n) {
    groups.push_back(n);
    for (uint32_t i = 0; i < n; ++i) {
      std::string seed = std::to_string(n) + "/" + std::to_string(i);
      leaves.push_back(Sodium256d(Bytes(seed)));
    }
  }
  StatusOr<std::vector<Hash>> roots = MerkleRoots(CpuOps(), leaves, groups);
  ASSERT_TRUE(roots.ok()) << roots.status().message();
  size_t at = 0;
  for (uint32_t n = 0; n <= 17; ++n) {
    std::vector<Hash> mine(leaves.begin() + at, leaves.begin() + at + n);
    EXPECT_EQ((*roots)[n], SodiumMerkle(mine)) << n << " leaves";
    at += n;
  }
  EXPECT_EQ((*roots)[0], Hash{});
  EXPECT_EQ((*roots)[1], leaves[0]);
}

TEST(ChainVerifyTest, AValidChainHasNoFindingsAndItsIdsAreLibsodiums) {
  Hash head;
  const std::string blocks = MakeBlocks(0, 4, 5, Hash{}, &head);
  ASSERT_EQ(blocks.size(), 4 * (kHeaderBytes + 5 * kTxBytes));
  // The first block's root is libsodium's over its transactions' ids.
  std::vector<Hash> ids;
  for (uint32_t i = 0; i < 5; ++i) ids.push_back(Sodium256d(Bytes(blocks).subspan(TxAt(0, 5, i), kTxBytes)));
  EXPECT_EQ(Hex(Bytes(blocks).subspan(12 + 32, 32)), Hex(SodiumMerkle(ids)));
  StatusOr<Report> r = Verify(blocks, CpuOps(), no_stop);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->blocks, 4u);
  EXPECT_EQ(r->transactions, 20u);
  EXPECT_EQ(r->first, 0u);
  EXPECT_EQ(r->last, 3u);
  EXPECT_EQ(r->prev, Hash{});
  EXPECT_EQ(r->head, head);
  // The head is libsodium's hash of the last header.
  EXPECT_EQ(head, Sodium256d(Bytes(blocks).subspan(3 * (kHeaderBytes + 5 * kTxBytes), kHeaderBytes)));
  EXPECT_TRUE(r->valid());
  EXPECT_EQ(FormatReport(*r), "chain-verify blocks=4 transactions=20 bad_signatures=0 bad_merkle=0 bad_links=0 first=0 "
                              "last=3 prev=" + Hex(Hash{}) + " head=" + Hex(head) + "\n");
}

TEST(ChainVerifyTest, FindsBadSignaturesTamperedTransfersAndBrokenLinksByPosition) {
  std::string blocks = MakeBlocks(10, 4, 6, Hash{});
  // A forged signature (the block was sealed over it: the root still matches).
  {
    std::string again = MakeBlocks(10, 4, 6, Hash{});
    EXPECT_EQ(again, blocks) << "signing is deterministic";
  }
  // Block 11 (position 1), transaction 2: a signature bit flipped before sealing is
  // the same as signing garbage; here flip it and reseal that block alone.
  const Keys k = KeysFor(1);
  std::vector<Transaction> txs;
  for (uint32_t i = 0; i < 6; ++i) {
    Transaction tx;
    tx.from = k.pk;
    tx.to = KeysFor(2).pk;
    tx.amount = i + 1;
    tx.nonce = i;
    Sign(tx, k.sk);
    if (i == 2) tx.signature[17] ^= 0x40;
    txs.push_back(tx);
  }
  std::string forged;
  Hash prev{};
  std::memcpy(prev.data(), blocks.data() + (kHeaderBytes + 6 * kTxBytes) + 12, 32);  // block 11's prev
  ASSERT_TRUE(AppendBlock(CpuOps(), 11, prev, 1, txs, forged).ok());
  blocks.replace(kHeaderBytes + 6 * kTxBytes, forged.size(), forged);
  // Block 12 (position 2), transaction 4: its amount changed after sealing.
  blocks[TxAt(2, 6, 4) + 64] ^= 0x01;
  StatusOr<Report> r = Verify(blocks, CpuOps(), no_stop);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Resealing block 11 changed its hash, so block 12's prev no longer names it.
  const std::vector<Finding> want = {{Finding::Kind::kSignature, 11, 2},
                                     {Finding::Kind::kSignature, 12, 4},
                                     {Finding::Kind::kMerkle, 12, 0},
                                     {Finding::Kind::kLink, 12, 0}};
  EXPECT_TRUE(std::is_sorted(want.begin(), want.end()));
  EXPECT_EQ(r->findings, want);
  const std::string text = FormatReport(*r);
  EXPECT_NE(text.find("bad_signatures=2 bad_merkle=1 bad_links=1 first=10 last=13"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsignature 11 2\nsignature 12 4\nmerkle 12\nlink 12\n"), std::string::npos) << text;
  // A report reads back as itself.
  StatusOr<Report> back = ParseReport(text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(FormatReport(*back), text);
}

TEST(ChainVerifyTest, ShardsMergeIntoTheWholeChainsReport) {
  Hash mid, head;
  const std::string a = MakeBlocks(0, 3, 4, Hash{}, &mid);
  const std::string b = MakeBlocks(3, 3, 4, mid, &head);
  StatusOr<Report> whole = Verify(a + b, CpuOps(), no_stop);
  StatusOr<Report> ra = Verify(a, CpuOps(), no_stop);
  StatusOr<Report> rb = Verify(b, CpuOps(), no_stop);
  ASSERT_TRUE(whole.ok() && ra.ok() && rb.ok());
  // In either order.
  StatusOr<Report> merged = Merge({*rb, *ra});
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ(FormatReport(*merged), FormatReport(*whole));
  EXPECT_EQ(merged->head, head);
  // A missing shard is a gap; a shard given twice, repeated heights; a shard of
  // another chain, a broken link.
  const std::string c = MakeBlocks(6, 2, 4, head);
  StatusOr<Report> rc = Verify(c, CpuOps(), no_stop);
  ASSERT_TRUE(rc.ok());
  merged = Merge({*ra, *rc});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->findings, (std::vector<Finding>{{Finding::Kind::kGap, 3, 5}}));
  merged = Merge({*ra, *rb, *rb});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->findings, (std::vector<Finding>{{Finding::Kind::kRepeat, 3, 0}}));
  const std::string other = MakeBlocks(3, 3, 4, Hash{});
  StatusOr<Report> ro = Verify(other, CpuOps(), no_stop);
  merged = Merge({*ra, *ro});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->findings, (std::vector<Finding>{{Finding::Kind::kLink, 3, 0}}));
  EXPECT_NE(FormatReport(*merged).find("bad_links=1"), std::string::npos);
}

TEST(ChainVerifyTest, MalformedBlocksGetOneErrorNamingTheByte) {
  const std::string blocks = MakeBlocks(0, 2, 3, Hash{});
  auto error = [](std::string_view data) {
    StatusOr<Report> r = Verify(data, CpuOps(), no_stop);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_EQ(error(""), "no blocks");
  EXPECT_EQ(error(std::string_view(blocks).substr(0, blocks.size() - 1)),
            "byte 520: block 1 declares 3 transactions (432 bytes) but 431 bytes follow");
  EXPECT_EQ(error(blocks + "MBK1"), "byte 1040: 4 bytes left, where a block header takes 88");
  std::string bad_magic = blocks;
  bad_magic[520] = 'X';
  EXPECT_EQ(error(bad_magic), "byte 520: not a block (blocks start with 'MBK1')");
  // A header declaring more transactions than the limit is refused before anything
  // is allocated for them.
  std::string huge = blocks.substr(0, kHeaderBytes);
  const uint32_t n = 0xFFFFFFFF;
  std::memcpy(huge.data() + 84, &n, 4);
  EXPECT_EQ(error(huge), "byte 0: block 0 declares 4294967295 transactions, above the limit of 1000000");
  // Reports that do not parse.
  EXPECT_EQ(ParseReport("chain-verify blocks=1").status().message(),
            "a chain-verify report needs blocks=, transactions=, first=, last=, prev= and head=");
  EXPECT_EQ(ParseReport("chain-verify blocks=1 transactions=1 first=0 last=0 prev=" + Hex(Hash{}) + " head=" +
                        Hex(Hash{}) + "\nforged 1 2\n")
                .status()
                .message(),
            "report line 'forged 1 2': unknown finding 'forged'");
}

TEST(ChainVerifyTest, TheKernelVerifiesShardsAndMergesReports) {
  const KernelInfo* k = FindKernel("chain-verify");
  ASSERT_NE(k, nullptr);
  Hash mid;
  const std::string a = MakeBlocks(0, 2, 3, Hash{}, &mid);
  std::string b = MakeBlocks(2, 2, 3, mid);
  b[TxAt(1, 3, 0) + kTxBodyBytes] ^= 1;  // block 3, transaction 0: its signature
  std::map<std::string, std::string> args;
  std::vector<std::string> in_a = {a}, in_b = {b};
  StatusOr<std::string> ra = k->run({args, in_a, 0, no_stop});
  StatusOr<std::string> rb = k->run({args, in_b, 1, no_stop});
  ASSERT_TRUE(ra.ok() && rb.ok());
  std::vector<std::string> reports = {*rb, *ra};
  StatusOr<std::string> merged = k->run({args, reports, 0, no_stop});
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  std::vector<std::string> whole_in = {a + b};
  StatusOr<std::string> whole = k->run({args, whole_in, 0, no_stop});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*merged, *whole);
  EXPECT_NE(merged->find("blocks=4 transactions=12 bad_signatures=1 bad_merkle=1 bad_links=0 first=0 last=3"),
            std::string::npos)
      << *merged;
  EXPECT_NE(merged->find("\nsignature 3 0\nmerkle 3\n"), std::string::npos) << *merged;
  // Bad input: which one, and what.
  std::vector<std::string> junk = {a, "hello"};
  EXPECT_EQ(k->run({args, junk, 0, no_stop}).status().message(), "input 1: byte 0: 5 bytes left, where a block header takes 88");
  std::vector<std::string> none;
  EXPECT_EQ(k->run({args, none, 0, no_stop}).status().message(),
            "chain-verify needs inputs: shards of blocks, or reports to merge");
  std::map<std::string, std::string> bad_args = {{"fast", "yes"}};
  EXPECT_EQ(k->run({bad_args, in_a, 0, no_stop}).status().message(),
            "kernel chain-verify has no argument 'fast' (it takes: none)");
}

// Where a CUDA device is found (skipped elsewhere, saying why): the GPU's hashes are
// the CPU's, bit for bit, and the kernel's report on a GPU is the CPU's.
TEST(GpuChainTest, Sha256dOnTheGpuMatchesTheCpuExactly) {
  StatusOr<const Ops*> gpu = GpuOps(0);
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  for (size_t length : {1, 55, 56, 64, 88, 144, 1000}) {
    for (size_t count : {0, 1, 3, 100'003}) {
      std::string m(length * count, '\0');
      for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<char>((i * 2654435761u) >> 13);
      std::vector<uint8_t> on_gpu(32 * count), on_cpu(32 * count);
      Status s = (*gpu)->Sha256d(Bytes(m), length, on_gpu);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_TRUE(CpuOps().Sha256d(Bytes(m), length, on_cpu).ok());
      ASSERT_EQ(on_gpu, on_cpu) << "length " << length << ", count " << count;
    }
  }
  Hash mid;
  std::string blocks = MakeBlocks(0, 20, 37, Hash{}, &mid);
  blocks[TxAt(5, 37, 11) + 70] ^= 4;
  const KernelInfo* k = FindKernel("chain-verify");
  std::map<std::string, std::string> args;
  std::vector<std::string> in = {blocks};
  StatusOr<std::string> cpu = k->run({args, in, 0, no_stop, -1});
  StatusOr<std::string> on_gpu = k->run({args, in, 0, no_stop, 0});
  ASSERT_TRUE(cpu.ok() && on_gpu.ok()) << on_gpu.status().message();
  EXPECT_EQ(*on_gpu, *cpu);
  EXPECT_NE(cpu->find("\nsignature 5 11\nmerkle 5\n"), std::string::npos) << *cpu;
}

}  // namespace
}  // namespace meridian::kernels::chain
