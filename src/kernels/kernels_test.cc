#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "common/env.h"
#include "kernels/devices.h"
#include "kernels/generate.h"
#include "kernels/kernel.h"
#include "kernels/ops.h"

namespace meridian::kernels {
namespace {

struct KernelRun {
  std::map<std::string, std::string> args;
  std::vector<std::string> inputs;
  uint32_t index = 0;
  int32_t gpu = -1;
  int64_t host_memory_bytes = -1;
  std::atomic<bool> stop{false};

  StatusOr<std::string> operator()(std::string_view kernel) {
    const KernelInfo* k = FindKernel(kernel);
    if (k == nullptr) return NotFoundError(std::string(kernel));
    return k->run(KernelContext{args, inputs, index, stop, gpu, -1, host_memory_bytes});
  }
};

TEST(KernelsTest, RegistryNamesTheBuiltIns) {
  for (const char* name : {"noop", "sum", "sort", "histogram", "wordcount", "matmul", "logstats", "chain-verify"}) {
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

// What a task makes a kernel hold in its agent (host_memory_bytes) is checked before
// it is allocated: every value to sort and, to write them out, each one's text.
TEST(KernelsTest, SortAndMatMulHoldNoMoreThanTheirTaskMay) {
  const std::string why = " (its resources' memory, 1 GiB when it asks for none): ask for it with resources: ";
  KernelRun r;
  // 4 values of 8 bytes, and "5\n-2\n9\n0\n", beside the 7 bytes of the inputs.
  r.inputs = {"5 -2 9", "0"};
  r.host_memory_bytes = 48;
  EXPECT_EQ(*r("sort"), "-2\n0\n5\n9\n");
  r.host_memory_bytes = 47;
  EXPECT_EQ(r("sort").status().message(), "4 values to sort and write out need 41 B beside its inputs' 7 B; this task "
                                          "may hold 47 B" + why + "{memory: 1MiB}");
  r.host_memory_bytes = 39;  // the summary writes no values out
  r.args = {{"output", "summary"}};
  EXPECT_EQ(*r("sort"), "count=4 min=-2 max=9 sum=12");
  // Generated values are written at the widest their range allows: "-1000\n".
  KernelRun g;
  g.args = {{"generate", "10"}, {"min", "-1000"}, {"max", "1000"}};
  g.host_memory_bytes = 140;
  StatusOr<std::string> fits = g("sort");
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(std::count(fits->begin(), fits->end(), '\n'), 10);
  g.host_memory_bytes = 139;
  StatusOr<std::string> refused = g("sort");
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "10 values to sort and write out need 140 B; this task may hold 139 B" + why + "{memory: 1MiB}");
  KernelRun big;
  big.args = {{"generate", "100000"}};
  big.host_memory_bytes = 1 << 20;
  EXPECT_EQ(big("sort").status().message(),
            "100000 values to sort and write out need 1.72 MiB; this task may hold 1 MiB" + why + "{memory: 2MiB}");
  // On the CPU a matmul holds its three matrices: 3 * 256 * 256 * 8 bytes.
  KernelRun m;
  m.args = {{"n", "256"}};
  m.host_memory_bytes = 1 << 20;
  EXPECT_EQ(m("matmul").status().message(),
            "three 256 x 256 matrices need 1.5 MiB; this task may hold 1 MiB" + why + "{memory: 2MiB}");
  m.host_memory_bytes = 3 * 256 * 256 * 8;
  EXPECT_TRUE(m("matmul").ok());
}

// A kernel holds its inputs whole, and what it parses from them beside: both count
// against the task, checked before the values are parsed, or as each new key comes.
TEST(KernelsTest, InputsAndWhatTheyParseToCountAgainstTheTask) {
  const std::string why = " (its resources' memory, 1 GiB when it asks for none): ask for it with resources: ";
  KernelRun sum;
  sum.inputs = {"1 2 3", "\n40\n"};  // 9 bytes, 4 values of 8 bytes
  sum.host_memory_bytes = 41;
  EXPECT_EQ(*sum("sum"), "46");
  sum.host_memory_bytes = 40;
  StatusOr<std::string> refused = sum("sum");
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "4 input values need 32 B beside its inputs' 9 B; this task may hold 40 B" + why + "{memory: 1MiB}");
  // A histogram's raw values likewise; a partial one's fields are its bins, no more.
  KernelRun h;
  h.args = {{"bins", "2"}, {"min", "0"}, {"max", "10"}};
  h.inputs = {"1 6 9", "histogram bins=2 min=0 max=10 count=1 outside=0\n0 5 1\n5 10 0\n"};
  const int64_t partial = static_cast<int64_t>(h.inputs[1].size());
  h.host_memory_bytes = 5 + partial + 24;
  EXPECT_EQ(*h("histogram"), "histogram bins=2 min=0 max=10 count=4 outside=0\n0 5 2\n5 10 2\n");
  h.host_memory_bytes = 5 + partial + 23;
  EXPECT_EQ(h("histogram").status().message(),
            fmt::format("3 input values need 24 B beside its inputs' {} B; this task may hold {} B", 5 + partial,
                        28 + partial) + why + "{memory: 1MiB}");
  h.host_memory_bytes = -1;
  h.inputs[1] += "10 15 0\n";
  EXPECT_EQ(h("histogram").status().message(), "input 1: expected 2 bins");
  // Each distinct word holds 128 bytes and its text three times: "a" and "bb" here.
  KernelRun w;
  w.inputs = {"a bb a", "wordcount\nbb 4\n"};  // 6 + 15 bytes
  w.host_memory_bytes = 21 + 128 + 3 + 128 + 6;
  EXPECT_EQ(*w("wordcount"), "wordcount\nbb 5\na 2\n");
  w.host_memory_bytes -= 1;
  // It stops at the first word past the bound: more may follow, so it asks for more.
  const std::string more = " (its resources' memory, 1 GiB when it asks for none): ask for more than 1MiB with "
                           "resources: {memory: ...}";
  EXPECT_EQ(w("wordcount").status().message(),
            "2 distinct words so far need 265 B beside its inputs' 21 B; this task may hold 285 B" + more);
  // Each distinct service and status holds 192 bytes and their text twice.
  KernelRun l;
  l.inputs = {"1 api 200 5 10\n2 api 200 7 10\n3 web 500 1 0\n"};  // 44 bytes
  l.host_memory_bytes = 44 + 2 * (192 + 12);
  EXPECT_EQ(*l("logstats"), "logstats lines=3 bad=0\napi 200 2 12 20 7\nweb 500 1 1 0 1\n");
  l.host_memory_bytes -= 1;
  EXPECT_EQ(l("logstats").status().message(),
            "2 distinct services and statuses so far need 408 B beside its inputs' 44 B; this task may hold 451 B" +
                more);
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

TEST(KernelsTest, LogStatsSummarisesAndMerges) {
  KernelRun a;
  a.inputs = {"1700000000 api 200 12 512\n1700000001 api 500 40 0\nnot a log line\n1700000002 api 200 8 256\n"};
  std::string sa = *a("logstats");
  EXPECT_EQ(sa, "logstats lines=4 bad=1\napi 200 2 20 768 12\napi 500 1 40 0 40\n");
  KernelRun b;
  b.inputs = {"1700000003 web 200 5 100\n"};
  KernelRun merge;
  merge.inputs = {sa, *b("logstats")};
  EXPECT_EQ(*merge("logstats"), "logstats lines=5 bad=1\napi 200 2 20 768 12\napi 500 1 40 0 40\nweb 200 1 5 100 5\n");
  KernelRun broken;
  broken.inputs = {"logstats lines=1 bad=0\napi 200 x\n"};
  EXPECT_FALSE(broken("logstats").ok());
}

// Merged inputs are the tenant's numbers: a count past 64 bits or below 0 is refused,
// and so is a binning whose edges a double cannot hold. Before, the sums wrapped
// (undefined behaviour; a merged summary came out negative) and such a binning cast
// NaN to a bin (fuzz_kernels: UBSan stopped on each).
TEST(KernelsTest, MergedCountsPast64BitsOrBelowZeroAreRefused) {
  const std::string big = "9223372036854775000";
  auto refused = [](const char* kernel, KernelRun& r) {
    StatusOr<std::string> out = r(kernel);
    return out.ok() ? "accepted: " + *out : std::string(out.status().message());
  };
  KernelRun logs;
  logs.inputs = {"logstats lines=" + big + " bad=0\n", "logstats lines=" + big + " bad=0\n"};
  EXPECT_EQ(refused("logstats", logs), "input 1: the counts merged do not fit in 64 bits");
  KernelRun rows;
  rows.inputs = {"logstats lines=2 bad=0\napi 200 1 " + big + " 0 9\n", "1700000000 api 200 " + big + " 0\n"};
  EXPECT_EQ(refused("logstats", rows), "input 1: the counts merged do not fit in 64 bits");
  KernelRun words;
  words.inputs = {"wordcount\na " + big + "\n", "wordcount\na " + big + "\n"};
  EXPECT_EQ(refused("wordcount", words), "input 1: the counts merged do not fit in 64 bits");
  KernelRun negative;
  negative.inputs = {"wordcount\na -5\n"};
  EXPECT_EQ(refused("wordcount", negative), "input 0 count of 'a': a count is not below 0, got -5");
  KernelRun bins;
  bins.args = {{"bins", "1"}, {"min", "0"}, {"max", "1"}};
  bins.inputs = {"histogram bins=1 min=0 max=1 count=1 outside=0\n0 1 " + big + "\n",
                 "histogram bins=1 min=0 max=1 count=1 outside=" + big + "\n0 1 0\n"};
  EXPECT_EQ(refused("histogram", bins), "the histogram's count does not fit in 64 bits");
  bins.inputs = {"histogram bins=1 min=0 max=1 count=1 outside=-1\n0 1 2\n"};
  EXPECT_EQ(refused("histogram", bins), "input 0 outside: a count is not below 0, got -1");
  KernelRun wide;
  wide.args = {{"bins", "2"}, {"min", "-1.7e308"}, {"max", "1.7e308"}};
  wide.inputs = {"1.5e308"};
  EXPECT_EQ(refused("histogram", wide),
            "arguments 'min' (-1.7e+308) and 'max' (1.7e+308): 2 bins between them are not numbers a double holds");
  KernelRun narrow;
  narrow.args = {{"bins", "4096"}, {"min", "0"}, {"max", "5e-324"}};
  narrow.inputs = {"0"};
  EXPECT_EQ(refused("histogram", narrow),
            "arguments 'min' (0) and 'max' (5e-324): 4096 bins between them are not numbers a double holds");
  // Counts that fit still merge.
  KernelRun fits;
  fits.inputs = {"wordcount\na 9223372036854775806\n", "a"};
  EXPECT_EQ(refused("wordcount", fits), "accepted: wordcount\na 9223372036854775807\n");
}

TEST(KernelsTest, MatMulMatchesANaiveProduct) {
  // The same seeded matrices multiplied the textbook way (i-j-k).
  const int n = 48;
  std::vector<double> a(n * n), b(n * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = gen::Signed(5, 2 * i);
    b[i] = gen::Signed(5, 2 * i + 1);
  }
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

namespace meridian::kernels {
namespace {

TEST(GeneratorTest, SamplesHaveTheirDocumentedRangeAndMoments) {
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double z = gen::Normal(9, i);
    ASSERT_GT(z, -6.0);
    ASSERT_LT(z, 6.0);
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
  for (int i = 0; i < 1000; ++i) {
    int64_t v = gen::Int(3, i, -5, 10);
    ASSERT_GE(v, -5);
    ASSERT_LT(v, 5);
    double u = gen::Unit(3, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_NE(gen::Bits(1, 0), gen::Bits(2, 0));
  EXPECT_EQ(gen::Bin(0.999, 0, 1, 0.1, 10), 9);
  EXPECT_EQ(gen::Bin(1.0, 0, 1, 0.1, 10), -1);
}

// The GPU tests run where a CUDA device is found and are skipped elsewhere (with the
// reason); each compares the CUDA implementation with the CPU reference.
const Ops* GpuOrSkip(std::string* why) {
  StatusOr<const Ops*> ops = GpuOps(0);
  if (!ops.ok()) {
    *why = ops.status().message();
    return nullptr;
  }
  return *ops;
}

#define MERIDIAN_GPU_OR_SKIP(var)                 \
  std::string why_;                               \
  const Ops* var = GpuOrSkip(&why_);              \
  if (var == nullptr) GTEST_SKIP() << why_;

TEST(GpuKernelsTest, WithoutCudaTheErrorSaysWhy) {
  StatusOr<const Ops*> ops = GpuOps(0);
  if (!BuiltWithCuda()) {
    ASSERT_FALSE(ops.ok());
    EXPECT_NE(ops.status().message().find("no CUDA"), std::string::npos) << ops.status().message();
  }
  std::string note;
  if (DiscoverGpus(&note).empty()) {
    EXPECT_FALSE(ops.ok()) << "no device was discovered, yet GPU 0 answered";
  }
  StatusOr<const Ops*> missing = GpuOps(999);
  EXPECT_FALSE(missing.ok());
}

TEST(GpuKernelsTest, SumMatchesTheCpuExactly) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  std::vector<int64_t> values(3'000'017);
  for (size_t i = 0; i < values.size(); ++i) values[i] = gen::Int(4, i, INT64_MIN / 2, UINT64_MAX / 2);
  StatusOr<__int128> got = gpu->Sum(values);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(*got == *CpuOps().Sum(values));
  EXPECT_TRUE(*gpu->Sum({}) == 0);
  std::vector<int64_t> one = {-7};
  EXPECT_TRUE(*gpu->Sum(one) == -7);
}

TEST(GpuKernelsTest, SortMatchesTheCpuExactly) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  std::atomic<bool> stop{false};
  for (int64_t generate : {0, 1, 1000, 5'000'003}) {
    std::vector<int64_t> a = {5, -3, 9}, b = a;
    Status s = gpu->Sort(a, 11, generate, -1'000'000'000, 1'000'000'000, stop);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(CpuOps().Sort(b, 11, generate, -1'000'000'000, 1'000'000'000, stop).ok());
    ASSERT_EQ(a, b) << "generate=" << generate;
  }
}

// Many windows of varied lengths and values whose sums round: the figures a stream's
// detect works from.
void StreamWindows(std::vector<double>* values, std::vector<int64_t>* offsets, size_t windows) {
  offsets->assign(1, 0);
  for (size_t w = 0; w < windows; ++w) {
    const int64_t n = 1 + static_cast<int64_t>(gen::Bits(7, w) % 300);
    for (int64_t i = 0; i < n; ++i) {
      values->push_back(20.0 + 10.0 * gen::Signed(11, values->size()) + 0.1 * static_cast<double>(w % 7));
    }
    offsets->push_back(static_cast<int64_t>(values->size()));
  }
}

TEST(KernelsTest, WindowStatsAreEachWindowsFiguresInOrder) {
  const std::vector<double> values = {1, 2, 3, 5, 4, 6, 0.1, 0.2};
  const std::vector<int64_t> offsets = {0, 4, 6, 8};
  std::vector<WindowStat> out(3);
  ASSERT_TRUE(CpuOps().WindowStats(values, offsets, out).ok());
  EXPECT_EQ(out[0].sum, 11.0);
  EXPECT_EQ(out[0].min, 1.0);
  EXPECT_EQ(out[0].max, 5.0);
  EXPECT_EQ(out[0].mean, 2.75);
  EXPECT_EQ(out[0].stddev, std::sqrt(8.75 / 4));
  EXPECT_EQ(out[1].mean, 5.0);
  EXPECT_EQ(out[1].stddev, 1.0);
  EXPECT_EQ(out[2].sum, 0.1 + 0.2);  // in order, rounded as a sum is
  std::vector<WindowStat> two(2);
  EXPECT_EQ(CpuOps().WindowStats(values, offsets, two).message(), "2 windows need 3 offsets, not 4");
  const std::vector<int64_t> empty = {0, 4, 4, 8};
  EXPECT_EQ(CpuOps().WindowStats(values, empty, out).message(), "window 1 is empty");
  const std::vector<int64_t> short_end = {0, 4, 6, 7};
  EXPECT_EQ(CpuOps().WindowStats(values, short_end, out).message(),
            "window offsets must run from 0 to the number of values");
}

TEST(GpuKernelsTest, WindowStatsMatchTheCpuBitForBit) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  std::vector<double> values;
  std::vector<int64_t> offsets;
  StreamWindows(&values, &offsets, 20'000);
  std::vector<WindowStat> g(offsets.size() - 1), c(offsets.size() - 1);
  Status s = gpu->WindowStats(values, offsets, g);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(CpuOps().WindowStats(values, offsets, c).ok());
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_EQ(g[i].sum, c[i].sum) << "window " << i;
    ASSERT_EQ(g[i].min, c[i].min) << "window " << i;
    ASSERT_EQ(g[i].max, c[i].max) << "window " << i;
    ASSERT_EQ(g[i].mean, c[i].mean) << "window " << i;
    ASSERT_EQ(g[i].stddev, c[i].stddev) << "window " << i;
  }
}

TEST(GpuKernelsTest, HistogramMatchesTheCpuExactly) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  std::atomic<bool> stop{false};
  for (int64_t bins : {1, 10, 4096}) {
    Binning b{bins, -3.5, 7.25};
    std::vector<double> values = {-3.5, 7.25, 0.0, 1e300, -1e300, 7.2499999};
    std::vector<int64_t> gc(bins, 1), cc(bins, 1);  // counts are added to
    int64_t go = 2, co = 2;
    Status s = gpu->Histogram(values, 21, 20'000'000, b, gc, go, stop);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(CpuOps().Histogram(values, 21, 20'000'000, b, cc, co, stop).ok());
    EXPECT_EQ(gc, cc) << "bins=" << bins;
    EXPECT_EQ(go, co) << "bins=" << bins;
  }
}

TEST(GpuKernelsTest, MatMulMatchesTheCpuToRounding) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  std::atomic<bool> stop{false};
  for (int64_t n : {1, 37, 512}) {
    StatusOr<MatMulResult> on_gpu = gpu->MatMul(n, 8, 2, stop);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().message();
    MatMulResult g = *on_gpu;
    MatMulResult c = *CpuOps().MatMul(n, 8, 1, stop);
    EXPECT_NEAR(g.frobenius, c.frobenius, 1e-10 * c.frobenius) << "n=" << n;
    // The sum cancels; its error is bounded by the sum of magnitudes, below n * ||C||_F.
    EXPECT_NEAR(g.sum, c.sum, 1e-10 * static_cast<double>(n) * c.frobenius) << "n=" << n;
    EXPECT_GT(g.gemm_seconds, 0.0);
  }
  EXPECT_FALSE(CpuOps().MatMul(kMaxCpuMatMulN + 1, 1, 1, stop).ok());
  stop = true;
  EXPECT_EQ(gpu->MatMul(64, 1, 10, stop).status().code(), StatusCode::kCancelled);
}

// A perceptron of `shape` with parameters, images and labels drawn from `seed`.
struct MlpCase {
  MlpShape shape;
  std::vector<float> params, x, grad;
  std::vector<int32_t> labels;
};
MlpCase MakeMlpCase(MlpShape shape, int64_t images, uint64_t seed) {
  MlpCase c{shape, {}, {}, {}, {}};
  c.params.resize(static_cast<size_t>(shape.parameters()));
  for (size_t i = 0; i < c.params.size(); ++i) c.params[i] = static_cast<float>(0.3 * gen::Signed(seed, i));
  c.x.resize(static_cast<size_t>(images * shape.inputs));
  // Pixels as the digits have them: sixteenths, a third of them zero.
  for (size_t i = 0; i < c.x.size(); ++i) c.x[i] = static_cast<float>(gen::Int(seed + 1, i, -8, 25) < 0 ? 0 : gen::Int(seed + 1, i, 0, 17)) / 16.0f;
  for (int64_t n = 0; n < images; ++n) c.labels.push_back(static_cast<int32_t>(gen::Int(seed + 2, n, 0, shape.classes)));
  c.grad.resize(c.params.size());
  return c;
}

TEST(MlpKernelTest, TheCpuGradientMatchesFiniteDifferencesAndRefusesBadArguments) {
  // (Seed 10: no image's hidden unit lies within a step of the ReLU's kink, where the
  // difference quotient and the gradient part ways.)
  MlpCase c = MakeMlpCase({5, 7, 3}, 4, 10);
  double loss = 0;
  ASSERT_TRUE(CpuOps().MlpGradient(c.shape, c.params, c.x, c.labels, c.grad, &loss).ok());
  // Central differences of the summed loss, in double through the float parameters.
  auto loss_at = [&](std::vector<float> p) {
    std::vector<float> g(p.size());
    double l = 0;
    EXPECT_TRUE(CpuOps().MlpGradient(c.shape, p, c.x, c.labels, g, &l).ok());
    return l;
  };
  size_t far = 0;
  for (size_t i = 0; i < c.params.size(); ++i) {
    std::vector<float> up = c.params, down = c.params;
    up[i] += 1e-3f;
    down[i] -= 1e-3f;
    const double numeric = (loss_at(up) - loss_at(down)) / (static_cast<double>(up[i]) - down[i]);
    if (std::abs(numeric - c.grad[i]) > 2e-3 * (1 + std::abs(numeric))) {
      ++far;
      std::printf("param %zu: numeric %.6f, analytic %.6f\n", i, numeric, c.grad[i]);
    }
  }
  EXPECT_EQ(far, 0u);
  EXPECT_GT(loss, 0.0);
  c.labels[2] = 3;  // of 3 classes: 0..2
  Status bad = CpuOps().MlpGradient(c.shape, c.params, c.x, c.labels, c.grad, &loss);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("image 2: label 3 is not one of 3 classes"), std::string::npos) << bad.message();
  c.labels[2] = 0;
  c.x.pop_back();
  EXPECT_EQ(CpuOps().MlpGradient(c.shape, c.params, c.x, c.labels, c.grad, &loss).code(), StatusCode::kInvalidArgument);
}

TEST(GpuKernelsTest, MlpGradientMatchesTheCpuToRounding) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  for (const auto& [shape, images] : {std::pair{MlpShape{64, 128, 10}, int64_t{64}}, {MlpShape{64, 512, 10}, 1},
                                      {MlpShape{300, 1000, 33}, 513}}) {
    MlpCase c = MakeMlpCase(shape, images, 17);
    std::vector<float> on_gpu(c.grad.size(), -1.0f);
    double cpu_loss = 0, gpu_loss = 0;
    ASSERT_TRUE(CpuOps().MlpGradient(shape, c.params, c.x, c.labels, c.grad, &cpu_loss).ok());
    Status s = gpu->MlpGradient(shape, c.params, c.x, c.labels, on_gpu, &gpu_loss);
    ASSERT_TRUE(s.ok()) << s.message();
    float largest = 0;
    for (float g : c.grad) largest = std::max(largest, std::abs(g));
    size_t far = 0;
    for (size_t i = 0; i < c.grad.size(); ++i) {
      if (std::abs(on_gpu[i] - c.grad[i]) > 1e-4f * largest) ++far;
    }
    EXPECT_EQ(far, 0u) << "hidden " << shape.hidden << ", " << images << " images";
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-4 * cpu_loss);
  }
}

TEST(MlpKernelTest, TheCpusLoadedMlpGivesEachImagesForwardPassAndRefusesBadArguments) {
  MlpCase c = MakeMlpCase({5, 7, 3}, 6, 11);
  StatusOr<std::unique_ptr<MlpOnDevice>> mlp = CpuOps().LoadMlp(c.shape, c.params);
  ASSERT_TRUE(mlp.ok()) << mlp.status().message();
  std::vector<float> logits(6 * 3, -1.0f);
  ASSERT_TRUE((*mlp)->Logits(c.x, logits).ok());
  std::vector<float> hid(7), want(3);
  for (size_t n = 0; n < 6; ++n) {
    MlpForward(c.shape, c.params.data(), c.x.data() + 5 * n, hid.data(), want.data());
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(logits[3 * n + k], want[k]) << "image " << n << ", class " << k;
  }
  // No image: nothing to do.
  std::vector<float> none;
  EXPECT_TRUE((*mlp)->Logits(none, none).ok());
  // The parameters are copied: changing the caller's changes nothing.
  const std::vector<float> before = logits;
  std::fill(c.params.begin(), c.params.end(), 0.0f);
  ASSERT_TRUE((*mlp)->Logits(c.x, logits).ok());
  EXPECT_EQ(logits, before);

  std::vector<float> short_x(c.x.begin(), c.x.end() - 1);
  Status bad = (*mlp)->Logits(short_x, logits);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "29 inputs are not whole images of 5 with room for 3 classes each in 18 logits");
  std::vector<float> fewer(5 * 3);
  EXPECT_EQ((*mlp)->Logits(c.x, fewer).message(),
            "30 inputs are not whole images of 5 with room for 3 classes each in 15 logits");
  StatusOr<std::unique_ptr<MlpOnDevice>> wrong = CpuOps().LoadMlp(c.shape, short_x);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "an MLP of 66 parameters was given 29");
  StatusOr<std::unique_ptr<MlpOnDevice>> wide = CpuOps().LoadMlp({5, 4097, 3}, c.params);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.status().message(), "hidden 4097: expected 1..4096");
}

TEST(GpuKernelsTest, AnMlpLoadedOnTheGpuGivesTheCpusLogitsToRounding) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  for (const auto& [shape, images] : {std::pair{MlpShape{64, 128, 10}, int64_t{1}}, {MlpShape{64, 1024, 10}, 32},
                                      {MlpShape{64, 4096, 10}, 7}, {MlpShape{300, 1000, 33}, 513}}) {
    MlpCase c = MakeMlpCase(shape, images, 19);
    StatusOr<std::unique_ptr<MlpOnDevice>> cpu = CpuOps().LoadMlp(shape, c.params);
    StatusOr<std::unique_ptr<MlpOnDevice>> on_gpu = gpu->LoadMlp(shape, c.params);
    ASSERT_TRUE(cpu.ok() && on_gpu.ok()) << on_gpu.status().message();
    const auto n = static_cast<size_t>(images * shape.classes);
    std::vector<float> want(n), got(n, -1.0f);
    ASSERT_TRUE((*cpu)->Logits(c.x, want).ok());
    // Twice: the second batch reuses the device's scratch, a smaller one after it too.
    for (int round = 0; round < 2; ++round) {
      Status s = (*on_gpu)->Logits(c.x, got);
      ASSERT_TRUE(s.ok()) << s.message();
      float largest = 0;
      for (float v : want) largest = std::max(largest, std::abs(v));
      size_t far = 0;
      for (size_t i = 0; i < n; ++i) {
        if (std::abs(got[i] - want[i]) > 1e-4f * largest) ++far;
      }
      EXPECT_EQ(far, 0u) << "hidden " << shape.hidden << ", " << images << " images, round " << round;
    }
    std::vector<float> first(c.x.begin(), c.x.begin() + shape.inputs), one(static_cast<size_t>(shape.classes));
    ASSERT_TRUE((*on_gpu)->Logits(first, one).ok());
    for (int32_t k = 0; k < shape.classes; ++k) EXPECT_NEAR(one[k], want[k], 1e-4f * (1 + std::abs(want[k])));
  }
}

TEST(GpuKernelsTest, KernelsOnAGpuGiveTheCpuOutputs) {
  MERIDIAN_GPU_OR_SKIP(gpu);
  (void)gpu;
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> cases = {
      {"sum", {{"range", "1000"}}},
      {"sort", {{"generate", "100000"}, {"output", "summary"}}},
      {"sort", {{"generate", "1000"}}},
      {"histogram", {{"bins", "64"}, {"generate", "1000000"}, {"min", "-2"}, {"max", "2"}}},
  };
  for (const auto& [kernel, args] : cases) {
    KernelRun cpu, on_gpu;
    cpu.args = on_gpu.args = args;
    cpu.index = on_gpu.index = 3;
    cpu.inputs = on_gpu.inputs = {kernel == "histogram" ? "0.5 1.5 9" : "4 5 6"};
    on_gpu.gpu = 0;
    StatusOr<std::string> want = cpu(kernel), got = on_gpu(kernel);
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, *want) << kernel;
  }
  KernelRun big;
  big.args = {{"n", "8192"}, {"seed", "1"}};
  big.gpu = 0;
  EXPECT_TRUE(big("matmul").ok());  // beyond the CPU's limit
}

}  // namespace
}  // namespace meridian::kernels
