#include "collective/communicator.h"

#include <algorithm>
#include <barrier>
#include <functional>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "security/pki.h"
#include "security/ticket.h"

namespace meridian::collective {
namespace {

constexpr int64_t kHour = int64_t{3600} * 1'000'000;

struct Gang {
  std::vector<RankAddress> addresses;
  std::vector<std::unique_ptr<Communicator>> ranks;
};

// `sites[r]` is rank r's site; every rank on 127.0.0.1 with the secret "s3cret"
// unless `secret_of` says otherwise.
Gang MakeGang(const std::vector<std::string>& sites, CommunicatorOptions base = {},
              std::function<std::string(int)> secret_of = nullptr,
              std::function<std::shared_ptr<const security::TlsContext>(int)> tls_of = nullptr) {
  const int n = static_cast<int>(sites.size());
  std::vector<std::unique_ptr<TcpListener>> listeners;
  base.ranks.clear();
  for (int r = 0; r < n; ++r) {
    StatusOr<std::unique_ptr<TcpListener>> l = TcpListener::Listen("127.0.0.1", 0);
    EXPECT_TRUE(l.ok());
    base.ranks.push_back({"127.0.0.1:" + std::to_string((*l)->port()), sites[r]});
    listeners.push_back(std::move(*l));
  }
  Gang g;
  g.addresses = base.ranks;
  for (int r = 0; r < n; ++r) {
    CommunicatorOptions o = base;
    o.rank = r;
    o.secret = secret_of ? secret_of(r) : "s3cret";
    if (tls_of) o.tls = tls_of(r);
    StatusOr<std::unique_ptr<Communicator>> c = Communicator::Create(std::move(listeners[r]), std::move(o));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    g.ranks.push_back(std::move(*c));
  }
  return g;
}

// Runs `body(rank)` on every rank at once; their statuses by rank.
std::vector<Status> OnEveryRank(int n, const std::function<Status(int)>& body) {
  std::vector<Status> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = body(r); });
  for (std::thread& t : threads) t.join();
  return out;
}

// Rank r's vector: small integers, so that any order of float additions is exact.
std::vector<float> Data(int r, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((r + 1) * 1000 + static_cast<int>(i % 977));
  return v;
}

void ExpectSummed(const std::vector<std::vector<float>>& got, int n) {
  for (size_t r = 0; r < got.size(); ++r) {
    size_t wrong = 0;
    for (size_t i = 0; i < got[r].size(); ++i) {
      const float want = static_cast<float>(1000 * n * (n + 1) / 2 + n * static_cast<int>(i % 977));
      if (got[r][i] != want) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r;
  }
}

TEST(BlockRangeTest, BlocksCoverTheVectorAndDifferByAtMostOne) {
  EXPECT_EQ(BlockRange(10, 4, 0), (std::pair<size_t, size_t>{0, 3}));
  EXPECT_EQ(BlockRange(10, 4, 1), (std::pair<size_t, size_t>{3, 6}));
  EXPECT_EQ(BlockRange(10, 4, 2), (std::pair<size_t, size_t>{6, 8}));
  EXPECT_EQ(BlockRange(10, 4, 3), (std::pair<size_t, size_t>{8, 10}));
  EXPECT_EQ(BlockRange(2, 4, 3), (std::pair<size_t, size_t>{2, 2}));
}

TEST(CollectiveTest, ARingAllReduceSumsEveryRanksVectorExactly) {
  CommunicatorOptions o;
  o.chunk_bytes = 64 << 10;  // many frames per block
  Gang g = MakeGang({"a", "a", "a", "a"}, o);
  const size_t count = 1'000'003;  // blocks of unequal size
  std::vector<std::vector<float>> data;
  for (int r = 0; r < 4; ++r) data.push_back(Data(r, count));
  std::vector<Status> s = OnEveryRank(4, [&](int r) { return g.ranks[r]->AllReduce(data[r], ReduceOp::kSum); });
  for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
  ExpectSummed(data, 4);
  // Each rank sent 2(n-1)/n of the vector to the next rank: every block but its own
  // in the reduce-scatter, every block but the next rank's in the all-gather.
  for (int r = 0; r < 4; ++r) {
    size_t sent = 0;
    for (int b = 0; b < 4; ++b) {
      const auto [f, l] = BlockRange(count, 4, b);
      sent += (l - f) * ((b != r ? 1 : 0) + (b != (r + 1) % 4 ? 1 : 0));
    }
    EXPECT_EQ(g.ranks[r]->bytes_sent().at("a"), static_cast<int64_t>(sent * sizeof(float))) << r;
  }
}

// Ranks on one host send through shared memory (each rank to the next: one
// connection each), or all over TCP when told not to; the sums are the same.
TEST(CollectiveTest, RanksOnOneHostSendThroughSharedMemoryOrTcpAlike) {
  for (bool shared : {true, false}) {
    CommunicatorOptions o;
    o.shared_memory = shared;
    o.chunk_bytes = 64 << 10;
    Gang g = MakeGang({"a", "a", "a", "a"}, o);
    std::vector<std::vector<float>> data;
    for (int r = 0; r < 4; ++r) data.push_back(Data(r, 300'007));
    std::vector<Status> s = OnEveryRank(4, [&](int r) { return g.ranks[r]->AllReduce(data[r], ReduceOp::kSum); });
    for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
    ExpectSummed(data, 4);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(g.ranks[r]->shared_memory_connections(), shared ? 1 : 0) << r;
  }
}

// A rank listens on TCP before its communicator (and local socket) exists: a rank
// that reaches it then still ends up in shared memory, and nothing is refused.
TEST(CollectiveTest, ARankThatStartsLaterIsStillReachedThroughSharedMemory) {
  std::vector<std::unique_ptr<TcpListener>> listeners;
  std::vector<RankAddress> ranks;
  for (int r = 0; r < 2; ++r) {
    listeners.push_back(*TcpListener::Listen("127.0.0.1", 0));
    ranks.push_back({"127.0.0.1:" + std::to_string(listeners.back()->port()), "a"});
  }
  auto make = [&](int r) {
    CommunicatorOptions o;
    o.rank = r;
    o.ranks = ranks;
    o.secret = "s3cret";
    return *Communicator::Create(std::move(listeners[r]), o);
  };
  std::vector<std::vector<float>> data = {Data(0, 20'000), Data(1, 20'000)};
  std::unique_ptr<Communicator> first = make(0), second;
  Status s0;
  std::thread early([&] { s0 = first->AllReduce(data[0], ReduceOp::kSum); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  second = make(1);
  Status s1 = second->AllReduce(data[1], ReduceOp::kSum);
  early.join();
  ASSERT_TRUE(s0.ok()) << s0.ToString();
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  ExpectSummed(data, 2);
  EXPECT_EQ(first->shared_memory_connections(), 1);
  EXPECT_EQ(second->shared_memory_connections(), 1);
  EXPECT_EQ(first->refused() + second->refused(), 0);
}

TEST(CollectiveTest, MaxMinAndDoublesReduceElementWise) {
  Gang g = MakeGang({"a", "a", "a"});
  std::vector<std::vector<double>> mx(3), mn(3);
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 1000; ++i) {
      mx[r].push_back((i + r) % 3 + 0.5);
      mn[r].push_back(-((i * 7 + r) % 5) - 0.25);
    }
  }
  std::vector<Status> s = OnEveryRank(3, [&](int r) {
    Status a = g.ranks[r]->AllReduce(mx[r], ReduceOp::kMax);
    return a.ok() ? g.ranks[r]->AllReduce(mn[r], ReduceOp::kMin) : a;
  });
  for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(mx[r][i], 2.5) << r << " " << i;
      double least = 0;
      for (int k = 0; k < 3; ++k) least = std::min(least, -((i * 7 + k) % 5) - 0.25);
      ASSERT_EQ(mn[r][i], least) << r << " " << i;
    }
  }
}

TEST(CollectiveTest, ReduceScatterAllGatherAndBroadcastGiveEachRankItsShare) {
  Gang g = MakeGang({"a", "a", "a"});
  const size_t count = 10;
  std::vector<std::vector<float>> rs;
  for (int r = 0; r < 3; ++r) rs.push_back(Data(r, count));
  std::vector<std::vector<uint8_t>> gathered(3, std::vector<uint8_t>(11, 0));
  std::vector<std::vector<uint8_t>> cast(3, std::vector<uint8_t>(100'000, 0));
  for (int r = 0; r < 3; ++r) {
    const auto [f, l] = BlockRange(11, 3, r);
    for (size_t i = f; i < l; ++i) gathered[r][i] = static_cast<uint8_t>(10 * r + i);
  }
  for (size_t i = 0; i < cast[2].size(); ++i) cast[2][i] = static_cast<uint8_t>(i * 31);
  std::vector<Status> s = OnEveryRank(3, [&](int r) {
    Status a = g.ranks[r]->ReduceScatter(rs[r], ReduceOp::kSum);
    if (a.ok()) a = g.ranks[r]->AllGather(std::as_writable_bytes(std::span<uint8_t>(gathered[r])));
    if (a.ok()) a = g.ranks[r]->Broadcast(std::as_writable_bytes(std::span<uint8_t>(cast[r])), 2);
    return a;
  });
  for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
  for (int r = 0; r < 3; ++r) {
    const auto [f, l] = BlockRange(count, 3, r);
    for (size_t i = f; i < l; ++i) EXPECT_EQ(rs[r][i], 6000 + 3 * static_cast<int>(i)) << r << " " << i;
    // Blocks of 4, 4 and 3 bytes, each from its rank.
    EXPECT_EQ(gathered[r], (std::vector<uint8_t>{0, 1, 2, 3, 14, 15, 16, 17, 28, 29, 30})) << r;
    EXPECT_EQ(cast[r], cast[2]) << r;
  }
  EXPECT_EQ(cast[0][7], static_cast<uint8_t>(7 * 31));
}

TEST(CollectiveTest, HierarchicalAllReduceCrossesSitesOnlyBetweenLeaders) {
  // Three ranks at one site, two at another.
  Gang g = MakeGang({"eu", "eu", "eu", "us", "us"});
  const size_t count = 100'001;
  std::vector<std::vector<float>> data;
  for (int r = 0; r < 5; ++r) data.push_back(Data(r, count));
  std::vector<Status> s = OnEveryRank(5, [&](int r) { return g.ranks[r]->AllReduce(data[r], ReduceOp::kSum); });
  for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
  ExpectSummed(data, 5);
  // The leaders (ranks 0 and 3) each sent the other one the whole vector (half in the
  // reduce-scatter, half in the all-gather); nobody else sent a byte across.
  const int64_t whole = static_cast<int64_t>(count * sizeof(float));
  EXPECT_EQ(g.ranks[0]->bytes_sent().at("us"), whole);
  EXPECT_EQ(g.ranks[3]->bytes_sent().at("eu"), whole);
  for (int r : {1, 2}) EXPECT_EQ(g.ranks[r]->bytes_sent().count("us"), 0u) << r;
  EXPECT_EQ(g.ranks[4]->bytes_sent().count("eu"), 0u);

  // A flat ring over the same ranks sends 2(n-1)/n of the vector across twice.
  for (int r = 0; r < 5; ++r) data[r] = Data(r, count);
  Gang flat = MakeGang({"eu", "eu", "eu", "us", "us"});
  s = OnEveryRank(5, [&](int r) { return flat.ranks[r]->AllReduce(data[r], ReduceOp::kSum, Algorithm::kRing); });
  for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
  ExpectSummed(data, 5);
  EXPECT_GT(flat.ranks[2]->bytes_sent().at("us"), whole * 3 / 2);
  EXPECT_GT(flat.ranks[4]->bytes_sent().at("eu"), whole * 3 / 2);
}

TEST(CollectiveTest, AnEmulatedWanLinkStillGivesExactResults) {
  CommunicatorOptions o;
  o.links[{"eu", "us"}] = objects::LinkShape{.rtt_us = 20'000, .bandwidth_bps = 1'000'000'000};
  Gang g = MakeGang({"eu", "eu", "us", "us"}, o);
  std::vector<std::vector<float>> data;
  for (int r = 0; r < 4; ++r) data.push_back(Data(r, 300'000));
  for (Algorithm a : {Algorithm::kHierarchical, Algorithm::kRing}) {
    for (int r = 0; r < 4; ++r) data[r] = Data(r, 300'000);
    std::vector<Status> s = OnEveryRank(4, [&](int r) { return g.ranks[r]->AllReduce(data[r], ReduceOp::kSum, a); });
    for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
    ExpectSummed(data, 4);
  }
}

TEST(CollectiveTest, RanksProveTheClustersCertificateInTls) {
  StatusOr<security::KeyPair> ca = security::MakeCa("test-ca", kHour);
  ASSERT_TRUE(ca.ok());
  std::vector<std::shared_ptr<const security::TlsContext>> tls;
  for (int r = 0; r < 3; ++r) {
    StatusOr<security::KeyPair> node = security::Issue(*ca, {"node:n" + std::to_string(r), {"127.0.0.1"}, kHour, true});
    ASSERT_TRUE(node.ok());
    StatusOr<std::shared_ptr<security::TlsContext>> c =
        security::TlsContext::Create({ca->cert_pem, node->cert_pem, node->key_pem});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    tls.push_back(*c);
  }
  CommunicatorOptions o;
  o.shared_memory = false;  // else ranks of one host skip TLS for shared memory
  Gang g = MakeGang({"a", "a", "b"}, o, nullptr, [&](int r) { return tls[r]; });
  std::vector<std::vector<float>> data;
  for (int r = 0; r < 3; ++r) data.push_back(Data(r, 50'000));
  std::vector<Status> s = OnEveryRank(3, [&](int r) { return g.ranks[r]->AllReduce(data[r], ReduceOp::kSum); });
  for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
  ExpectSummed(data, 3);
}

TEST(CollectiveTest, ARankWithAnotherGangsSecretIsRefusedAndNamed) {
  CommunicatorOptions o;
  o.timeout_us = 1'000'000;
  Gang g = MakeGang({"a", "a"}, o, [](int r) { return r == 1 ? std::string("other") : std::string("s3cret"); });
  std::vector<std::vector<float>> data = {Data(0, 100), Data(1, 100)};
  std::vector<Status> s = OnEveryRank(2, [&](int r) { return g.ranks[r]->AllReduce(data[r], ReduceOp::kSum); });
  // Each refuses the other's connection, and says who refused its own.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s[r].code(), StatusCode::kPermissionDenied) << s[r].ToString();
    EXPECT_NE(s[r].message().find(fmt::format("rank {} (127.0.0.1:", 1 - r)), std::string::npos) << s[r].ToString();
    EXPECT_NE(s[r].message().find("refused our connection"), std::string::npos) << s[r].ToString();
    EXPECT_EQ(g.ranks[r]->refused(), 1);
  }
  EXPECT_EQ(data[0], Data(0, 100));  // the block it never received is untouched
}

// The handshake as a rank makes it: its rank, generation and "ADDRESS SITE", proved
// with `secret`; the listener's answer (1 accepted, 0 refused, 2 stale), or -1.
int Hello(TcpStream& s, uint32_t rank, uint32_t generation, const std::string& where,
          const std::string& secret = "s3cret") {
  std::string nonce(32, '\0');
  uint32_t theirs = 0;
  if (!s.ReadExact(nonce.data(), nonce.size()).ok() || !s.ReadExact(&theirs, sizeof(theirs)).ok()) return -1;
  const std::string proof = security::GangLaunchProof(
      secret, nonce, fmt::format("collective rank {} generation {} at {}", rank, generation, where));
  const uint16_t length = static_cast<uint16_t>(where.size());
  if (!s.WriteAll(&rank, sizeof(rank)).ok() || !s.WriteAll(&generation, sizeof(generation)).ok() ||
      !s.WriteAll(&length, sizeof(length)).ok() || !s.WriteAll(where.data(), where.size()).ok() ||
      !s.WriteAll(proof.data(), proof.size()).ok()) {
    return -1;
  }
  uint8_t answer = 0;
  return s.ReadExact(&answer, 1).ok() ? answer : -1;
}

TEST(CollectiveTest, AFrameLongerThanTheAlgorithmAsksIsRefusedBeforeItIsRead) {
  CommunicatorOptions o;
  o.timeout_us = 5'000'000;
  Gang g = MakeGang({"a", "a"}, o);
  // Rank 1's place is taken by a peer that knows the secret and announces 1 GiB.
  auto [host, port] = *SplitHostPort(g.addresses[0].address, "rank 0");
  const std::string where = g.addresses[1].address + " a";
  StatusOr<std::unique_ptr<TcpStream>> liar = TcpStream::Connect(host, port, 1'000'000);
  ASSERT_TRUE(liar.ok());
  ASSERT_EQ(Hello(**liar, 1, 0, where), 1);
  const uint32_t header[4] = {0x4C43524D, 1u << 30, 0, 0};
  ASSERT_TRUE((*liar)->WriteAll(header, sizeof(header)).ok());
  std::vector<float> data = Data(0, 1000);
  Status s = g.ranks[0]->AllReduce(data, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("sent a frame of 1073741824 bytes where 2000 were due"), std::string::npos)
      << s.ToString();
  // A second connection claiming rank 1 in the same generation is refused.
  StatusOr<std::unique_ptr<TcpStream>> again = TcpStream::Connect(host, port, 1'000'000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Hello(**again, 1, 0, where), 0);
  EXPECT_EQ(g.ranks[0]->refused(), 1);
  // So is a hello whose proof does not cover what it claims (another address), and
  // one that announces an address longer than 255 bytes is cut off unread.
  StatusOr<std::unique_ptr<TcpStream>> moved = TcpStream::Connect(host, port, 1'000'000);
  ASSERT_TRUE(moved.ok());
  std::string nonce(32, '\0');
  uint32_t theirs = 0;
  ASSERT_TRUE((*moved)->ReadExact(nonce.data(), 32).ok());
  ASSERT_TRUE((*moved)->ReadExact(&theirs, 4).ok());
  EXPECT_EQ(theirs, 0u);
  const uint32_t hello[2] = {1, 1};
  const uint16_t length = 1000;
  ASSERT_TRUE((*moved)->WriteAll(hello, sizeof(hello)).ok());
  ASSERT_TRUE((*moved)->WriteAll(&length, sizeof(length)).ok());
  uint8_t answer = 7;
  EXPECT_FALSE((*moved)->ReadExact(&answer, 1).ok());
  EXPECT_EQ(g.ranks[0]->refused(), 2);
}

// Someone on the host who does not know the secret listens where rank 1 would for
// shared memory: rank 0 asks it to prove the secret, it cannot, and rank 0 reaches
// rank 1 over TCP instead; it never sees a byte of the data.
TEST(CollectiveTest, AStrangerHoldingARanksLocalSocketIsNotTrusted) {
  std::vector<std::unique_ptr<TcpListener>> listeners;
  std::vector<RankAddress> ranks;
  for (int r = 0; r < 2; ++r) {
    listeners.push_back(*TcpListener::Listen("127.0.0.1", 0));
    ranks.push_back({"127.0.0.1:" + std::to_string(listeners.back()->port()), "a"});
  }
  // Rank 1's local name: an HMAC of the secret, which /proc/net/unix shows anyone.
  const std::string name =
      "meridian-collective-" +
      security::Hex(security::GangLaunchProof("s3cret", "local", "rank 1 at " + ranks[1].address)).substr(0, 40);
  StatusOr<std::unique_ptr<TcpListener>> squatter = TcpListener::ListenLocal(name);
  ASSERT_TRUE(squatter.ok()) << squatter.status().ToString();
  int64_t data_bytes_seen = -1;
  std::thread stranger([&] {
    StatusOr<std::unique_ptr<TcpStream>> c = (*squatter)->Accept();
    if (!c.ok()) return;
    std::string nonce(32, '\0');
    if (!(*c)->ReadExact(nonce.data(), 32).ok()) return;
    const std::string forged = std::string(32, 'n') + std::string(4, '\0') + std::string(32, 'p');
    if (!(*c)->WriteAll(forged.data(), forged.size()).ok()) return;
    if (!(*c)->SetTimeout(2'000'000).ok()) return;
    char byte;
    data_bytes_seen = 0;
    while ((*c)->ReadExact(&byte, 1).ok()) ++data_bytes_seen;
  });
  std::vector<std::unique_ptr<Communicator>> g;
  for (int r = 0; r < 2; ++r) {
    CommunicatorOptions o;
    o.rank = r;
    o.ranks = ranks;
    o.secret = "s3cret";
    g.push_back(*Communicator::Create(std::move(listeners[r]), o));
  }
  std::vector<std::vector<float>> data = {Data(0, 10'000), Data(1, 10'000)};
  std::vector<Status> s = OnEveryRank(2, [&](int r) { return g[r]->AllReduce(data[r], ReduceOp::kSum); });
  for (const Status& x : s) ASSERT_TRUE(x.ok()) << x.ToString();
  ExpectSummed(data, 2);
  EXPECT_EQ(g[0]->shared_memory_connections(), 0);  // to rank 1: TCP after the stranger failed
  EXPECT_EQ(g[1]->shared_memory_connections(), 1);  // to rank 0: its own local socket
  (*squatter)->Shutdown();
  stranger.join();
  EXPECT_EQ(data_bytes_seen, 0);  // rank 0 hung up after the failed proof
}

// A gang that loses a rank goes on with its replacement, which listens elsewhere: the
// survivors' collective fails, they rejoin in the next generation, the replacement
// (starting in generation 0) is told it is stale and catches up, and they all-reduce
// exactly again. A connection of the old generation is answered "stale".
TEST(CollectiveTest, SurvivorsRejoinWithAReplacementRankThatListensElsewhere) {
  CommunicatorOptions o;
  o.timeout_us = 3'000'000;
  Gang g = MakeGang({"a", "a", "b"}, o);
  std::vector<std::vector<float>> data;
  for (int r = 0; r < 3; ++r) data.push_back(Data(r, 30'001));
  std::vector<Status> first = OnEveryRank(3, [&](int r) { return g.ranks[r]->AllReduce(data[r], ReduceOp::kSum); });
  for (const Status& x : first) ASSERT_TRUE(x.ok()) << x.ToString();
  // Rank 2 is lost.
  g.ranks[2].reset();
  std::vector<Status> broken = OnEveryRank(2, [&](int r) {
    std::vector<float> d = Data(r, 30'001);
    return g.ranks[r]->AllReduce(d, ReduceOp::kSum);
  });
  for (const Status& x : broken) EXPECT_FALSE(x.ok());
  // The survivors rejoin (before the replacement is placed, as a scheduler takes
  // longer than that), and their replacement listens on another port, at another site.
  for (int r = 0; r < 2; ++r) g.ranks[r]->Rejoin();
  StatusOr<std::unique_ptr<TcpListener>> l = TcpListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  CommunicatorOptions replacement = o;
  replacement.secret = "s3cret";
  replacement.ranks = g.addresses;
  replacement.ranks[2] = {"127.0.0.1:" + std::to_string((*l)->port()), "c"};
  replacement.rank = 2;
  StatusOr<std::unique_ptr<Communicator>> c = Communicator::Create(std::move(*l), replacement);
  ASSERT_TRUE(c.ok());
  g.ranks[2] = std::move(*c);
  // Rounds: each rank all-reduces; a round that failed anywhere is tried again by all,
  // each first rejoining past the newest generation any rank is in. (A rank can finish
  // a collective its peers did not, and then stops waiting for them: the trainer's
  // next step fails and brings it back; here the rounds stand in for that.)
  std::vector<int> tries(3, 0);
  std::vector<std::string> failures(3);
  std::vector<Status> again(3);
  bool all_ok = false;
  uint32_t target = 0;
  std::barrier tally(3, [&]() noexcept {
    all_ok = again[0].ok() && again[1].ok() && again[2].ok();
    target = 1 + std::max({g.ranks[0]->generation(), g.ranks[1]->generation(), g.ranks[2]->generation()});
  });
  OnEveryRank(3, [&](int r) {
    Communicator& me = *g.ranks[r];
    me.Announce(2'000'000);
    for (tries[r] = 1;; ++tries[r]) {
      data[r] = Data(r, 30'001);
      again[r] = me.AllReduce(data[r], ReduceOp::kSum);
      if (!again[r].ok()) {
        failures[r] += fmt::format("\n  try {} in generation {}: {}", tries[r], me.generation(), again[r].ToString());
      }
      tally.arrive_and_wait();
      if (all_ok || tries[r] == 5) break;
      while (me.generation() < target) me.Rejoin();
      me.Announce(2'000'000);
      tally.arrive_and_wait();  // all announced before anyone sends
    }
    return OkStatus();
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(again[r].ok()) << r << ": " << again[r].ToString() << failures[r];
  ASSERT_TRUE(all_ok);
  ExpectSummed(data, 3);
  // One generation for all; the survivors moved once, the replacement caught up.
  EXPECT_GE(g.ranks[0]->generation(), 1u);
  EXPECT_EQ(g.ranks[1]->generation(), g.ranks[0]->generation());
  EXPECT_EQ(g.ranks[2]->generation(), g.ranks[0]->generation());
  std::cout << fmt::format("rejoined in generation {} after {}, {} and {} tries\n", g.ranks[0]->generation(),
                           tries[0], tries[1], tries[2]);
  // A rank of the old generation is answered "stale", and nothing is counted refused.
  auto [host, port] = *SplitHostPort(g.addresses[0].address, "rank 0");
  StatusOr<std::unique_ptr<TcpStream>> old = TcpStream::Connect(host, port, 1'000'000);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(Hello(**old, 1, 0, g.addresses[1].address + " a"), 2);
  EXPECT_EQ(g.ranks[0]->refused(), 0);
}

}  // namespace
}  // namespace meridian::collective
