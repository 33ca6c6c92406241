#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "common/env.h"
#include "kernels/devices.h"
#include "kernels/kernel.h"

namespace meridian::kernels {
namespace {

struct KernelRun {
  std::map<std::string, std::string> args;
  std::vector<std::string> inputs;
  uint32_t index = 0;
  std::atomic<bool> stop{false};

  StatusOr<std::string> operator()(std::string_view kernel) {
    const KernelInfo* k = FindKernel(kernel);
    if (k == nullptr) return NotFoundError(std::string(kernel));
    return k->run(KernelContext{args, inputs, index, stop});
  }
};

TEST(KernelsTest, RegistryNamesTheBuiltIns) {
  for (const char* name : {"noop", "sum", "sort", "histogram", "wordcount", "matmul"}) {
    EXPECT_NE(FindKernel(name), nullptr) << name;
  }
  EXPECT_EQ(FindKernel("nope"), nullptr);
}

TEST(KernelsTest, SumAddsInputsAndRanges) {
  KernelRun r;
  r.args = {{"range", "1000"}};
  r.index = 3;  // [3000, 4000)
  EXPECT_EQ(*r("sum"), "3499500");
  KernelRun merge;
  merge.inputs = {"10", "20 30\n", "-5"};
  EXPECT_EQ(*merge("sum"), "55");
  KernelRun bad;
  bad.inputs = {"12x"};
  EXPECT_NE(bad("sum").status().message().find("input 0: expected an integer, got '12x'"), std::string::npos);
  KernelRun unknown;
  unknown.args = {{"rnage", "3"}};
  EXPECT_NE(unknown("sum").status().message().find("no argument 'rnage'"), std::string::npos);
}

TEST(KernelsTest, SortOrdersValuesAndSummarises) {
  KernelRun r;
  r.inputs = {"5 -2 9", "0"};
  EXPECT_EQ(*r("sort"), "-2\n0\n5\n9\n");
  KernelRun g;
  g.args = {{"generate", "1000"}, {"seed", "4"}, {"max", "100"}, {"output", "summary"}};
  std::string s = *g("sort");
  EXPECT_EQ(s.rfind("count=1000 min=0 max=99", 0), 0u) << s;
  EXPECT_EQ(*g("sort"), s);  // deterministic from the seed
}

TEST(KernelsTest, HistogramsBinAndMerge) {
  KernelRun r;
  r.args = {{"bins", "2"}, {"min", "0"}, {"max", "10"}};
  r.inputs = {"1 2 6 9.5 10 -1"};
  std::string h = *r("histogram");
  EXPECT_EQ(h, "histogram bins=2 min=0 max=10 count=6 outside=2\n0 5 2\n5 10 2\n");
  KernelRun m;
  m.args = r.args;
  m.inputs = {h, h};
  EXPECT_EQ(*m("histogram"), "histogram bins=2 min=0 max=10 count=12 outside=4\n0 5 4\n5 10 4\n");
  KernelRun other;
  other.args = {{"bins", "3"}, {"min", "0"}, {"max", "10"}};
  other.inputs = {h};
  EXPECT_FALSE(other("histogram").ok());
  KernelRun gen;
  gen.args = {{"bins", "4"}, {"generate", "10000"}};
  std::string g = *gen("histogram");
  EXPECT_NE(g.find("count=10000"), std::string::npos);
}

TEST(KernelsTest, WordCountCountsAndMerges) {
  KernelRun r;
  r.args = {{"text", "The cat; the DOG, the end"}};
  std::string w = *r("wordcount");
  EXPECT_EQ(w, "wordcount\nthe 3\ncat 1\ndog 1\nend 1\n");
  KernelRun m;
  m.inputs = {w, "cat cat"};
  EXPECT_EQ(*m("wordcount"), "wordcount\ncat 3\nthe 3\ndog 1\nend 1\n");
}

TEST(KernelsTest, MatMulMatchesANaiveProduct) {
  // The same seeded matrices multiplied the textbook way (i-j-k).
  const int n = 48;
  Random rng(5);
  std::vector<double> a(n * n), b(n * n);
  for (double& x : a) x = rng.UniformDouble() * 2 - 1;
  for (double& x : b) x = rng.UniformDouble() * 2 - 1;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double c = 0;
      for (int k = 0; k < n; ++k) c += a[i * n + k] * b[k * n + j];
      sum += c;
      sq += c * c;
    }
  }
  KernelRun r;
  r.args = {{"n", "48"}, {"seed", "5"}};
  std::string out = *r("matmul");
  double got_sum = 0, got_frob = 0;
  ASSERT_EQ(std::sscanf(out.c_str(), "matmul n=48 sum=%lf frobenius=%lf", &got_sum, &got_frob), 2) << out;
  EXPECT_NEAR(got_sum, sum, 1e-9 * std::max(1.0, std::abs(sum)));
  EXPECT_NEAR(got_frob, std::sqrt(sq), 1e-9 * std::sqrt(sq));
  EXPECT_EQ(*r("matmul"), out);
  r.stop = true;
  EXPECT_EQ(r("matmul").status().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace meridian::kernels

namespace meridian::kernels {
namespace {

TEST(DevicesTest, DiscoveryAnswersEitherWay) {
  // Without a GPU (or a build without CUDA) the list is empty and the note says why;
  // with one, every device has a name and memory.
  std::string note;
  std::vector<GpuInfo> gpus = DiscoverGpus(&note);
  EXPECT_FALSE(note.empty());
  if (!BuiltWithCuda()) {
    EXPECT_TRUE(gpus.empty());
  }
  for (const GpuInfo& g : gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.memory_bytes, 0);
  }
}

}  // namespace
}  // namespace meridian::kernels
