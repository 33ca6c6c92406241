#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/temp_dir.h"
#include "objects/store.h"
#include "objects/transfer.h"

namespace meridian::objects {
namespace {
namespace fs = std::filesystem;

// A fresh directory under /tmp, removed at the end.
struct ScratchDir {
  std::unique_ptr<meridian::TempDir> dir = std::move(*meridian::TempDir::Make("meridian-objects"));
  std::string path = dir->path();
};

// Bytes that differ everywhere (SplitMix64), so a misplaced chunk cannot go unnoticed.
std::string Pattern(size_t size, uint64_t seed) {
  std::string s(size, '\0');
  uint64_t x = seed;
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = (x += 0x9E3779B97F4A7C15ull);
    v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
    v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
    v ^= v >> 31;
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, size - i));
  }
  return s;
}

std::unique_ptr<ObjectStore> OpenStore(const std::string& dir, int64_t memory = int64_t{4} << 30) {
  StatusOr<std::unique_ptr<ObjectStore>> s = ObjectStore::Open(StoreOptions{memory, dir});
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(*s);
}

TEST(ObjectIdTest, IsDerivedFromTheContentAndRoundTripsAsHex) {
  ObjectId a = ObjectId::Of("hello"), b = ObjectId::Of("hello"), c = ObjectId::Of("hellp");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.Hex().size(), 32u);
  EXPECT_EQ(*ObjectId::Parse(a.Hex()), a);
  EXPECT_FALSE(ObjectId::Parse("12").ok());
  EXPECT_NE(ObjectId::Parse(std::string(31, '0') + "g").status().message().find("'g' is not a hex digit"),
            std::string::npos);
  EXPECT_EQ(ChunkChecksums(std::string(kChunkBytes * 2 + 1, 'x')).size(), 3u);
}

TEST(ObjectStoreTest, SpillsLeastRecentlyUsedAndReadsBack) {
  ScratchDir dir;
  auto store = OpenStore(dir.path, 3 * 1000);
  std::vector<ObjectId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(*store->Put(Pattern(1000, i)));
  StoreStats st = store->stats();
  EXPECT_EQ(st.objects, 5);
  EXPECT_LE(st.memory_bytes, 3000);
  EXPECT_EQ(st.spilled_bytes, 2000);
  EXPECT_TRUE(fs::exists(fs::path(dir.path) / ids[0].Hex()));  // the oldest went out first
  {
    StatusOr<Pinned> p = store->Pin(ids[0]);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->data(), Pattern(1000, 0));
    EXPECT_EQ(store->stats().restores, 1);
  }
  EXPECT_LE(store->stats().memory_bytes, 3000);  // unpinned: back under the capacity
}

TEST(ObjectStoreTest, PinnedObjectsStayInMemoryAndReleaseDeletes) {
  ScratchDir dir;
  auto store = OpenStore(dir.path, 1500);
  ObjectId a = *store->Put(Pattern(1000, 1));
  {
    StatusOr<Pinned> pin = store->Pin(a);
    ASSERT_TRUE(pin.ok());
    ObjectId b = *store->Put(Pattern(1000, 2));  // over capacity: b spills, a is pinned
    EXPECT_FALSE(fs::exists(fs::path(dir.path) / a.Hex()));
    EXPECT_TRUE(fs::exists(fs::path(dir.path) / b.Hex()));
    store->Release(a);  // the last reference, while pinned: kept until unpinned
    EXPECT_TRUE(store->Contains(a));
    EXPECT_EQ(pin->data(), Pattern(1000, 1));
  }
  EXPECT_FALSE(store->Contains(a));
  ObjectId c = *store->Put("same");
  EXPECT_EQ(*store->Put("same"), c);  // two references
  store->Release(c);
  EXPECT_TRUE(store->Contains(c));
  store->Release(c);
  EXPECT_FALSE(store->Contains(c));
  EXPECT_EQ(store->Pin(c).status().code(), StatusCode::kNotFound);
}

TEST(ObjectStoreTest, RefusesBytesThatDoNotMatchTheirId) {
  ScratchDir dir;
  auto store = OpenStore(dir.path);
  Status s = store->PutVerified(ObjectId::Of("right"), Bytes::Copy("wrong"));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(store->stats().objects, 0);
}

// Two stores at two sites, a server in front of the first.
struct Pair {
  ScratchDir dir_a, dir_b;
  std::unique_ptr<ObjectStore> a = OpenStore(dir_a.path), b = OpenStore(dir_b.path);
  std::unique_ptr<TransferServer> server;
  explicit Pair(std::map<std::string, LinkShape> links = {}) {
    StatusOr<std::unique_ptr<TransferServer>> s =
        TransferServer::Start(*a, TransferServerOptions{"127.0.0.1", 0, "us-east", std::move(links)});
    EXPECT_TRUE(s.ok()) << s.status().message();
    server = std::move(*s);
  }
};

TEST(TransferTest, ObjectsRoundTripByteExactAtEverySize) {
  Pair p;
  for (size_t size : {size_t{0}, size_t{1}, size_t(kChunkBytes - 1), size_t(kChunkBytes), size_t(kChunkBytes + 1),
                      size_t{64} << 20, (size_t{1} << 30) + 12345}) {
    std::string data = Pattern(size, size);
    ObjectId id = *p.a->Put(data);
    StatusOr<FetchStats> f = Fetch(p.server->address(), id, *p.b, FetchOptions{"eu-west"});
    ASSERT_TRUE(f.ok()) << size << ": " << f.status().message();
    EXPECT_EQ(f->bytes, static_cast<int64_t>(size));
    EXPECT_EQ(f->streams, size >= (size_t{64} << 20) ? 4 : 1);
    StatusOr<Pinned> got = p.b->Pin(id);
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(got->data() == data) << "size " << size;
    // Free the big ones as we go.
    p.a->Release(id);
    p.b->Release(id);
  }
  LinkCounters c = p.server->sent().at("eu-west");
  // One request per stream; an empty object has no chunks to ask for.
  EXPECT_EQ(c.transfers, 4 + 4 + 4);
  EXPECT_GT(c.bytes, int64_t{1} << 30);
}

TEST(TransferTest, SurvivesAConnectionCutMidway) {
  Pair p;
  std::string data = Pattern(size_t{24} << 20, 3);
  ObjectId id = *p.a->Put(data);
  p.server->InjectFaults(TransferFaults{int64_t{10} << 20, -1});
  StatusOr<FetchStats> f = Fetch(p.server->address(), id, *p.b, FetchOptions{"eu-west", 1});
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->reconnects, 1);
  EXPECT_EQ(p.b->Pin(id)->data(), data);
  // It resumed: about 10 MiB went before the cut, and the rest after, not all 24 again.
  EXPECT_LT(p.server->sent().at("eu-west").bytes, int64_t{26} << 20);
}

TEST(TransferTest, ACorruptedChunkIsDetectedAndFetchedAgain) {
  Pair p;
  std::string data = Pattern(size_t{8} << 20, 4);
  ObjectId id = *p.a->Put(data);
  p.server->InjectFaults(TransferFaults{-1, 5});
  StatusOr<FetchStats> f = Fetch(p.server->address(), id, *p.b, FetchOptions{"eu-west", 1});
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->corrupt_chunks, 1);
  EXPECT_EQ(p.b->Pin(id)->data(), data);
}

TEST(TransferTest, MissingObjectsAndDeadPeersGetOneClearError) {
  Pair p;
  StatusOr<FetchStats> f = Fetch(p.server->address(), ObjectId::Of("nothing"), *p.b);
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("has no object"), std::string::npos) << f.status().message();
  const std::string address = p.server->address();
  p.server.reset();  // nobody listens there now
  f = Fetch(address, ObjectId::Of("nothing"), *p.b, FetchOptions{"eu-west", 0, 2, 1'000'000});
  EXPECT_EQ(f.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(Fetch("no-port", ObjectId::Of("x"), *p.b).ok());
  EXPECT_EQ(p.b->stats().objects, 0);
}

TEST(TransferTest, TheLinkShapesTheTransferAndIsCounted) {
  // 80 Mbit/s with a 40 ms round trip: 4 MiB cannot arrive in less than
  // 40 ms + 4 MiB * 8 / 80 Mbit/s = 459 ms, however fast the machine.
  Pair p({{"eu-west", LinkShape{40'000, 80'000'000, 20'000}}});
  std::string data = Pattern(size_t{4} << 20, 5);
  ObjectId id = *p.a->Put(data);
  auto t0 = std::chrono::steady_clock::now();
  StatusOr<FetchStats> f = Fetch(p.server->address(), id, *p.b, FetchOptions{"eu-west"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_GE(seconds, 0.459);
  LinkCounters c = p.server->sent().at("eu-west");
  EXPECT_EQ(c.bytes, int64_t{4} << 20);
  // $0.02 per GB (20,000 micro-dollars): 4 MiB is 83 micro-dollars.
  EXPECT_EQ(c.egress_micro_usd, 83);
  // Another site's link is not shaped and counted apart.
  ObjectId small = *p.a->Put("small");
  ScratchDir dir_c;
  auto c_store = OpenStore(dir_c.path);
  ASSERT_TRUE(Fetch(p.server->address(), small, *c_store, FetchOptions{"factory"}).ok());
  EXPECT_EQ(p.server->sent().at("factory").bytes, 5);
}

}  // namespace
}  // namespace meridian::objects

namespace meridian::objects {
namespace {

TEST(TransferTest, PushStoresAnObjectOnTheServer) {
  ScratchDir dir;
  auto store = OpenStore(dir.path);
  int64_t added = 0;
  store->SetListener([&](const ObjectId&, int64_t size, bool is_added) { added += is_added ? size : -size; });
  auto server = std::move(*TransferServer::Start(*store, TransferServerOptions{}));
  for (size_t size : {size_t{0}, size_t{3} << 20}) {
    std::string data(size, 'q');
    StatusOr<ObjectId> id = Push(server->address(), data);
    ASSERT_TRUE(id.ok()) << id.status().message();
    EXPECT_EQ(*id, ObjectId::Of(data));
    EXPECT_EQ(store->Pin(*id)->data(), data);
  }
  EXPECT_EQ(added, int64_t{3} << 20);
  EXPECT_EQ(store->stats().objects, 2);
}

}  // namespace
}  // namespace meridian::objects
