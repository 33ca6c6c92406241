#include "workloads/training/trainer.h"

#include <fstream>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "workloads/training/nccl_group.h"

namespace meridian::training {
namespace {

const Digits& TheDigits() {
  static const Digits d = [] {
    StatusOr<std::string> path = DebianDigitsPath();
    EXPECT_TRUE(path.ok()) << path.status().message();
    StatusOr<Digits> loaded = LoadDigits(*path);
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    return std::move(*loaded);
  }();
  return d;
}

TEST(DigitsTest, LoadsDebiansDigitsFile) {
  const Digits& d = TheDigits();
  ASSERT_EQ(d.size(), 1797);
  ASSERT_EQ(d.pixels.size(), 1797u * 64);
  // The first image: a 0, its first row 0,0,5,13,9,1,0,0 (in sixteenths).
  EXPECT_EQ(d.labels[0], 0);
  EXPECT_EQ(d.pixels[2], 5.0f / 16);
  EXPECT_EQ(d.pixels[3], 13.0f / 16);
  std::vector<int> per_class(10);
  for (int32_t l : d.labels) ++per_class[l];
  EXPECT_EQ(per_class, (std::vector<int>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}));
}

TEST(DigitsTest, RefusesLinesThatAreNotDigits) {
  StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Make("digits-test");
  ASSERT_TRUE(dir.ok());
  std::string row;
  for (int i = 0; i < 64; ++i) row += "1,";
  const std::string path = (*dir)->path() + "/d.csv";
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write(row + "3\n" + row + "10\n");
  StatusOr<Digits> d = LoadDigits(path);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            path + ":2: expected 64 pixel values in 0..16 and a label in 0..9, comma separated");
  write(row + "3\n" + row.substr(2) + "3\n");  // 63 pixels and a label
  EXPECT_EQ(LoadDigits(path).status().message(),
            path + ":2: expected 64 pixel values in 0..16 and a label in 0..9, comma separated");
  write(row + "3,4\n");
  EXPECT_FALSE(LoadDigits(path).ok());
  write("17," + row.substr(2) + "3\n");
  EXPECT_FALSE(LoadDigits(path).ok());
  write("\n");
  EXPECT_EQ(LoadDigits(path).status().message(), path + " holds no images");
  write(row + "3\r\n");
  StatusOr<Digits> one = LoadDigits(path);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->size(), 1);
  EXPECT_EQ(one->labels[0], 3);
  EXPECT_EQ(LoadDigits((*dir)->path() + "/missing.csv").status().code(), StatusCode::kNotFound);
}

TEST(CheckpointTest, RoundTripsAndRefusesDamage) {
  Checkpoint c;
  c.step = 46;
  c.epoch_loss = 12.5;
  c.state.assign(2 * (75 * 8 + 10), 0.25f);
  c.state[7] = -3.0f;
  const std::string bytes = EncodeCheckpoint(c, 8);
  EXPECT_EQ(bytes.size(), 36 + c.state.size() * 4 + 4);
  StatusOr<Checkpoint> back = DecodeCheckpoint(bytes, 8);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->step, 46);
  EXPECT_EQ(back->epoch_loss, 12.5);
  EXPECT_EQ(back->state, c.state);

  std::string flipped = bytes;
  flipped[100] ^= 1;
  EXPECT_EQ(DecodeCheckpoint(flipped, 8).status().message(), "the checkpoint's CRC-32 does not match its bytes");
  EXPECT_EQ(DecodeCheckpoint(bytes, 16).status().message(),
            "the checkpoint is of a model with 8 hidden units (1220 values); this one has 16");
  EXPECT_EQ(DecodeCheckpoint(bytes.substr(0, bytes.size() - 1), 8).status().message(),
            fmt::format("the checkpoint is {} bytes; a model with 8 hidden units needs {}", bytes.size() - 1,
                        bytes.size()));
  EXPECT_EQ(DecodeCheckpoint("hello", 8).status().message(), "not a checkpoint of Meridian's trainer (no MRCK header)");
}

TEST(TrainerTest, RefusesOptionsThatDoNotFit) {
  TrainOptions o;
  o.batch = 2000;
  Trainer t(TheDigits(), o, nullptr);
  EXPECT_EQ(t.Run(nullptr, nullptr).status().message(),
            "batch 2000: expected 1..1437 (at least one image a rank, at most the 1437 training images)");
  o = {};
  o.test_images = 1797;
  Trainer u(TheDigits(), o, nullptr);
  EXPECT_EQ(u.Run(nullptr, nullptr).status().message(),
            "test images 1797: expected 1..1796 (the data holds 1797 images)");
}

// A run resumed from a checkpoint of step s continues the undisturbed run exactly:
// the same parameters, bit for bit, and the same losses after s.
TEST(TrainerTest, AResumedRunContinuesTheUndisturbedOneExactly) {
  TrainOptions o;
  o.epochs = 4;
  o.hidden = 32;
  o.checkpoint_every = 10;
  std::vector<Checkpoint> checkpoints;
  std::vector<EpochReport> epochs;
  Trainer whole(TheDigits(), o, nullptr);
  StatusOr<TrainResult> a = whole.Run(
      [&](const Checkpoint& c) {
        checkpoints.push_back(c);
        return OkStatus();
      },
      [&](const EpochReport& e) { epochs.push_back(e); });
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->steps, 4 * 23);  // 1437 training images in steps of 64
  ASSERT_EQ(checkpoints.size(), 9u);
  ASSERT_EQ(epochs.size(), 4u);
  EXPECT_LT(epochs[3].loss, epochs[0].loss);
  // Resume from step 30, mid-epoch 2 (through the encoded bytes, as a replacement does).
  StatusOr<Checkpoint> c = DecodeCheckpoint(EncodeCheckpoint(checkpoints[2], o.hidden), o.hidden);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->step, 30);
  std::vector<EpochReport> later;
  Trainer resumed(TheDigits(), o, nullptr);
  ASSERT_TRUE(resumed.Restore(*c).ok());
  StatusOr<TrainResult> b = resumed.Run(nullptr, [&](const EpochReport& e) { later.push_back(e); });
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->resumed_from, 30);
  EXPECT_EQ(b->checksum, a->checksum);
  EXPECT_EQ(b->test_accuracy, a->test_accuracy);
  ASSERT_EQ(later.size(), 3u);  // epochs 2, 3, 4
  for (size_t i = 0; i < later.size(); ++i) {
    EXPECT_EQ(later[i].epoch, epochs[i + 1].epoch);
    EXPECT_EQ(later[i].loss, epochs[i + 1].loss);
  }
}

// n ranks over loopback (threads), rank r restored from restore[r] when it has one;
// rank 0's checkpoints go to `checkpoints`.
struct Ranks {
  std::vector<StatusOr<TrainResult>> results;
  std::vector<std::map<std::string, int64_t>> sent;
  std::vector<Checkpoint> checkpoints;
  int64_t parameters = 0;
};

Ranks TrainRanks(int n, const TrainOptions& o, const std::vector<std::optional<Checkpoint>>& restore = {}) {
  std::vector<std::unique_ptr<TcpListener>> listeners;
  collective::CommunicatorOptions base;
  base.secret = "s3cret";
  for (int r = 0; r < n; ++r) {
    StatusOr<std::unique_ptr<TcpListener>> l = TcpListener::Listen("127.0.0.1", 0);
    EXPECT_TRUE(l.ok());
    base.ranks.push_back({"127.0.0.1:" + std::to_string((*l)->port()), "a"});
    listeners.push_back(std::move(*l));
  }
  Ranks out;
  out.results.assign(n, InternalError("not run"));
  out.sent.resize(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collective::CommunicatorOptions opts = base;
      opts.rank = r;
      StatusOr<std::unique_ptr<collective::Communicator>> c =
          collective::Communicator::Create(std::move(listeners[r]), opts);
      if (!c.ok()) {
        out.results[r] = c.status();
        return;
      }
      Trainer t(TheDigits(), o, c->get());
      if (r < static_cast<int>(restore.size()) && restore[r]) {
        if (Status s = t.Restore(*restore[r]); !s.ok()) {
          out.results[r] = s;
          return;
        }
      }
      out.results[r] = t.Run(
          [&, r](const Checkpoint& cp) {
            if (r == 0) out.checkpoints.push_back(cp);
            return OkStatus();
          },
          nullptr);
      out.sent[r] = (*c)->bytes_sent();
      if (r == 0) out.parameters = t.parameter_count();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// Four ranks over loopback, gradients all-reduced by the ring: every replica ends
// identical, the digits are learnt (the bar: 95%), and each rank sent exactly
// what a ring all-reduce of the gradients sends, every step (and the two small
// all-reduces with which they agree where to start).
TEST(TrainerTest, FourRanksTrainOneModelWithRingAllReduce) {
  const int n = 4;
  TrainOptions o;
  o.epochs = 30;
  Ranks g = TrainRanks(n, o);
  ASSERT_EQ(g.parameters, 75 * 128 + 10);
  const size_t reduced = static_cast<size_t>(g.parameters) + 1;  // the gradients and the loss
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(g.results[r].ok()) << r << ": " << g.results[r].status().message();
    EXPECT_EQ(g.results[r]->checksum, g.results[0]->checksum);
    EXPECT_EQ(g.results[r]->test_accuracy, g.results[0]->test_accuracy);
    EXPECT_EQ(g.results[r]->steps, 30 * 23);
    EXPECT_EQ(g.results[r]->resumed_from, -1);
    // Rank r sends every block but its own in the reduce-scatter and every block but
    // rank r+1's in the all-gather.
    auto ring = [&](size_t count, size_t element) {
      int64_t bytes = 0;
      for (int b = 0; b < n; ++b) {
        auto [lo, hi] = collective::BlockRange(count, n, b);
        bytes += static_cast<int64_t>((hi - lo) * element) * ((b != r ? 1 : 0) + (b != (r + 1) % n ? 1 : 0));
      }
      return bytes;
    };
    EXPECT_EQ(g.sent[r].at("a"), ring(reduced, sizeof(float)) * 30 * 23 + 2 * ring(1, sizeof(double))) << r;
  }
  std::cout << fmt::format("4 ranks, 30 epochs: test accuracy {:.4f}, last epoch's loss {:.4f}\n",
                           g.results[0]->test_accuracy, g.results[0]->final_loss);
  EXPECT_GE(g.results[0]->test_accuracy, 0.95);
}

// Ranks restarted with checkpoints of different ages (or none: a replaced rank whose
// checkpoint could not be fetched) continue one model from the newest: the very
// parameters of the undisturbed run, and the same checkpoints after it.
TEST(TrainerTest, RanksWithCheckpointsOfDifferentAgesResumeFromTheNewest) {
  const int n = 4;
  TrainOptions o;
  o.epochs = 3;
  o.hidden = 32;
  o.checkpoint_every = 10;
  Ranks whole = TrainRanks(n, o);
  ASSERT_TRUE(whole.results[0].ok()) << whole.results[0].status().message();
  ASSERT_EQ(whole.checkpoints.size(), 6u);  // steps 10..60 of 69
  const Checkpoint& at30 = whole.checkpoints[2];
  const Checkpoint& at50 = whole.checkpoints[4];
  ASSERT_EQ(at30.step, 30);
  Ranks resumed = TrainRanks(n, o, {at30, at50, std::nullopt, at30});
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(resumed.results[r].ok()) << r << ": " << resumed.results[r].status().message();
    EXPECT_EQ(resumed.results[r]->resumed_from, 50) << r;
    EXPECT_EQ(resumed.results[r]->checksum, whole.results[0]->checksum) << r;
  }
  ASSERT_EQ(resumed.checkpoints.size(), 1u);  // step 60 again, the same
  EXPECT_EQ(resumed.checkpoints[0].step, 60);
  EXPECT_EQ(resumed.checkpoints[0].state, whole.checkpoints[5].state);
}

// `n` ranks of a gang on loopback, made at once (Create connects lazily).
std::vector<std::unique_ptr<collective::Communicator>> Gang(int n) {
  collective::CommunicatorOptions base;
  base.secret = "s3cret";
  std::vector<std::unique_ptr<TcpListener>> listeners;
  for (int r = 0; r < n; ++r) {
    listeners.push_back(*TcpListener::Listen("127.0.0.1", 0));
    base.ranks.push_back({"127.0.0.1:" + std::to_string(listeners.back()->port()), "a"});
  }
  std::vector<std::unique_ptr<collective::Communicator>> out;
  for (int r = 0; r < n; ++r) {
    collective::CommunicatorOptions o = base;
    o.rank = r;
    out.push_back(*collective::Communicator::Create(std::move(listeners[r]), o));
  }
  return out;
}

// NCCL between the GPUs here (a rank a device, at most four) sums as the CPU ring
// does, exactly (small integers); skipped without a device.
TEST(NcclGroupTest, AllReduceAcrossTheGpusGivesTheRingsSums) {
  const int n = std::min(kernels::CudaDevices(), 4);
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<std::unique_ptr<collective::Communicator>> g = Gang(n);
  std::vector<std::vector<float>> data(n), ring(n);
  std::vector<Status> s(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 1'000'003; ++i) data[r].push_back(static_cast<float>((r + 1) * 1000 + i % 977));
    ring[r] = data[r];
    threads.emplace_back([&, r] {
      StatusOr<std::unique_ptr<kernels::NcclComm>> nccl = JoinNccl(*g[r], r);
      s[r] = nccl.ok() ? (*nccl)->AllReduceSum(data[r]) : nccl.status();
      if (s[r].ok()) s[r] = g[r]->AllReduce(ring[r], collective::ReduceOp::kSum);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(s[r].ok()) << s[r].ToString();
    EXPECT_EQ(data[r], ring[r]) << r;
  }
}

TEST(NcclGroupTest, WithoutADeviceEveryRankIsToldWhyAndNoneWaits) {
  if (kernels::CudaDevices() > 0) GTEST_SKIP() << "a CUDA device is here";
  std::vector<std::unique_ptr<collective::Communicator>> g = Gang(2);
  std::vector<Status> s(2);
  std::thread other([&] { s[1] = JoinNccl(*g[1], 1).status(); });
  s[0] = JoinNccl(*g[0], 0).status();
  other.join();
  for (const Status& x : s) {
    EXPECT_EQ(x.code(), StatusCode::kUnavailable) << x.ToString();
    EXPECT_FALSE(x.message().empty());
  }
}

}  // namespace
}  // namespace meridian::training
