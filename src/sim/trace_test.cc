// Trace readers: what each published format turns into, and one clear error per
// kind of bad input, naming the file, line and column.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/units.h"
#include "sim/trace.h"

namespace meridian::sim {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const StatusOr<Trace>& t) { return t.ok() ? "ok" : std::string(t.status().message()); }

const char* kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

TEST(AlibabaTraceTest, ReadsFractionsConstraintsAndRunTimes) {
  StatusOr<Trace> t = ParseAlibabaPods(std::string(kPodHeader) +
                                           "p0,12000,16384,1,460,,LS,Running,100,1100,200\n"
                                           "p1,6000,1024,2,1000,V100M16|v100m32,BE,Succeeded,50,90,\n"
                                           "p2,8000,0,0,0,,BE,Pending,70,80,\n",
                                       "pods.csv");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->jobs.size(), 3u);
  // Sorted by arrival (creation time).
  EXPECT_EQ(t->jobs[0].job->name, "p1");
  EXPECT_EQ(t->jobs[0].arrival_us, 50 * kSecondUs);
  const model::Task& p1 = t->jobs[0].job->tasks[0];
  EXPECT_EQ(p1.resources.device_count, 2);
  EXPECT_EQ(p1.resources.device_share_milli, 1000);
  EXPECT_EQ(p1.resources.accelerator_any_of, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ(p1.duration_us, 40 * kSecondUs);  // never scheduled: deletion - creation
  const model::Task& p0 = t->jobs[2].job->tasks[0];
  EXPECT_EQ(p0.resources.device_share_milli, 460);
  EXPECT_EQ(p0.resources.cpu_milli, 12000);
  EXPECT_EQ(p0.resources.memory_bytes, 16 * kGiB);
  EXPECT_EQ(p0.duration_us, 900 * kSecondUs);  // deletion - scheduled
  EXPECT_EQ(t->jobs[1].job->tasks[0].resources.device_count, 0);
  EXPECT_EQ(t->format, "alibaba-gpu-2023");
  EXPECT_EQ(t->name, "pods");
}

TEST(AlibabaTraceTest, APodListWithoutTimesIsForTheFillExperiment) {
  StatusOr<Trace> t = ParseAlibabaPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,10,1,1000\np1,1000,10,8,1000\n",
                                       "multigpu.csv");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->timeless);
  ASSERT_EQ(t->jobs.size(), 2u);
  EXPECT_EQ(t->jobs[1].arrival_us, kSecondUs);
  EXPECT_EQ(t->jobs[1].job->tasks[0].resources.device_count, 8);
}

TEST(AlibabaTraceTest, RejectsBadFieldsWithFileLineAndColumn) {
  std::string h = kPodHeader;
  EXPECT_THAT(ErrorOf(ParseAlibabaPods(h + "p,1,1,1,1500,,LS,R,0,1,0\n", "pods.csv")),
              HasSubstr("pods.csv:2: gpu_milli: expected 1 to 1000"));
  EXPECT_THAT(ErrorOf(ParseAlibabaPods(h + "p,1,1,1,500,Z80,LS,R,0,1,0\n", "pods.csv")),
              HasSubstr("unknown accelerator 'Z80'"));
  EXPECT_THAT(ErrorOf(ParseAlibabaPods(h + "p,1,1,1,500,,LS,R,10,5,10\n", "pods.csv")),
              HasSubstr("pods.csv:2: deletion_time: ends before it began"));
  EXPECT_THAT(ErrorOf(ParseAlibabaPods(h + "p,1,1,1,500,,LS,R,0,1\n", "pods.csv")),
              HasSubstr("pods.csv:2: expected 11 fields"));
  EXPECT_THAT(ErrorOf(ParseAlibabaPods("name,cpu_milli\np,1\n", "pods.csv")),
              HasSubstr("pods.csv:1: the header has no column 'memory_mib'"));
}

model::ThroughputTable GavelLike() {
  model::ThroughputTable tt;
  for (const char* kind : {"resnet-18-b16", "resnet-18-b128", "resnet-18-b256"}) {
    tt.Set("K80", kind, 2);
    tt.Set("V100", kind, 20);
  }
  tt.Set("V100", "cyclegan", 4);
  return tt;
}

TEST(SiaTraceTest, OneGangPerJobWithItsShareOfTheSamples) {
  StatusOr<Trace> t = ParseSiaPhilly("name,time,application,num_replicas,batch_size\n"
                                     "cifar10-0,107,cifar10,4,512\n"
                                     "yolov3-1,5,yolov3,1,64\n",
                                     "w.csv", GavelLike());
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->jobs.size(), 2u);
  const model::Job& c = *t->jobs[1].job;
  EXPECT_EQ(t->jobs[1].arrival_us, 107 * kSecondUs);
  ASSERT_EQ(c.tasks.size(), 4u);
  // 512 / 4 = 128 per replica: Gavel's batch 128; 2.5M samples / (4 x 128) steps each.
  EXPECT_EQ(c.tasks[0].work->kind, "resnet-18-b128");
  EXPECT_DOUBLE_EQ(c.tasks[0].work->amount, 50'000.0 * 50 / (4 * 128));
  EXPECT_EQ(c.tasks[3].gang, "replicas");
  EXPECT_EQ(c.tasks[0].resources.accelerator_any_of, (std::vector<std::string>{"K80", "V100"}));
  const model::Job& y = *t->jobs[0].job;
  EXPECT_EQ(y.tasks.size(), 1u);
  EXPECT_TRUE(y.tasks[0].gang.empty());
  EXPECT_EQ(y.tasks[0].work->kind, "cyclegan");
}

// Sia's newer workloads have fractional times; they keep their microseconds.
TEST(SiaTraceTest, FractionalTimesAreReadToTheMicrosecond) {
  StatusOr<Trace> t = ParseSiaPhilly("name,time,application,num_replicas,batch_size\n"
                                     "a,487.661836,cifar10,1,128\n"
                                     "b,0.5,yolov3,1,1\n",
                                     "w.csv", GavelLike());
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->jobs.size(), 2u);
  EXPECT_EQ(t->jobs[0].arrival_us, 500'000);
  EXPECT_EQ(t->jobs[1].arrival_us, 487'661'836);
  EXPECT_THAT(ErrorOf(ParseSiaPhilly("name,time,application,num_replicas,batch_size\nx,-0.5,cifar10,1,1\n", "w.csv",
                                     GavelLike())),
              HasSubstr("w.csv:2: time: expected seconds from 0 to"));
  EXPECT_THAT(ErrorOf(ParseSiaPhilly("name,time,application,num_replicas,batch_size\nx,inf,cifar10,1,1\n", "w.csv",
                                     GavelLike())),
              HasSubstr("w.csv:2: time:"));
}

TEST(SiaTraceTest, RejectsUnknownApplicationsAndKindsTheTableLacks) {
  EXPECT_THAT(ErrorOf(ParseSiaPhilly("name,time,application,num_replicas,batch_size\nx,1,gpt5,1,1\n", "w.csv",
                                     GavelLike())),
              HasSubstr("w.csv:2: application: unknown application"));
  EXPECT_THAT(ErrorOf(ParseSiaPhilly("name,time,application,num_replicas,batch_size\nx,1,imagenet,1,64\n", "w.csv",
                                     GavelLike())),
              HasSubstr("no kind 'resnet-50-b64'"));
  EXPECT_THAT(ErrorOf(ParseSiaPhilly("name,time,application,num_replicas,batch_size\nx,1,cifar10,0,64\n", "w.csv",
                                     GavelLike())),
              HasSubstr("num_replicas: expected 1 to 1024 replicas, got '0'"));
}

// Gavel's own trace files: ten tab-separated fields, no header.
TEST(GavelTraceTest, OneGangPerJobOfItsScaleFactor) {
  const std::string text =
      "ResNet-18 (batch size 128)\tcd a && python3 main.py\tdir\t--num_steps\t1\t5000\t4\t1\t-1\t12.5\n"
      "CycleGAN\tpython3 cyclegan.py\tdir\t--n_steps\t0\t300\t1\t1\tNone\t0\n";
  StatusOr<Trace> t = ParseGavelTrace(text, "gavel.trace", GavelLike());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->format, "gavel");
  ASSERT_EQ(t->jobs.size(), 2u);
  const model::Job& cyclegan = *t->jobs[0].job;
  EXPECT_EQ(t->jobs[0].arrival_us, 0);
  ASSERT_EQ(cyclegan.tasks.size(), 1u);
  EXPECT_TRUE(cyclegan.tasks[0].gang.empty());
  EXPECT_EQ(cyclegan.tasks[0].work->kind, "cyclegan");
  EXPECT_DOUBLE_EQ(cyclegan.tasks[0].work->amount, 300);
  const model::Job& resnet = *t->jobs[1].job;
  EXPECT_EQ(t->jobs[1].arrival_us, 12'500'000);
  ASSERT_EQ(resnet.tasks.size(), 4u);
  EXPECT_EQ(resnet.tasks[3].gang, "replicas");
  EXPECT_EQ(resnet.tasks[2].work->kind, "resnet-18-b128");
  EXPECT_DOUBLE_EQ(resnet.tasks[2].work->amount, 5000);
  EXPECT_EQ(resnet.tasks[0].resources.accelerator_any_of, (std::vector<std::string>{"K80", "V100"}));

  EXPECT_THAT(ErrorOf(ParseGavelTrace("A3C\tx\n", "g.trace", GavelLike())),
              HasSubstr("g.trace:1: expected 10 tab-separated fields (Gavel's trace format), got 2"));
  EXPECT_THAT(ErrorOf(ParseGavelTrace("A3C\tc\td\ta\t0\t10\t1\t1\t-1\t0\n", "g.trace", GavelLike())),
              HasSubstr("g.trace:1: job type 'A3C': the throughput table has no kind 'a3c'"));
  EXPECT_THAT(ErrorOf(ParseGavelTrace("CycleGAN\tc\td\ta\t0\t10\t3.5\t1\t-1\t0\n", "g.trace", GavelLike())),
              HasSubstr("scale_factor: expected a whole number of GPUs from 1 to 1024, got '3.5'"));
  EXPECT_THAT(ErrorOf(ParseGavelTrace("CycleGAN\tc\td\ta\t0\t10\t1\t1\t-1\tnan\n", "g.trace", GavelLike())),
              HasSubstr("g.trace:1: arrival_time: expected a number, got 'nan'"));
  EXPECT_THAT(ErrorOf(ParseGavelTrace("\n\n", "g.trace", GavelLike())), HasSubstr("g.trace: no jobs"));
}

TEST(GenericTraceTest, ReadsDagsInputsAndDefaults) {
  model::Fleet fleet;
  fleet.sites.push_back(model::Site{SiteId(0), "x", model::SiteKind::kDc, "", "x", 0});
  StatusOr<Trace> t = ParseGenericTrace(
      "job,task,arrival_s,duration_s,gpus,gpu_milli,after,input_bytes,input_site,tenant\n"
      "j,a,1.5,10,1,250,,100,x,vision\n"
      "j,b,1.5,5,,,a,,,\n"
      "k,,0,1,,,,,,\n",
      "t.csv", fleet);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->jobs.size(), 2u);
  EXPECT_EQ(t->jobs[0].job->name, "k");
  EXPECT_EQ(t->jobs[0].job->tasks[0].name, "t0");
  const model::Job& j = *t->jobs[1].job;
  EXPECT_EQ(t->jobs[1].arrival_us, 1'500'000);
  EXPECT_EQ(j.tenant, "vision");
  EXPECT_EQ(j.tasks[0].resources.device_share_milli, 250);
  EXPECT_EQ(j.tasks[0].inputs.at(0).size_bytes, 100);
  EXPECT_EQ(j.tasks[0].inputs.at(0).locations, std::vector<SiteId>{SiteId(0)});
  EXPECT_EQ(j.tasks[1].after, std::vector<TaskId>{TaskId(0)});
  EXPECT_EQ(j.tasks[1].resources.device_count, 0);
  EXPECT_EQ(j.tasks[1].resources.cpu_milli, 1000);
}

TEST(GenericTraceTest, RejectsWhatItCannotUse) {
  model::Fleet fleet;
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s,duration_s,colour\nj,0,1,red\n", "t.csv", fleet)),
              HasSubstr("t.csv:1: unknown column 'colour'"));
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s\nj,0\n", "t.csv", fleet)),
              HasSubstr("needs duration_s, or kind and work"));
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,task,arrival_s,duration_s,after\nj,a,0,1,b\nj,b,0,1,\n", "t.csv", fleet)),
              HasSubstr("t.csv:2: after: 'b' is not a task listed earlier in job 'j'"));
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s,duration_s\nj,0,1\nj,3,1\n", "t.csv", fleet)),
              HasSubstr("t.csv:3: arrival_s: differs from the arrival of the job's first task"));
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s,duration_s,input_bytes,input_site\nj,0,1,5,mars\n", "t.csv",
                                        fleet)),
              HasSubstr("input_site: no such site in the fleet, got 'mars'"));
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s,duration_s\nj,-1,1\n", "t.csv", fleet)),
              HasSubstr("arrival_s: expected seconds from 0 to 3153600000"));
  // Found by fuzz_trace: times and sizes that overflowed when turned into microseconds
  // and bytes (undefined behaviour), and non-finite numbers taken as times.
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s,duration_s\nj,nan,1\n", "t.csv", fleet)),
              HasSubstr("arrival_s: expected a finite number, got 'nan'"));
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s,duration_s\nj,0,1e300\n", "t.csv", fleet)),
              HasSubstr("duration_s: expected seconds from 0 to 3153600000"));
  EXPECT_THAT(ErrorOf(ParseGenericTrace("job,arrival_s,duration_s,memory_mib\nj,0,1,99999999999999\n", "t.csv", fleet)),
              HasSubstr("memory_mib: expected MiB from 0 to 67108864"));
  EXPECT_THAT(ErrorOf(ParseAlibabaPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                                       "deletion_time,scheduled_time\np,1000,1024,1,1000,,LS,Running,0,"
                                       "125374929021344579,0\n",
                                       "pods.csv")),
              HasSubstr("deletion_time: expected seconds from 0 to 3153600000"));
}

TEST(TraceTest, AutoDetectsTheFormatOrSaysWhatItExpected) {
  model::Fleet fleet;
  model::ThroughputTable tt;
  EXPECT_THAT(ErrorOf(LoadTrace("/nonexistent/trace.csv", TraceFormat::kAuto, fleet, tt)), HasSubstr("trace.csv"));
  // A Gavel trace has no header: ten tab-separated fields tell it.
  const std::string gavel = ::testing::TempDir() + "/philly.trace";
  {
    std::ofstream out(gavel);
    out << "CycleGAN\tc\td\ta\t0\t10\t1\t1\t-1\t7.25\n";
  }
  StatusOr<Trace> t = LoadTrace(gavel, TraceFormat::kAuto, fleet, GavelLike());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->format, "gavel");
  EXPECT_EQ(t->jobs[0].arrival_us, 7'250'000);
  const std::string odd = ::testing::TempDir() + "/odd.csv";
  {
    std::ofstream out(odd);
    out << "a,b\n1,2\n";
  }
  EXPECT_THAT(ErrorOf(LoadTrace(odd, TraceFormat::kAuto, fleet, tt)),
              HasSubstr("odd.csv:1: cannot tell the trace format from the header; expected an Alibaba GPU 2023 pod "
                        "list, a Sia/Philly workload, a Gavel trace or a Meridian CSV trace"));
}

TEST(TraceTest, ScaleAndFillShareTheJobs) {
  StatusOr<Trace> t = ParseAlibabaPods(std::string(kPodHeader) + "p0,1,1,1,500,,LS,R,0,10,0\np1,1,1,2,1000,,LS,R,5,10,5\n",
                                       "pods.csv");
  ASSERT_TRUE(t.ok());
  Trace x3 = ScaleJobs(*t, 3);
  ASSERT_EQ(x3.jobs.size(), 6u);
  EXPECT_EQ(x3.jobs[0].job.get(), x3.jobs[2].job.get());
  EXPECT_EQ(x3.jobs[3].arrival_us, 5 * kSecondUs);
  // 0.5 + 2 GPUs per pass: 6 GPUs of demand take three whole passes (7.5).
  Trace fill = FillTrace(*t, 6000, 1.0);
  ASSERT_EQ(fill.jobs.size(), 6u);
  EXPECT_EQ(fill.jobs[5].arrival_us, 5 * kSecondUs);
  EXPECT_EQ(fill.jobs[5].job.get(), t->jobs[1].job.get());
}

}  // namespace
}  // namespace meridian::sim
