#include <httplib.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "kernels/ops.h"
#include "workloads/serving/batcher.h"
#include "workloads/serving/model.h"
#include "workloads/serving/replica.h"
#include "workloads/training/trainer.h"

namespace meridian::serving {
namespace {

// A checkpoint of a model with `hidden` units and weights drawn from `seed`.
std::string Checkpoint(int32_t hidden, uint32_t seed) {
  training::Checkpoint c;
  c.step = 7;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> weight(-0.5f, 0.5f);
  c.state.resize(static_cast<size_t>(2 * training::ParameterCount(hidden)));
  for (float& v : c.state) v = weight(gen);
  return training::EncodeCheckpoint(c, hidden);
}

std::vector<float> Images(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> x(static_cast<size_t>(n * 64));
  for (float& v : x) v = static_cast<float>(gen() % 17) / 16.0f;  // digits' grey levels, zeros among them
  return x;
}

std::string Body(const std::vector<float>& x) {
  nlohmann::json instances = nlohmann::json::array();
  for (size_t b = 0; b < x.size() / 64; ++b) {
    instances.push_back(std::vector<float>(x.begin() + static_cast<long>(b * 64), x.begin() + static_cast<long>(b * 64 + 64)));
  }
  return nlohmann::json{{"instances", instances}}.dump();
}

TEST(MlpModelTest, ABatchGivesExactlyTheReferenceForwardPassOfEachImage) {
  // 37 hidden units and 7 images: neither a whole number of the kernel's blocks.
  auto model = MlpModel::FromCheckpoint(Checkpoint(37, 1));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->hidden(), 37);
  EXPECT_EQ(model->step(), 7);
  const std::vector<float> x = Images(7, 2);
  std::vector<float> logits(70);
  model->Infer(x, logits);

  const std::string bytes = Checkpoint(37, 1);
  auto c = training::DecodeCheckpoint(bytes, 37);
  ASSERT_TRUE(c.ok());
  kernels::MlpShape shape;
  shape.hidden = 37;
  for (int b = 0; b < 7; ++b) {
    std::vector<float> hid(37), want(10);
    kernels::MlpForward(shape, c->state.data(), x.data() + b * 64, hid.data(), want.data());
    for (int k = 0; k < 10; ++k) EXPECT_EQ(logits[b * 10 + k], want[k]) << "image " << b << " class " << k;
  }
}

TEST(MlpModelTest, RefusesWhatIsNotAnIntactCheckpoint) {
  EXPECT_EQ(MlpModel::FromCheckpoint("hello").status().message(),
            "not a checkpoint of Meridian's trainer (no MRCK header)");
  std::string cut = Checkpoint(8, 1);
  cut[60] ^= 1;
  EXPECT_EQ(MlpModel::FromCheckpoint(cut).status().message(), "the checkpoint's CRC-32 does not match its bytes");
  training::Checkpoint c;
  c.state.assign(static_cast<size_t>(2 * training::ParameterCount(8)), 0.0f);
  c.state[5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(MlpModel::FromCheckpoint(training::EncodeCheckpoint(c, 8)).status().message(),
            "the checkpoint's parameter 5 is inf: not a model to serve");
}

TEST(PredictBodyTest, ErrorsNameWhatIsWrong) {
  auto msg = [](std::string_view body) { return ParsePredictBody(body, 64).status().message(); };
  EXPECT_EQ(msg("{"), "the body is not JSON: expected {\"instances\": [[...], ...]}");
  EXPECT_EQ(msg("{\"inputs\": []}"), "the body has no 'instances': expected {\"instances\": [[...], ...]}");
  EXPECT_EQ(msg("{\"instances\": [], \"x\": 1}"), "unknown field 'x': only 'instances'");
  EXPECT_EQ(msg("{\"instances\": []}"), "'instances' must be a list of 1..256 images");
  EXPECT_EQ(msg("{\"instances\": [[1, 2]]}"), "instance 0: expected a list of 64 numbers");
  std::vector<float> x = Images(2, 1);
  x[64 + 3] = 2.0f;
  EXPECT_EQ(msg(Body(x)), "instance 1: pixel 2.0 is not in 0..1");
  EXPECT_EQ(ParsePredictBody(Body(Images(3, 1)), 64)->size(), 192u);
}

TEST(BatcherTest, WaitsForAFullBatchOrItsDeadlineAndRefusesPastItsQueue) {
  auto model = MlpModel::FromCheckpoint(Checkpoint(16, 3));
  ASSERT_TRUE(model.ok());
  std::atomic<int> done{0};
  {
    // Four single images within the 10 s wait make one batch of four, at once.
    Batcher batcher(*model, BatchOptions{4, 10'000'000 / 10, 8});
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(batcher.Submit(Images(1, i), [&](std::vector<float> l) { done += static_cast<int>(l.size()); }).ok());
    }
    while (done.load() < 40) std::this_thread::yield();
    EXPECT_EQ(batcher.stats().batches, 1);
    EXPECT_EQ(batcher.stats().images, 4);
  }
  {
    Batcher batcher(*model, BatchOptions{1, 0, 8});
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(batcher.Submit(Images(1, i), [&](std::vector<float>) { ++done; }).ok());
    while (done.load() < 44) std::this_thread::yield();
    EXPECT_EQ(batcher.stats().batches, 4);
  }
  {
    // A long wait holds the first request: the queue (8 images) refuses the ninth.
    Batcher batcher(*model, BatchOptions{16, 1'000'000, 16});
    ASSERT_TRUE(batcher.Submit(Images(8, 1), [&](std::vector<float>) { ++done; }).ok());
    ASSERT_TRUE(batcher.Submit(Images(8, 2), [&](std::vector<float>) { ++done; }).ok());
    const Status refused = batcher.Submit(Images(1, 3), [&](std::vector<float>) { ++done; });
    EXPECT_EQ(refused.message(), "the replica is saturated: 16 images wait for the model (at most 16)");
    EXPECT_EQ(batcher.stats().refused, 1);
  }
  EXPECT_EQ(done.load(), 46);  // the destructor ran what was queued
}

TEST(ReplicaTest, AnswersOverHttp1AndHttp2AndRefusesWithoutItsToken) {
  const std::string ckpt = Checkpoint(32, 5);
  auto model = MlpModel::FromCheckpoint(ckpt);
  ASSERT_TRUE(model.ok());
  const std::vector<float> x = Images(3, 9);
  std::vector<float> logits(30);
  model->Infer(x, logits);
  ReplicaOptions options;
  options.token = "s3cret";
  options.batch = BatchOptions{8, 500, 64};
  auto replica = Replica::Start(*std::move(model), options);
  ASSERT_TRUE(replica.ok()) << replica.status().ToString();

  httplib::Client client("127.0.0.1", (*replica)->port());
  auto anonymous = client.Post("/v1/predict", Body(x), "application/json");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->body, "{\"error\":\"no 'Authorization: Bearer TOKEN' header: this service needs its token\"}\n");
  client.set_bearer_token_auth("wrong");
  EXPECT_EQ(client.Post("/v1/predict", Body(x), "application/json")->status, 401);

  client.set_bearer_token_auth("s3cret");
  auto answer = client.Post("/v1/predict", Body(x), "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, PredictAnswer(logits, 10));
  const auto parsed = nlohmann::json::parse(answer->body);
  ASSERT_EQ(parsed["predictions"].size(), 3u);

  auto bad = client.Post("/v1/predict", "{\"instances\": [[1]]}", "application/json");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->body, "{\"error\":\"instance 0: expected a list of 64 numbers\"}\n");
  EXPECT_EQ(client.Get("/nope")->status, 404);

  // HTTP/2 by prior knowledge (curl, with nghttp2).
  ProcessOptions curl;
  curl.argv = {"curl", "-sS", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_version}",
               "-H", "Authorization: Bearer s3cret", "-H", "Content-Type: application/json",
               "--data-binary", Body(x), fmt::format("http://127.0.0.1:{}/v1/predict", (*replica)->port())};
  std::atomic<bool> stop{false};
  auto ran = RunProcess(curl, stop);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  EXPECT_EQ(ran->exit_code, 0) << ran->stderr_tail;
  EXPECT_EQ(ran->stdout_head, PredictAnswer(logits, 10) + "\n2");
  EXPECT_EQ((*replica)->stats().images, 6);

  // 1 MiB is the bound on a body: h2o answers past it from the Content-Length alone.
  const std::string big = testing::TempDir() + "/big.json";
  { std::ofstream(big) << std::string((1 << 20) + 1, ' '); }
  curl.argv = {"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer s3cret",
               "-H", "Expect:", "--data-binary", "@" + big, fmt::format("http://127.0.0.1:{}/v1/predict", (*replica)->port())};
  ran = RunProcess(curl, stop);
  ASSERT_TRUE(ran.ok());
  EXPECT_EQ(ran->stdout_head, "413");
}

}  // namespace
}  // namespace meridian::serving
