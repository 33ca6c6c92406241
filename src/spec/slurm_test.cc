#include "spec/slurm.h"

#include <gtest/gtest.h>

namespace meridian::spec {
namespace {

// `scontrol show job -d 2` of Debian's slurm-wlm 22.05.8, for
// `sbatch --partition edge --gres gpu:a100:1,gpu:t4:2 --cpus-per-task 2` on node vm.
constexpr std::string_view kJob = R"(JobId=2 JobName=sl.sh
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901758 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Partition=edge AllocNode:Sid=localhost:1310
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=vm
   BatchHost=vm
   NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
   TRES=cpu=2,mem=4G,node=1,billing=2
   JOB_GRES=gpu:a100:1,gpu:t4:2
     Nodes=vm CPU_IDs=0-1 Mem=4096 GRES=gpu:a100:1(IDX:0),gpu:t4:2(IDX:2-3)
   MinCPUsNode=2 MinMemoryNode=0 MinTmpDiskNode=0
   TresPerNode=gres:gpu:a100:1,gres:gpu:t4:2
)";

TEST(SlurmTest, ReadsThisNodesShareOfTheJob) {
  StatusOr<SlurmAllocation> a = ParseSlurmJob(kJob, "vm");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->job_id, "2");
  EXPECT_EQ(a->partition, "edge");
  EXPECT_EQ(a->cpus, 2);
  EXPECT_EQ(a->memory_bytes, int64_t{4096} << 20);
  ASSERT_EQ(a->gres.size(), 2u);
  EXPECT_EQ(a->gres[0].name, "gpu");
  EXPECT_EQ(a->gres[0].type, "a100");
  EXPECT_EQ(a->gres[0].count, 1);
  EXPECT_EQ(a->gres[1].type, "t4");
  EXPECT_EQ(a->gres[1].count, 2);
}

TEST(SlurmTest, PicksTheNodeGroupThatNamesTheNode) {
  // One line (-o), two groups of nodes with different shares.
  constexpr std::string_view kTwo =
      "JobId=77 Partition=gpu NodeList=gn[01-03] Nodes=gn[01-02] CPU_IDs=0-3,8 Mem=2048 GRES=gpu:2(IDX:0-1) "
      "Nodes=gn03 CPU_IDs=0 Mem=512 GRES= MinCPUsNode=1";
  StatusOr<SlurmAllocation> a = ParseSlurmJob(kTwo, "gn02");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->cpus, 5);
  EXPECT_EQ(a->memory_bytes, int64_t{2048} << 20);
  ASSERT_EQ(a->gres.size(), 1u);
  EXPECT_EQ(a->gres[0].type, "");
  EXPECT_EQ(a->gres[0].count, 2);
  StatusOr<SlurmAllocation> b = ParseSlurmJob(kTwo, "gn03");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->cpus, 1);
  EXPECT_TRUE(b->gres.empty());
  StatusOr<SlurmAllocation> c = ParseSlurmJob(kTwo, "gn04");
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), "slurm job 77: no node group names gn04 (groups: gn[01-02] gn03)");
  EXPECT_EQ(ParseSlurmJob("JobId=5 JobState=PENDING", "vm").status().message(),
            "slurm job 5: no node group names vm (groups: none; is this scontrol show job -d?)");
}

TEST(SlurmTest, RefusesMalformedOutput) {
  EXPECT_EQ(ParseSlurmJob("JobId=1 Partition=p Nodes=vm CPU_IDs=3-1 Mem=1", "vm").status().message(),
            "slurm job: CPU_IDs: bad range '3-1'");
  EXPECT_EQ(ParseSlurmJob("JobId=1 Partition=p Nodes=vm CPU_IDs=0 Mem=lots", "vm").status().message(),
            "slurm job: Mem: expected a number, got 'lots'");
  EXPECT_EQ(ParseSlurmJob("JobId=1 Partition=p Nodes=vm CPU_IDs=0 Mem=1 GRES=gpu:a:b:2", "vm").status().message(),
            "slurm job: GRES: expected NAME[:TYPE][:COUNT], got 'gpu:a:b:2'");
  EXPECT_EQ(ParseSlurmJob("JobId=1 Partition=p Nodes=vm CPU_IDs=0 Mem=1 GRES=gpu:a100:5000", "vm").status().message(),
            "slurm job: GRES 'gpu:a100:5000': more than 1024");
  EXPECT_EQ(ParseSlurmJob(std::string(kMaxSlurmJobText + 1, ' '), "vm").status().message(),
            "slurm job: 1048577 bytes of scontrol output, more than the 1048576 read");
}

TEST(SlurmTest, ExpandsHostlists) {
  StatusOr<std::vector<std::string>> h = ExpandHostlist("gpu[01-03,7],login,r[9-10]x");
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(*h, (std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu7", "login", "r9x", "r10x"}));
  EXPECT_EQ(ExpandHostlist("n[1-100000]").status().message(), "hostlist 'n[1-100000]': bad range '1-100000'");
  EXPECT_EQ(ExpandHostlist("n[1-3", 10).status().message(),
            "hostlist 'n[1-3': expected PREFIX[RANGES]SUFFIX with one bracket");
  EXPECT_EQ(ExpandHostlist("a[1-6],b[1-6]", 10).status().message(), "hostlist names more than 10 hosts");
}

TEST(SlurmTest, TheNodeHasTheJobsShareAndGpus) {
  StatusOr<SlurmAllocation> a = ParseSlurmJob(kJob, "vm");
  ASSERT_TRUE(a.ok());
  std::string note;
  StatusOr<NodeConfig> c = NodeFromSlurm(*a, SlurmNodeOptions{}, &note);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->node.name, "vm");
  EXPECT_EQ(c->site, "edge");
  EXPECT_EQ(c->node.cpu_milli, 2000);
  EXPECT_EQ(c->node.memory_bytes, int64_t{4096} << 20);
  ASSERT_EQ(c->node.devices.size(), 3u);
  EXPECT_EQ(c->node.devices[0].type, "A100");
  EXPECT_EQ(c->node.devices[1].type, "T4");
  EXPECT_EQ(c->node.devices[2].type, "T4");
  EXPECT_EQ(c->node.devices[2].index, 2);
  EXPECT_TRUE(c->node.devices[0].emulated);  // until CUDA finds real ones
  EXPECT_EQ(c->node.labels.at("slurm-job"), "2");
  EXPECT_EQ(c->node.labels.at("slurm-partition"), "edge");
  EXPECT_EQ(note, "");

  SlurmNodeOptions o;
  o.site = "hpc";
  o.gpu_types = *ParseGpuTypeMap("t4=L4");
  c = NodeFromSlurm(*a, o, &note);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->site, "hpc");
  EXPECT_EQ(c->node.devices[1].type, "L4");
}

TEST(SlurmTest, UntypedAndUnknownGpus) {
  SlurmAllocation a{"9", "gpu", "gn1", 4, int64_t{1} << 30, {{"gpu", "", 2}, {"nic", "", 1}}};
  std::string note;
  StatusOr<NodeConfig> c = NodeFromSlurm(a, SlurmNodeOptions{}, &note);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->node.devices.empty());
  EXPECT_EQ(note, "left out: 2 GPUs of no type (CUDA's are taken; else give --gpu-type); GRES nic (not a GPU)");
  SlurmNodeOptions typed;
  typed.untyped_gpu = "H100";
  c = NodeFromSlurm(a, typed, &note);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->node.devices.size(), 2u);
  EXPECT_EQ(c->node.devices[0].type, "H100");

  a.gres = {{"gpu", "rtx9090", 1}};
  EXPECT_EQ(NodeFromSlurm(a, SlurmNodeOptions{}, &note).status().message().substr(0, 54),
            "slurm GRES gpu:rtx9090: no accelerator type 'rtx9090' ");
  a.memory_bytes = 0;
  EXPECT_EQ(NodeFromSlurm(a, SlurmNodeOptions{}, &note).status().message(),
            "slurm job 9: node gn1 has no Mem= (ask for memory: sbatch --mem)");
  EXPECT_EQ(ParseGpuTypeMap("a100").status().message(), "--gpu-types: expected GRES_TYPE=TYPE[,...], got 'a100'");
  EXPECT_EQ(ParseGpuTypeMap("x=Z80").status().message().substr(0, 44), "--gpu-types: unknown accelerator type 'Z80' ");
}

}  // namespace
}  // namespace meridian::spec
