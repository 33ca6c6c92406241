#include "spec/gavel.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "spec/node_list.h"

namespace meridian::spec {
namespace {

TEST(GavelTest, NormalisesModelNames) {
  EXPECT_EQ(NormaliseGavelModel("ResNet-50 (batch size 64)"), "resnet-50-b64");
  EXPECT_EQ(NormaliseGavelModel("A3C"), "a3c");
  EXPECT_EQ(NormaliseGavelModel("LM (batch size 20)"), "lm-b20");
}

TEST(GavelTest, ParsesSoloThroughputsPerScaleAndSkipsUnconsolidated) {
  const char* json = R"J({
    "v100": {"('ResNet-50 (batch size 64)', 1)": {"null": 10.5, "('A3C', 1)": [5.0, 4.0]},
             "('ResNet-50 (batch size 64)', 2)": {"null": 19.0}},
    "k80": {"('ResNet-50 (batch size 64)', 1)": {"null": 1.5}},
    "v100_unconsolidated": {"('ResNet-50 (batch size 64)', 1)": {"null": 99.0}}})J";
  StatusOr<model::ThroughputTable> t = ParseGavelThroughputs(json, "t.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Lookup("V100", "resnet-50-b64", 1), 10.5);
  EXPECT_EQ(t->Lookup("V100", "resnet-50-b64", 2), 19.0);
  EXPECT_EQ(t->Lookup("K80", "resnet-50-b64", 1), 1.5);
  EXPECT_EQ(t->Unit("resnet-50-b64"), "step");
}

TEST(NodeListTest, ResourcesPastAnyMachineAreRefusedNotOverflowed) {
  // Found by fuzz_trace: memory_mib times 1 MiB overflowed (undefined behaviour).
  meridian::StatusOr<std::vector<ListedNode>> n = ParseAlibabaNodeList(
      "sn,cpu_milli,memory_mib,gpu,model\nbig,64000,2621444444444444,2,P100\n", "nodes.csv");
  ASSERT_FALSE(n.ok());
  EXPECT_THAT(n.status().message(), ::testing::HasSubstr("nodes.csv:2: memory_mib: expected 1 to 67108864"));
  EXPECT_FALSE(ParseAlibabaNodeList("sn,cpu_milli,memory_mib,gpu,model\nbig,99999999999,1024,2,P100\n", "n.csv").ok());
}

TEST(GavelTest, RejectsMalformedTables) {
  EXPECT_FALSE(ParseGavelThroughputs("{not json", "t.json").ok());
  EXPECT_THAT(ParseGavelThroughputs(R"J({"v100": {"bad key": {"null": 1}}})J", "t.json").status().message(),
              ::testing::HasSubstr("not of the form"));
  EXPECT_THAT(ParseGavelThroughputs(R"J({"v100": {"('A3C', 1)": {}}})J", "t.json").status().message(),
              ::testing::HasSubstr("solo throughput"));
  // A scale too big for an int once threw std::out_of_range out of the parser (rc 134).
  StatusOr<model::ThroughputTable> huge =
      ParseGavelThroughputs(R"J({"v100": {"('A3C', 99999999999999999999)": {"null": 1}}})J", "t.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), ::testing::HasSubstr("the scale must be a whole number of GPUs from 1 to 1024"));
  EXPECT_FALSE(ParseGavelThroughputs(R"J({"v100": {"('A3C', 0)": {"null": 1}}})J", "t.json").ok());
}

TEST(GavelTest, LoadsTheSharedTableWithItsHeterogeneity) {
  const char* d = std::getenv("MERIDIAN_SOURCE_DIR");
  std::string path = std::string(d ? d : ".") + "/tests/fixtures/gavel-throughputs.json";
  StatusOr<model::ThroughputTable> t = LoadGavelThroughputs(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Kinds().size(), 26u);
  // The faster GPU is not faster by one factor: speed-ups differ by model.
  double resnet = *t->Lookup("V100", "resnet-50-b64") / *t->Lookup("K80", "resnet-50-b64");
  double a3c = *t->Lookup("V100", "a3c") / *t->Lookup("K80", "a3c");
  EXPECT_GT(std::abs(resnet - a3c), 1.0);
}

TEST(NodeListTest, ParsesAndRejectsWithLineNumbers) {
  auto ok = ParseAlibabaNodeList("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\nn1,32000,512,0,\n", "n.csv");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].gpu_model, "T4");
  EXPECT_EQ((*ok)[1].gpus, 0);
  auto bad = ParseAlibabaNodeList("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\nn1,-5,512,0,\n", "n.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("n.csv:3: cpu_milli"));
  EXPECT_FALSE(ParseAlibabaNodeList("name,x\n", "n.csv").ok());
  EXPECT_THAT(ParseAlibabaNodeList("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,Z80\n", "n.csv").status().message(),
              ::testing::HasSubstr("unknown GPU model, got 'Z80'"));
}

}  // namespace
}  // namespace meridian::spec
