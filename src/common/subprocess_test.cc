// RunProcess's output while the child runs (on_output): each byte told once, in
// order, with the totals; what a slow reader missed is counted, never silently cut.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/subprocess.h"

namespace meridian {
namespace {

// The child writes a line, then waits for the test to let it go on: the first line
// is told while it runs, before the second exists.
TEST(SubprocessTest, OutputIsToldWhileTheChildRunsEachByteOnce) {
  const std::string gate = std::filesystem::temp_directory_path() / ("meridian-gate-" + std::to_string(getpid()));
  std::filesystem::remove(gate);
  ProcessOptions p;
  p.argv = {"sh", "-c", "echo first; echo warn >&2; while [ ! -e " + gate + " ]; do sleep 0.02; done; echo second"};
  p.output_interval_us = 20'000;
  p.timeout_us = 60'000'000;
  std::vector<OutputSoFar> told;
  p.on_output = [&](const OutputSoFar& o) {
    told.push_back(o);
    // The first report holds both streams' first lines once both were read.
    if (o.stdout_bytes >= 6 && o.stderr_bytes >= 5) std::ofstream(gate) << "go";
  };
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  std::filesystem::remove(gate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->stdout_tail, "first\nsecond\n");
  EXPECT_EQ(r->stdout_bytes, 13);
  EXPECT_EQ(r->stderr_bytes, 5);
  // What was told, joined, is a prefix of each stream whose length is the last total.
  std::string out, err;
  for (const OutputSoFar& o : told) {
    out += o.stdout_new;
    err += o.stderr_new;
    EXPECT_EQ(static_cast<int64_t>(out.size()), o.stdout_bytes);
    EXPECT_EQ(static_cast<int64_t>(err.size()), o.stderr_bytes);
  }
  ASSERT_FALSE(told.empty());
  EXPECT_EQ(out.substr(0, 6), "first\n");
  EXPECT_EQ(err, "warn\n");
  EXPECT_EQ(r->stdout_tail.rfind(out, 0), 0u) << out;
}

// More output between two reports than a tail holds: the report carries the newest
// max_tail bytes, and its total says how many came before them.
TEST(SubprocessTest, AReportOfMoreThanATailCarriesTheNewestAndTheTotal) {
  const std::string gate = std::filesystem::temp_directory_path() / ("meridian-gate2-" + std::to_string(getpid()));
  std::filesystem::remove(gate);
  ProcessOptions p;
  // 3000 bytes at once ("0123456789" 300 times), then a wait for the gate.
  p.argv = {"sh", "-c", "i=0; while [ $i -lt 300 ]; do printf 0123456789; i=$((i+1)); done; "
                        "while [ ! -e " + gate + " ]; do sleep 0.02; done"};
  p.max_tail = 100;
  p.output_interval_us = 20'000;
  p.timeout_us = 60'000'000;
  std::vector<OutputSoFar> told;
  p.on_output = [&](const OutputSoFar& o) {
    told.push_back(o);
    if (o.stdout_bytes == 3000) std::ofstream(gate) << "go";
  };
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  std::filesystem::remove(gate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(told.empty());
  EXPECT_EQ(told.back().stdout_bytes, 3000);
  for (const OutputSoFar& o : told) EXPECT_LE(o.stdout_new.size(), 100u);
  // The newest bytes, whole: the last report ends where the output does.
  const std::string& last = told.back().stdout_new;
  std::string expected;
  for (int i = 0; i < 300; ++i) expected += "0123456789";
  EXPECT_EQ(expected.substr(expected.size() - last.size()), last);
  EXPECT_EQ(r->stdout_bytes, 3000);
  EXPECT_EQ(r->stdout_tail, expected.substr(2900));
}

}  // namespace
}  // namespace meridian
