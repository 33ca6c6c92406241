#include "kernels/chain.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include <fmt/format.h>
#include <sodium.h>

namespace meridian::kernels::chain {
namespace {

void PutU64(uint64_t v, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetU64(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

uint32_t GetU32(const uint8_t* in) {
  return uint32_t{in[0]} | (uint32_t{in[1]} << 8) | (uint32_t{in[2]} << 16) | (uint32_t{in[3]} << 24);
}

const uint8_t* Bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

BlockHeader ParseHeader(const uint8_t* p) {
  BlockHeader h;
  h.height = GetU64(p + 4);
  std::memcpy(h.prev.data(), p + 12, kHashBytes);
  std::memcpy(h.merkle.data(), p + 12 + kHashBytes, kHashBytes);
  h.time = GetU64(p + 12 + 2 * kHashBytes);
  h.tx_count = GetU32(p + 20 + 2 * kHashBytes);
  return h;
}

// The findings between a run of blocks ending at `last` (hash `head`) and the next
// run starting at `first` (naming `prev`).
void CheckLink(uint64_t last, const Hash& head, uint64_t first, const Hash& prev, std::vector<Finding>& out) {
  if (first > last + 1) {
    out.push_back({Finding::Kind::kGap, last + 1, first - 1});
  } else if (first <= last) {
    out.push_back({Finding::Kind::kRepeat, first, 0});
  } else if (prev != head) {
    out.push_back({Finding::Kind::kLink, first, 0});
  }
}

constexpr std::string_view kReportHeader = "chain-verify ";

const char* KindName(Finding::Kind k) {
  switch (k) {
    case Finding::Kind::kSignature: return "signature";
    case Finding::Kind::kMerkle: return "merkle";
    case Finding::Kind::kLink: return "link";
    case Finding::Kind::kGap: return "gap";
    case Finding::Kind::kRepeat: return "repeat";
  }
  return "?";
}

StatusOr<uint64_t> ParseU64(std::string_view text, std::string_view what) {
  if (text.empty() || text.size() > 20) return InvalidArgumentError(fmt::format("{}: '{}' is not a count", what, text));
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return InvalidArgumentError(fmt::format("{}: '{}' is not a count", what, text));
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return InvalidArgumentError(fmt::format("{}: '{}' is too large", what, text));
    v = v * 10 + d;
  }
  return v;
}

StatusOr<Hash> ParseHash(std::string_view text, std::string_view what) {
  Hash h{};
  size_t got = 0;
  if (text.size() != 2 * kHashBytes ||
      sodium_hex2bin(h.data(), h.size(), text.data(), text.size(), nullptr, &got, nullptr) != 0 || got != kHashBytes) {
    return InvalidArgumentError(fmt::format("{}: expected {} hex digits", what, 2 * kHashBytes));
  }
  return h;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

}  // namespace

bool operator<(const Finding& a, const Finding& b) {
  return std::tuple(a.height, static_cast<int>(a.kind), a.index) < std::tuple(b.height, static_cast<int>(b.kind), b.index);
}

std::array<uint8_t, kTxBodyBytes> TxBody(const Transaction& tx) {
  std::array<uint8_t, kTxBodyBytes> b{};
  std::memcpy(b.data(), tx.from.data(), kKeyBytes);
  std::memcpy(b.data() + kKeyBytes, tx.to.data(), kKeyBytes);
  PutU64(tx.amount, b.data() + 2 * kKeyBytes);
  PutU64(tx.nonce, b.data() + 2 * kKeyBytes + 8);
  return b;
}

void AppendHeader(const BlockHeader& h, std::string& out) {
  uint8_t b[kHeaderBytes];
  std::memcpy(b, kMagic.data(), 4);
  PutU64(h.height, b + 4);
  std::memcpy(b + 12, h.prev.data(), kHashBytes);
  std::memcpy(b + 12 + kHashBytes, h.merkle.data(), kHashBytes);
  PutU64(h.time, b + 12 + 2 * kHashBytes);
  for (int i = 0; i < 4; ++i) b[20 + 2 * kHashBytes + i] = static_cast<uint8_t>(h.tx_count >> (8 * i));
  out.append(reinterpret_cast<const char*>(b), sizeof(b));
}

void AppendTransaction(const Transaction& tx, std::string& out) {
  const std::array<uint8_t, kTxBodyBytes> body = TxBody(tx);
  out.append(reinterpret_cast<const char*>(body.data()), body.size());
  out.append(reinterpret_cast<const char*>(tx.signature.data()), tx.signature.size());
}

void Sign(Transaction& tx, std::span<const uint8_t, kSecretKeyBytes> secret_key) {
  MERIDIAN_CHECK(sodium_init() >= 0);
  const std::array<uint8_t, kTxBodyBytes> body = TxBody(tx);
  crypto_sign_detached(tx.signature.data(), nullptr, body.data(), body.size(), secret_key.data());
}

StatusOr<Hash> AppendBlock(const Ops& ops, uint64_t height, const Hash& prev, uint64_t time,
                           std::span<const Transaction> txs, std::string& out) {
  if (txs.size() > kMaxTxsPerBlock) {
    return InvalidArgumentError(fmt::format("{} transactions in a block; at most {}", txs.size(), kMaxTxsPerBlock));
  }
  std::string tx_bytes;
  tx_bytes.reserve(txs.size() * kTxBytes);
  for (const Transaction& tx : txs) AppendTransaction(tx, tx_bytes);
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<Hash> ids, HashAll(ops, {Bytes(tx_bytes), tx_bytes.size()}, kTxBytes));
  const uint32_t count = static_cast<uint32_t>(txs.size());
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<Hash> root, MerkleRoots(ops, ids, {&count, 1}));
  BlockHeader h{height, prev, root.front(), time, count};
  std::string header;
  AppendHeader(h, header);
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<Hash> hash, HashAll(ops, {Bytes(header), header.size()}, kHeaderBytes));
  out += header;
  out += tx_bytes;
  return hash.front();
}

StatusOr<std::vector<Hash>> HashAll(const Ops& ops, std::span<const uint8_t> messages, size_t length) {
  std::vector<Hash> out(length == 0 ? 0 : messages.size() / length);
  static_assert(sizeof(Hash) == kHashBytes);
  uint8_t* digests = out.empty() ? nullptr : out.front().data();
  MERIDIAN_RETURN_IF_ERROR(ops.Sha256d(messages, length, {digests, out.size() * kHashBytes}));
  return out;
}

StatusOr<std::vector<Hash>> MerkleRoots(const Ops& ops, std::span<const Hash> leaves, std::span<const uint32_t> groups) {
  std::vector<Hash> roots(groups.size(), Hash{});
  // This level's nodes of the groups still above one node, group after group.
  std::vector<Hash> level;
  std::vector<std::pair<size_t, uint32_t>> open;  // (group, nodes at this level)
  size_t at = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (at + groups[g] > leaves.size()) return InvalidArgumentError("the groups need more leaves than were given");
    if (groups[g] == 1) roots[g] = leaves[at];
    if (groups[g] > 1) {
      level.insert(level.end(), leaves.begin() + at, leaves.begin() + at + groups[g]);
      open.emplace_back(g, groups[g]);
    }
    at += groups[g];
  }
  std::vector<uint8_t> pairs;
  while (!open.empty()) {
    pairs.clear();
    size_t node = 0;
    std::vector<std::pair<size_t, uint32_t>> next_open;
    for (const auto& [g, n] : open) {
      for (uint32_t i = 0; i < n; i += 2) {
        const Hash& left = level[node + i];
        const Hash& right = i + 1 < n ? level[node + i + 1] : left;
        pairs.insert(pairs.end(), left.begin(), left.end());
        pairs.insert(pairs.end(), right.begin(), right.end());
      }
      node += n;
      next_open.emplace_back(g, (n + 1) / 2);
    }
    MERIDIAN_ASSIGN_OR_RETURN(level, HashAll(ops, pairs, 2 * kHashBytes));
    open.clear();
    node = 0;
    std::vector<Hash> kept;
    for (const auto& [g, n] : next_open) {
      if (n == 1) {
        roots[g] = level[node];
      } else {
        kept.insert(kept.end(), level.begin() + node, level.begin() + node + n);
        open.emplace_back(g, n);
      }
      node += n;
    }
    level = std::move(kept);
  }
  return roots;
}

uint64_t Report::Count(Finding::Kind kind) const {
  return static_cast<uint64_t>(
      std::count_if(findings.begin(), findings.end(), [&](const Finding& f) { return f.kind == kind; }));
}

StatusOr<Report> Verify(std::string_view data, const Ops& ops, const std::atomic<bool>& stop) {
  MERIDIAN_CHECK(sodium_init() >= 0);
  struct Located {
    BlockHeader header;
    size_t txs_at;  // byte offset of its first transaction
  };
  std::vector<Located> blocks;
  std::vector<uint8_t> headers;
  uint64_t transactions = 0;
  for (size_t pos = 0; pos < data.size();) {
    const size_t left = data.size() - pos;
    if (left < kHeaderBytes) {
      return InvalidArgumentError(fmt::format("byte {}: {} bytes left, where a block header takes {}", pos, left,
                                              kHeaderBytes));
    }
    if (data.substr(pos, kMagic.size()) != kMagic) {
      return InvalidArgumentError(fmt::format("byte {}: not a block (blocks start with '{}')", pos, kMagic));
    }
    const BlockHeader h = ParseHeader(Bytes(data) + pos);
    if (h.tx_count > kMaxTxsPerBlock) {
      return InvalidArgumentError(fmt::format("byte {}: block {} declares {} transactions, above the limit of {}", pos,
                                              h.height, h.tx_count, kMaxTxsPerBlock));
    }
    const size_t body = static_cast<size_t>(h.tx_count) * kTxBytes;
    if (left - kHeaderBytes < body) {
      return InvalidArgumentError(fmt::format("byte {}: block {} declares {} transactions ({} bytes) but {} bytes follow",
                                              pos, h.height, h.tx_count, body, left - kHeaderBytes));
    }
    headers.insert(headers.end(), Bytes(data) + pos, Bytes(data) + pos + kHeaderBytes);
    blocks.push_back({h, pos + kHeaderBytes});
    transactions += h.tx_count;
    pos += kHeaderBytes + body;
  }
  if (blocks.empty()) return InvalidArgumentError("no blocks");

  // Hashes on the task's device: every header, every transaction, every Merkle level.
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<Hash> block_hashes, HashAll(ops, headers, kHeaderBytes));
  std::vector<uint8_t> txs;
  txs.reserve(transactions * kTxBytes);
  std::vector<uint32_t> groups;
  for (const Located& b : blocks) {
    const uint8_t* at = Bytes(data) + b.txs_at;
    txs.insert(txs.end(), at, at + static_cast<size_t>(b.header.tx_count) * kTxBytes);
    groups.push_back(b.header.tx_count);
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<Hash> ids, HashAll(ops, txs, kTxBytes));
  std::vector<uint8_t>().swap(txs);
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<Hash> roots, MerkleRoots(ops, ids, groups));

  Report r;
  r.blocks = blocks.size();
  r.transactions = transactions;
  r.first = blocks.front().header.height;
  r.prev = blocks.front().header.prev;
  // The head is the highest block (the last, unless the shard is out of order, which
  // the links below report).
  const size_t top = static_cast<size_t>(
      std::max_element(blocks.begin(), blocks.end(),
                       [](const Located& a, const Located& b) { return a.header.height < b.header.height; }) -
      blocks.begin());
  r.last = blocks[top].header.height;
  r.head = block_hashes[top];
  uint64_t checked = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const BlockHeader& h = blocks[b].header;
    if (b > 0) CheckLink(blocks[b - 1].header.height, block_hashes[b - 1], h.height, h.prev, r.findings);
    if (roots[b] != h.merkle) r.findings.push_back({Finding::Kind::kMerkle, h.height, 0});
    for (uint32_t i = 0; i < h.tx_count; ++i) {
      if ((++checked & 1023) == 0 && stop.load()) return Status(StatusCode::kCancelled, "stopped");
      const uint8_t* tx = Bytes(data) + blocks[b].txs_at + static_cast<size_t>(i) * kTxBytes;
      if (crypto_sign_verify_detached(tx + kTxBodyBytes, tx, kTxBodyBytes, tx) != 0) {
        r.findings.push_back({Finding::Kind::kSignature, h.height, i});
      }
    }
  }
  std::sort(r.findings.begin(), r.findings.end());
  return r;
}

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::string FormatReport(const Report& r) {
  std::string out = fmt::format(
      "chain-verify blocks={} transactions={} bad_signatures={} bad_merkle={} bad_links={} first={} last={} prev={} "
      "head={}\n",
      r.blocks, r.transactions, r.Count(Finding::Kind::kSignature), r.Count(Finding::Kind::kMerkle),
      r.findings.size() - r.Count(Finding::Kind::kSignature) - r.Count(Finding::Kind::kMerkle), r.first, r.last,
      Hex(r.prev), Hex(r.head));
  for (const Finding& f : r.findings) {
    switch (f.kind) {
      case Finding::Kind::kSignature:
      case Finding::Kind::kGap:
        fmt::format_to(std::back_inserter(out), "{} {} {}\n", KindName(f.kind), f.height, f.index);
        break;
      default:
        fmt::format_to(std::back_inserter(out), "{} {}\n", KindName(f.kind), f.height);
    }
  }
  return out;
}

bool IsReport(std::string_view text) { return text.substr(0, kReportHeader.size()) == kReportHeader; }

StatusOr<Report> ParseReport(std::string_view text) {
  if (!IsReport(text)) return InvalidArgumentError("not a chain-verify report");
  Report r;
  size_t eol = text.find('\n');
  std::string_view first = text.substr(0, eol);
  bool seen[6] = {};
  for (std::string_view f : Fields(first.substr(kReportHeader.size()))) {
    const size_t eq = f.find('=');
    const std::string_view key = f.substr(0, eq), value = eq == std::string_view::npos ? "" : f.substr(eq + 1);
    const std::string what = fmt::format("report field '{}'", key);
    if (key == "blocks") {
      MERIDIAN_ASSIGN_OR_RETURN(r.blocks, ParseU64(value, what));
      seen[0] = true;
    } else if (key == "transactions") {
      MERIDIAN_ASSIGN_OR_RETURN(r.transactions, ParseU64(value, what));
      seen[1] = true;
    } else if (key == "first") {
      MERIDIAN_ASSIGN_OR_RETURN(r.first, ParseU64(value, what));
      seen[2] = true;
    } else if (key == "last") {
      MERIDIAN_ASSIGN_OR_RETURN(r.last, ParseU64(value, what));
      seen[3] = true;
    } else if (key == "prev") {
      MERIDIAN_ASSIGN_OR_RETURN(r.prev, ParseHash(value, what));
      seen[4] = true;
    } else if (key == "head") {
      MERIDIAN_ASSIGN_OR_RETURN(r.head, ParseHash(value, what));
      seen[5] = true;
    }
    // The counts are recounted from the findings below.
  }
  if (!std::all_of(std::begin(seen), std::end(seen), [](bool b) { return b; })) {
    return InvalidArgumentError("a chain-verify report needs blocks=, transactions=, first=, last=, prev= and head=");
  }
  if (r.last < r.first) return InvalidArgumentError("a chain-verify report's last= is below its first=");
  size_t pos = eol == std::string_view::npos ? text.size() : eol + 1;
  while (pos < text.size()) {
    eol = text.find('\n', pos);
    const std::string_view line = text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    const std::vector<std::string_view> f = Fields(line);
    if (f.empty()) continue;
    Finding finding;
    size_t want = 2;
    if (f[0] == "signature" || f[0] == "gap") {
      finding.kind = f[0] == "gap" ? Finding::Kind::kGap : Finding::Kind::kSignature;
      want = 3;
    } else if (f[0] == "merkle") {
      finding.kind = Finding::Kind::kMerkle;
    } else if (f[0] == "link") {
      finding.kind = Finding::Kind::kLink;
    } else if (f[0] == "repeat") {
      finding.kind = Finding::Kind::kRepeat;
    } else {
      return InvalidArgumentError(fmt::format("report line '{}': unknown finding '{}'", line, f[0]));
    }
    if (f.size() != want) return InvalidArgumentError(fmt::format("report line '{}': expected {} fields", line, want));
    MERIDIAN_ASSIGN_OR_RETURN(finding.height, ParseU64(f[1], fmt::format("report line '{}'", line)));
    if (want == 3) {
      MERIDIAN_ASSIGN_OR_RETURN(finding.index, ParseU64(f[2], fmt::format("report line '{}'", line)));
    }
    r.findings.push_back(finding);
  }
  std::sort(r.findings.begin(), r.findings.end());
  return r;
}

StatusOr<Report> Merge(std::vector<Report> parts) {
  if (parts.empty()) return InvalidArgumentError("nothing to merge");
  std::sort(parts.begin(), parts.end(),
            [](const Report& a, const Report& b) { return std::tie(a.first, a.last) < std::tie(b.first, b.last); });
  Report out;
  out.first = parts.front().first;
  out.prev = parts.front().prev;
  out.last = parts.front().last;
  out.head = parts.front().head;
  for (size_t i = 0; i < parts.size(); ++i) {
    Report& p = parts[i];
    if (i > 0) {
      CheckLink(out.last, out.head, p.first, p.prev, out.findings);
      if (p.last > out.last) {
        out.last = p.last;
        out.head = p.head;
      }
    }
    out.blocks += p.blocks;
    out.transactions += p.transactions;
    out.findings.insert(out.findings.end(), p.findings.begin(), p.findings.end());
  }
  std::sort(out.findings.begin(), out.findings.end());
  return out;
}

}  // namespace meridian::kernels::chain
