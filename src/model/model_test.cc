#include <gtest/gtest.h>

#include "common/units.h"
#include "model/accelerators.h"
#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"

namespace meridian::model {
namespace {

TEST(AcceleratorsTest, FindsCanonicalNamesCaseInsensitively) {
  ASSERT_TRUE(FindAcceleratorType("a100").has_value());
  EXPECT_EQ(FindAcceleratorType("a100")->name, "A100");
  EXPECT_EQ(FindAcceleratorType("A100")->default_memory_bytes, 40 * kGiB);
  EXPECT_FALSE(FindAcceleratorType("A10O").has_value());
  EXPECT_NE(KnownAcceleratorTypeNames().find("TPU-v5e"), std::string::npos);
}

TEST(ThroughputTableTest, LooksUpExactCountThenScalesLinearly) {
  ThroughputTable t;
  t.Set("V100", "resnet-50-b64", 10.0);
  t.Set("V100", "resnet-50-b64", 15.0, 2);  // measured: sub-linear
  t.Set("K80", "resnet-50-b64", 2.0);
  EXPECT_EQ(t.Lookup("V100", "resnet-50-b64", 1), 10.0);
  EXPECT_EQ(t.Lookup("V100", "resnet-50-b64", 2), 15.0);
  EXPECT_EQ(t.Lookup("V100", "resnet-50-b64", 4), 40.0);
  EXPECT_EQ(t.Lookup("T4", "resnet-50-b64"), std::nullopt);
  EXPECT_EQ(t.Lookup("V100", "lm-b20"), std::nullopt);
  EXPECT_TRUE(t.HasKind("resnet-50-b64"));
  EXPECT_FALSE(t.HasKind("resnet"));
  EXPECT_EQ(t.DeviceTypes("resnet-50-b64"), (std::vector<std::string>{"K80", "V100"}));
  EXPECT_EQ(t.Unit("resnet-50-b64"), "unit");
  t.SetUnit("resnet-50-b64", "step");
  EXPECT_EQ(t.Unit("resnet-50-b64"), "step");
}

TEST(FleetTest, EgressIsChargedByTheSendingSide) {
  Fleet f;
  f.sites.push_back(Site{SiteId(0), "us-east", SiteKind::kCloud, "aws", "us-east-1", 90'000});
  f.sites.push_back(Site{SiteId(1), "eu-west", SiteKind::kCloud, "gcp", "europe-west1", 120'000});
  f.sites.push_back(Site{SiteId(2), "edge", SiteKind::kEdge, "onprem", "edge-1", 0});
  f.links.push_back(Link{SiteId(0), SiteId(1), 80'000, kGbps, 20'000, 50'000});
  EXPECT_EQ(f.EgressMicroUsdPerGB(SiteId(0), SiteId(1)), 20'000);
  EXPECT_EQ(f.EgressMicroUsdPerGB(SiteId(1), SiteId(0)), 50'000);
  EXPECT_EQ(f.EgressMicroUsdPerGB(SiteId(0), SiteId(2)), 90'000);  // no link: site default
  EXPECT_EQ(f.EgressMicroUsdPerGB(SiteId(2), SiteId(2)), 0);
  EXPECT_EQ(f.FindSite("eu-west"), SiteId(1));
  EXPECT_EQ(f.FindLink(SiteId(1), SiteId(0)), &f.links[0]);
  EXPECT_EQ(f.FindLink(SiteId(1), SiteId(2)), nullptr);
}

TEST(WorkTest, RegionRulesMatchNameRegionOrPrefix) {
  Site s{SiteId(0), "eu-west", SiteKind::kCloud, "gcp", "europe-west1", 0};
  Site aws{SiteId(1), "frankfurt", SiteKind::kCloud, "aws", "eu-central-1", 0};
  EXPECT_TRUE(SiteMatchesRegionRule(s, "eu-west"));
  EXPECT_TRUE(SiteMatchesRegionRule(s, "europe-west1"));
  EXPECT_TRUE(SiteMatchesRegionRule(s, "europe"));
  EXPECT_FALSE(SiteMatchesRegionRule(s, "euro"));  // a prefix must end at a '-'
  EXPECT_TRUE(SiteMatchesRegionRule(aws, "eu"));
  EXPECT_TRUE(SiteMatchesRegionRule(aws, "eu-central"));
  EXPECT_FALSE(SiteMatchesRegionRule(aws, "us"));
  EXPECT_FALSE(SiteMatchesRegionRule(aws, ""));
}

TEST(WorkTest, Objectives) {
  EXPECT_EQ(ParseObjective("cheapest"), Objective::kCheapest);
  EXPECT_EQ(ParseObjective("cheap"), std::nullopt);
  EXPECT_EQ(ObjectiveName(Objective::kBalanced), "balanced");
}

}  // namespace
}  // namespace meridian::model
