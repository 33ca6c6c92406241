// Blocks of signed transfers, and their verification: what the `chain-verify` kernel
// reads and checks (docs/chain.md has the format byte by byte).
//
// A block is a header and its transactions. A transaction moves `amount` from the
// holder of an Ed25519 key to another key, numbered by the sender's `nonce`, and is
// signed by the sender over its first 80 bytes. Ids are Bitcoin's: a transaction's id
// is SHA-256d of its 144 bytes, the Merkle root pairs ids level by level (an odd last
// node paired with itself), and a block's hash is SHA-256d of its 88-byte header, which
// the next block names as `prev`. A shard of a chain is blocks of consecutive heights
// laid end to end.
//
// Verification finds, by position: transactions whose signature does not verify
// (height and index in the block), blocks whose Merkle root is not their
// transactions', and breaks in the chain (a `prev` that is not the previous block's
// hash, missing or repeated heights). Hashing runs on the task's device (kernels/ops.h:
// libsodium on the CPU, CUDA on a GPU); signatures are checked with libsodium.
// Reports of shards merge into the report of the whole chain, checking the links
// between shards.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kernels/ops.h"

namespace meridian::kernels::chain {

inline constexpr size_t kHashBytes = 32;
inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kSignatureBytes = 64;
inline constexpr size_t kTxBodyBytes = 2 * kKeyBytes + 16;               // from, to, amount, nonce: what is signed
inline constexpr size_t kTxBytes = kTxBodyBytes + kSignatureBytes;       // 144
inline constexpr size_t kHeaderBytes = 4 + 8 + 2 * kHashBytes + 8 + 4;  // 88
inline constexpr std::string_view kMagic = "MBK1";
// More would not fit a task's 1 GiB input anyway; bounds what a header may ask for.
inline constexpr uint32_t kMaxTxsPerBlock = 1'000'000;

using Hash = std::array<uint8_t, kHashBytes>;
using PublicKey = std::array<uint8_t, kKeyBytes>;
using Signature = std::array<uint8_t, kSignatureBytes>;

struct Transaction {
  PublicKey from{};
  PublicKey to{};
  uint64_t amount = 0;
  uint64_t nonce = 0;
  Signature signature{};
};

struct BlockHeader {
  uint64_t height = 0;
  Hash prev{};    // the previous block's hash; zeros before the first block
  Hash merkle{};  // the root over the transactions' ids; zeros for no transactions
  uint64_t time = 0;  // unix seconds
  uint32_t tx_count = 0;
};

// The bytes a sender signs: from, to, amount and nonce (little-endian).
std::array<uint8_t, kTxBodyBytes> TxBody(const Transaction& tx);
// Appends the header's 88 bytes, or the transaction's 144, to `out`.
void AppendHeader(const BlockHeader& h, std::string& out);
void AppendTransaction(const Transaction& tx, std::string& out);

inline constexpr size_t kSecretKeyBytes = 64;  // libsodium's Ed25519 secret key (seed and public key)

// Signs `tx` with the sender's secret key (whose public half should be tx.from).
void Sign(Transaction& tx, std::span<const uint8_t, kSecretKeyBytes> secret_key);
// Appends a block of `txs` at `height` after the block hashed `prev`: its header
// (with the Merkle root of the transactions) and the transactions. Returns its hash.
StatusOr<Hash> AppendBlock(const Ops& ops, uint64_t height, const Hash& prev, uint64_t time,
                           std::span<const Transaction> txs, std::string& out);

// SHA-256d of each of `count` messages of `length` bytes laid end to end.
StatusOr<std::vector<Hash>> HashAll(const Ops& ops, std::span<const uint8_t> messages, size_t length);
// The Merkle root of each group of leaves: groups[b] leaves at a time, in order
// (zeros for an empty group). Every level of every group is one Sha256d call.
StatusOr<std::vector<Hash>> MerkleRoots(const Ops& ops, std::span<const Hash> leaves, std::span<const uint32_t> groups);

struct Finding {
  enum class Kind { kSignature, kMerkle, kLink, kGap, kRepeat };
  Kind kind = Kind::kSignature;
  uint64_t height = 0;  // kGap: the first missing height
  uint64_t index = 0;   // kSignature: the transaction's index in its block; kGap: the last missing height
  friend bool operator==(const Finding&, const Finding&) = default;
  // A report's order: by height, then kind, then index.
  friend bool operator<(const Finding& a, const Finding& b);
};

// What a verification found over blocks [first, last].
struct Report {
  uint64_t blocks = 0;
  uint64_t transactions = 0;
  uint64_t first = 0;
  uint64_t last = 0;
  Hash prev{};  // the first block's prev
  Hash head{};  // the last block's hash
  std::vector<Finding> findings;  // sorted by height, kind, index

  uint64_t Count(Finding::Kind kind) const;
  bool valid() const { return findings.empty(); }
};

// Verifies blocks laid end to end (a shard). An error says what is malformed and at
// which byte; findings are not errors.
StatusOr<Report> Verify(std::string_view blocks, const Ops& ops, const std::atomic<bool>& stop);

// "chain-verify blocks= transactions= bad_signatures= bad_merkle= bad_links= first=
// last= prev= head=" then one line per finding: "signature H I", "merkle H",
// "link H", "gap H1 H2", "repeat H".
std::string FormatReport(const Report& r);
bool IsReport(std::string_view text);
StatusOr<Report> ParseReport(std::string_view text);
// One report of several, in height order, with the links between them checked:
// a part whose `prev` is not the previous part's `head` is a broken link at its first
// height, heights no part covers are a gap, heights two parts cover are repeated.
StatusOr<Report> Merge(std::vector<Report> parts);

std::string Hex(std::span<const uint8_t> bytes);

}  // namespace meridian::kernels::chain
