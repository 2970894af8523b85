// The dynamic simulation on tiny hand-built fleets, curves and job lists with known answers: a
// job alone runs exactly its duration, a full GPU makes the next job wait, quotas below use kill
// (and a checkpoint keeps progress) unless they can grow, co-located jobs slow each other, the
// horizon bounds what counts, and everything is deterministic.
#include "paladin/core/dynamic_sim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fleet_testing.h"
#include "paladin/core/predict_eval.h"

namespace paladin::core {
namespace {

using test::AddTestNode;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kH200Mib = 143771;

// `nodes` nodes of `gpus` H200s each (their memory known).
Fleet H200Fleet(int nodes, int gpus) {
  Fleet fleet;
  const ModelId h200 = *fleet.models().Intern("H200");
  fleet.models().SetMemoryMib(h200, kH200Mib);
  for (int i = 0; i < nodes; ++i) {
    AddTestNode(fleet, "n" + std::to_string(i), 64000, 262144, gpus, "H200");
  }
  return fleet;
}

// `samples` samples a minute apart: GPU memory `low` until sample `jump_at`, then `high`.
UsageCurve Stepped(float low, float high, size_t jump_at, size_t samples = 600, float busy = 0.5f,
                   float host = 0.5f) {
  UsageCurve c;
  c.id = "stepped";
  c.step_s = 60;
  for (size_t i = 0; i < samples; ++i) {
    c.gpu_mem.push_back(i < jump_at ? low : high);
    c.gpu_busy.push_back(busy);
    c.host_mem.push_back(host);
  }
  return c;
}

UsageCurve Flat(float gpu_mem, float busy = 0.5f, float host = 0.5f, size_t samples = 600) {
  UsageCurve c = Stepped(gpu_mem, gpu_mem, samples, samples, busy, host);
  c.id = "flat";
  return c;
}

DynamicJob Job(const std::string& name, int32_t gpus, int32_t milli, int64_t arrival_s,
               int64_t duration_s, int32_t curve = 0, int32_t profile = -1) {
  DynamicJob j;
  j.request = Workload{.name = name,
                       .cpu_milli = 4000,
                       .mem_mib = 8192,
                       .gpu_count = gpus,
                       .gpu_milli = gpus > 0 ? milli : 0};
  j.arrival_s = arrival_s;
  j.duration_s = duration_s;
  j.curve = curve;
  j.profile = profile;
  return j;
}

// Owns everything a run reads.
struct Case {
  Fleet fleet;
  std::vector<DynamicJob> jobs;
  std::vector<UsageCurve> curves;
  std::vector<Workload> shapes;
  Interference interference;
  bool use_interference = false;

  DynamicInputs Inputs() {
    shapes.clear();
    for (const auto& j : jobs) shapes.push_back(j.request);
    DynamicInputs in;
    in.fleet = &fleet;
    in.jobs = jobs;
    in.curves = curves;
    in.interference = use_interference ? &interference : nullptr;
    in.shape_trace = shapes;
    return in;
  }
};

DynamicConfig ConfigNamed(const std::string& name) {
  for (const auto& c : DefaultDynamicConfigs()) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no config " << name;
  return {};
}

DynamicParams Params(int64_t horizon_s = 86400) {
  DynamicParams p;
  p.horizon_s = horizon_s;
  return p;
}

DynamicResult Simulate(Case& c, const DynamicConfig& config, const DynamicParams& params,
                       uint64_t seed = 1) {
  auto r = RunDynamicSim(c.Inputs(), config, params, 1.0, seed);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : DynamicResult{};
}

// --- configurations ---

TEST(DynamicConfigsTest, FiveConfigsInReportOrder) {
  const auto configs = DefaultDynamicConfigs();
  ASSERT_EQ(configs.size(), 5u);
  EXPECT_EQ(configs[0].name, "FGD+request");
  EXPECT_EQ(configs[4].name, "paladin+paladin+rebalance");
  EXPECT_TRUE(configs[4].rebalance);
  EXPECT_TRUE(configs[3].grow_on_demand);
  EXPECT_FALSE(configs[1].grow_on_demand);
}

// --- one job alone ---

std::vector<std::string> ConfigNames() {
  std::vector<std::string> names;
  for (const auto& c : DefaultDynamicConfigs()) names.push_back(c.name);
  return names;
}

class DynamicAloneTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DynamicAloneTest, AJobAloneFinishesAfterExactlyItsDuration) {
  const DynamicConfig config = ConfigNamed(GetParam());
  struct Shape {
    int32_t gpus, milli;
    int64_t duration_s;
  };
  // A shared GPU for 7000 s (not a multiple of the tick), two whole GPUs for 5400 s.
  for (const Shape& shape : {Shape{1, 500, 7000}, Shape{2, 1000, 5400}}) {
    SCOPED_TRACE(std::to_string(shape.gpus) + "x" + std::to_string(shape.milli));
    Case c;
    c.fleet = H200Fleet(1, 2);
    c.curves = {Flat(0.6f)};
    c.jobs = {Job("alone", shape.gpus, shape.milli, 600, shape.duration_s)};
    const DynamicResult r = Simulate(c, config, Params());
    EXPECT_EQ(r.config, config.name);
    EXPECT_EQ(r.jobs, 1);
    EXPECT_EQ(r.jobs_completed, 1);
    const double gpu_hours =
        shape.gpus * (shape.milli / 1000.0) * static_cast<double>(shape.duration_s) / 3600;
    EXPECT_NEAR(r.completed_gpu_hours, gpu_hours, 1e-9);
    EXPECT_NEAR(r.possible_gpu_hours, gpu_hours, 1e-9);
    EXPECT_EQ(r.jct_mean_s, static_cast<double>(shape.duration_s));
    EXPECT_EQ(r.queue_mean_s, 0);
    EXPECT_EQ(r.queue_p99_s, 0);
    EXPECT_EQ(r.ooms, 0);
    EXPECT_EQ(r.oom_per_1k_job_h, 0);
    EXPECT_EQ(r.migrations, 0);
    EXPECT_GT(r.gpu_active_pct, 0);
    EXPECT_LE(r.gpu_active_pct, 100);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, DynamicAloneTest, ::testing::ValuesIn(ConfigNames()),
                         [](const auto& test_info) {
                           std::string name = test_info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

// --- queueing ---

TEST(DynamicQueueTest, TheSecondWholeGpuJobWaitsForTheFirst) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.5f)};
  c.jobs = {Job("first", 1, 1000, 0, 3600), Job("second", 1, 1000, 600, 3600)};
  const DynamicResult r = Simulate(c, ConfigNamed("FGD+request"), Params());
  EXPECT_EQ(r.jobs_completed, 2);
  // The second arrives at 600 and starts when the first ends, at 3600.
  EXPECT_NEAR(r.queue_p99_s, 3000, 300);
  EXPECT_NEAR(r.queue_mean_s, 1500, 150);
  EXPECT_NEAR(r.jct_mean_s, (3600 + (7200 - 600)) / 2.0, 150);
  EXPECT_NEAR(r.completed_gpu_hours, 2.0, 1e-9);
}

TEST(DynamicQueueTest, TwoJobsThatFitTogetherDoNotWait) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.4f, /*busy=*/0.2f)};
  c.jobs = {Job("a", 1, 500, 0, 3600), Job("b", 1, 500, 0, 3600)};
  const DynamicResult r = Simulate(c, ConfigNamed("FGD+request"), Params());
  EXPECT_EQ(r.jobs_completed, 2);
  EXPECT_EQ(r.queue_mean_s, 0);
  // Busy shares 0.1 + 0.1 < 1: no slowdown without an interference table.
  EXPECT_EQ(r.jct_mean_s, 3600);
}

// --- interference ---

TEST(DynamicInterferenceTest, MeasuredPairSpeedsSlowCoLocatedJobs) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.4f)};
  c.jobs = {Job("a", 1, 500, 0, 3600, 0, 0), Job("b", 1, 500, 0, 3600, 0, 1)};
  c.use_interference = true;
  c.interference.profiles = 2;
  c.interference.pair_speed = {1.0, 0.5, 0.5, 1.0};  // a with b, and b with a: half speed
  DynamicResult r = Simulate(c, ConfigNamed("FGD+request"), Params());
  EXPECT_EQ(r.jobs_completed, 2);
  EXPECT_EQ(r.jct_mean_s, 7200);

  // Unmeasured pairs take unmeasured_speed.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  c.interference.pair_speed = {nan, nan, nan, nan};
  c.interference.unmeasured_speed = 0.5;
  r = Simulate(c, ConfigNamed("FGD+request"), Params());
  EXPECT_EQ(r.jct_mean_s, 7200);

  // A job alone on its GPU runs at full speed whatever the table says: two jobs too big to
  // share one GPU, on two GPUs.
  c.fleet = H200Fleet(1, 2);
  c.jobs = {Job("a", 1, 600, 0, 3600, 0, 0), Job("b", 1, 600, 0, 3600, 0, 1)};
  r = Simulate(c, ConfigNamed("FGD+request"), Params());
  EXPECT_EQ(r.jct_mean_s, 3600);
}

// --- quotas and out-of-memory kills ---

// Low (0.1 of the GPU's memory) for two hours, then 0.9; the job runs three hours.
Case JumpCase() {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Stepped(0.1f, 0.9f, 120)};
  c.jobs = {Job("jumps", 1, 1000, 0, 3 * 3600)};
  return c;
}

TEST(DynamicOomTest, UnderRequestQuotasNothingIsEverKilled) {
  for (const char* name : {"FGD+request", "paladin+request"}) {
    SCOPED_TRACE(name);
    Case c = JumpCase();
    const DynamicResult r = Simulate(c, ConfigNamed(name), Params());
    EXPECT_EQ(r.ooms, 0);
    EXPECT_EQ(r.jobs_completed, 1);
    EXPECT_EQ(r.jct_mean_s, 3 * 3600);
  }
}

TEST(DynamicOomTest, VpaShrinksTheQuotaAndTheJumpKillsButProgressIsKept) {
  Case c = JumpCase();
  const DynamicResult r = Simulate(c, ConfigNamed("FGD+vpa"), Params());
  EXPECT_GE(r.ooms, 1);
  EXPECT_GT(r.oom_per_1k_job_h, 0);
  EXPECT_EQ(r.jobs_completed, 1);
  // Killed in the tick after the jump (7200..7500) with a checkpoint at 7200: it loses that
  // tick only, restarts at 7500 (its curve restarts low) and needs one more hour.
  EXPECT_EQ(r.ooms, 1);
  EXPECT_EQ(r.jct_mean_s, 3 * 3600 + 300);
  // Without the checkpoint kept it would have had to start over.
  EXPECT_LT(r.jct_mean_s, 3 * 3600 + 7200);
}

TEST(DynamicOomTest, GrowOnDemandAbsorbsTheJumpOnAnEmptyGpu) {
  for (const char* name : {"paladin+paladin", "paladin+paladin+rebalance"}) {
    SCOPED_TRACE(name);
    Case c = JumpCase();
    const DynamicResult r = Simulate(c, ConfigNamed(name), Params());
    EXPECT_EQ(r.ooms, 0);
    EXPECT_GE(r.grown_on_demand, 1);
    EXPECT_EQ(r.jobs_completed, 1);
    EXPECT_EQ(r.jct_mean_s, 3 * 3600);
  }
}

// A job that asked for a whole GPU and uses a fifth of its memory, and a job asking for 300
// milli-GPU, on one GPU: paladin's sizing shrinks the first's memory quota, but it keeps its
// GPU's compute to itself, so the second waits for it. Letting whole-GPU requests share
// (--share-whole-gpus) co-locates them once the first's quota has shrunk, as FGD+vpa does.
TEST(DynamicSizingTest, AJobThatAskedForAWholeGpuKeepsIt) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.2f)};
  const int64_t h = 3600;
  c.jobs = {Job("whole", 1, 1000, 0, 10 * h), Job("part", 1, 300, 5 * h, 2 * h)};
  for (const char* name : {"paladin+paladin", "paladin+paladin+rebalance"}) {
    SCOPED_TRACE(name);
    DynamicResult r = Simulate(c, ConfigNamed(name), Params());
    EXPECT_EQ(r.jobs_completed, 2);
    EXPECT_NEAR(r.queue_p99_s, 5 * h, 300) << "the second waits from 5 h to 10 h";
    DynamicParams share = Params();
    share.keep_whole_gpus = false;
    r = Simulate(c, ConfigNamed(name), share);
    EXPECT_EQ(r.jobs_completed, 2);
    EXPECT_LT(r.queue_p99_s, 3600) << "the second shares the first's GPU";
  }
  const DynamicResult vpa = Simulate(c, ConfigNamed("FGD+vpa"), Params());
  EXPECT_LT(vpa.queue_p99_s, 3600);
}

// --- determinism ---

std::vector<TraceJob> SmallTrace() {
  std::vector<TraceJob> trace;
  Rng rng(99);
  for (int i = 0; i < 14; ++i) {
    TraceJob t;
    const uint64_t kind = rng.Uniform(4);
    t.request =
        Workload{.name = "t" + std::to_string(i),
                 .cpu_milli = 2000,
                 .mem_mib = 4096,
                 .gpu_count = kind == 0 ? 0 : (kind == 3 ? 2 : 1),
                 .gpu_milli = kind == 0   ? 0
                              : kind == 3 ? 1000
                                          : static_cast<int32_t>(200 + 100 * rng.Uniform(8))};
    // Not in arrival order: BuildDynamicJobs sorts.
    t.arrival_s = static_cast<int64_t>(rng.Uniform(6 * 3600));
    t.duration_s = 1800 + static_cast<int64_t>(rng.Uniform(4 * 3600));
    trace.push_back(t);
  }
  return trace;
}

TEST(BuildDynamicJobsTest, LoadOneKeepsEveryJobInArrivalOrder) {
  const auto trace = SmallTrace();
  const std::vector<int64_t> lengths = {36000, 18000, 600};
  const auto jobs = BuildDynamicJobs(trace, 3, lengths, 2, 1.0, 7);
  ASSERT_EQ(jobs.size(), trace.size());
  EXPECT_TRUE(std::is_sorted(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
    return a.arrival_s < b.arrival_s;
  }));
  std::multiset<std::tuple<std::string, int64_t, int64_t>> want, got;
  for (const auto& t : trace) want.insert({t.request.name, t.arrival_s, t.duration_s});
  for (const auto& j : jobs) got.insert({j.request.name, j.arrival_s, j.duration_s});
  EXPECT_EQ(got, want);
  for (const auto& j : jobs) {
    ASSERT_GE(j.curve, 0);
    ASSERT_LT(j.curve, 3);
    EXPECT_GE(j.curve_offset_s, 0);
    EXPECT_LT(j.curve_offset_s, lengths[static_cast<size_t>(j.curve)]);
    if (j.request.gpu_count > 0) {
      EXPECT_GE(j.profile, 0);
      EXPECT_LT(j.profile, 2);
    } else {
      EXPECT_EQ(j.profile, -1);
    }
  }
}

TEST(BuildDynamicJobsTest, OtherLoadsDrawRoundLoadTimesNJobs) {
  const auto trace = SmallTrace();
  const std::vector<int64_t> lengths = {36000};
  for (double load : {0.5, 1.5, 2.0}) {
    const auto jobs = BuildDynamicJobs(trace, 1, lengths, 0, load, 3);
    EXPECT_EQ(jobs.size(), static_cast<size_t>(std::llround(load * trace.size()))) << load;
    EXPECT_TRUE(std::is_sorted(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
      return a.arrival_s < b.arrival_s;
    })) << load;
    for (const auto& j : jobs) EXPECT_EQ(j.profile, -1);  // no profiles
  }
  EXPECT_EQ(BuildDynamicJobs(trace, 1, lengths, 0, 1.5, 3).size(), 21u);
}

TEST(BuildDynamicJobsTest, DeterministicForASeed) {
  const auto trace = SmallTrace();
  const std::vector<int64_t> lengths = {36000, 18000, 600};
  auto key = [](const std::vector<DynamicJob>& jobs) {
    std::vector<std::tuple<std::string, int64_t, int32_t, int64_t, int32_t>> out;
    for (const auto& j : jobs) {
      out.emplace_back(j.request.name, j.arrival_s, j.curve, j.curve_offset_s, j.profile);
    }
    return out;
  };
  for (double load : {1.0, 1.5}) {
    EXPECT_EQ(key(BuildDynamicJobs(trace, 3, lengths, 2, load, 5)),
              key(BuildDynamicJobs(trace, 3, lengths, 2, load, 5)));
    EXPECT_NE(key(BuildDynamicJobs(trace, 3, lengths, 2, load, 5)),
              key(BuildDynamicJobs(trace, 3, lengths, 2, load, 6)));
  }
}

void ExpectSameResult(const DynamicResult& a, const DynamicResult& b) {
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.completed_gpu_hours, b.completed_gpu_hours);
  EXPECT_EQ(a.possible_gpu_hours, b.possible_gpu_hours);
  EXPECT_EQ(a.jobs_completed, b.jobs_completed);
  EXPECT_EQ(a.jobs, b.jobs);
  EXPECT_EQ(a.queue_mean_s, b.queue_mean_s);
  EXPECT_EQ(a.queue_p99_s, b.queue_p99_s);
  EXPECT_EQ(a.jct_mean_s, b.jct_mean_s);
  EXPECT_EQ(a.gpu_active_pct, b.gpu_active_pct);
  EXPECT_EQ(a.mem_alloc_gib_h, b.mem_alloc_gib_h);
  EXPECT_EQ(a.mem_used_gib_h, b.mem_used_gib_h);
  EXPECT_EQ(a.oom_per_1k_job_h, b.oom_per_1k_job_h);
  EXPECT_EQ(a.ooms, b.ooms);
  EXPECT_EQ(a.migrations, b.migrations);
  EXPECT_EQ(a.migration_downtime_s, b.migration_downtime_s);
  EXPECT_EQ(a.grown_in_place, b.grown_in_place);
  EXPECT_EQ(a.grown_on_demand, b.grown_on_demand);
  ASSERT_EQ(a.series.size(), b.series.size());
  for (size_t i = 0; i < a.series.size(); ++i) {
    EXPECT_EQ(a.series[i].t_s, b.series[i].t_s);
    EXPECT_EQ(a.series[i].queued, b.series[i].queued);
    EXPECT_EQ(a.series[i].running, b.series[i].running);
    EXPECT_EQ(a.series[i].mem_alloc_gib, b.series[i].mem_alloc_gib);
    EXPECT_EQ(a.series[i].mem_used_gib, b.series[i].mem_used_gib);
  }
}

TEST(DynamicDeterminismTest, SameInputsAndSeedGiveIdenticalResults) {
  Case c;
  c.fleet = H200Fleet(2, 2);
  c.curves = {Stepped(0.2f, 0.7f, 90, 300, 0.6f, 0.4f), Flat(0.35f, 0.9f, 0.6f, 200),
              Stepped(0.5f, 0.15f, 30, 400, 0.3f, 0.3f)};
  const std::vector<int64_t> lengths = {300 * 60, 200 * 60, 400 * 60};
  c.jobs = BuildDynamicJobs(SmallTrace(), 3, lengths, 2, 1.5, 11);
  c.use_interference = true;
  c.interference.profiles = 2;
  c.interference.pair_speed = {0.9, 0.7, std::numeric_limits<double>::quiet_NaN(), 0.95};
  DynamicParams params = Params(12 * 3600);
  params.admission_min_wait_s = 600;  // let the rebalancer act
  int64_t ooms = 0, migrations = 0, grown = 0;
  for (const auto& config : DefaultDynamicConfigs()) {
    SCOPED_TRACE(config.name);
    const DynamicResult first = Simulate(c, config, params, 4);
    ooms += first.ooms;
    migrations += first.migrations;
    grown += first.grown_on_demand + first.grown_in_place;
    const DynamicResult second = Simulate(c, config, params, 4);
    ExpectSameResult(first, second);
    EXPECT_EQ(first.seed, 4u);
    EXPECT_EQ(first.jobs, static_cast<int64_t>(c.jobs.size()));
    EXPECT_GT(first.jobs_completed, 0);
    EXPECT_LE(first.completed_gpu_hours, first.possible_gpu_hours + 1e-9);
  }
  // The runs compared are not trivial: kills, moves and growth all happen in some of them.
  EXPECT_GT(ooms, 0);
  EXPECT_GT(migrations, 0);
  EXPECT_GT(grown, 0);
}

// --- bad input ---

TEST(DynamicInputTest, AJobWithoutAUsageCurveIsNamed) {
  for (int32_t curve : {-1, 1}) {
    Case c;
    c.fleet = H200Fleet(1, 1);
    c.curves = {Flat(0.5f)};
    c.jobs = {Job("good", 1, 500, 0, 600), Job("lost", 1, 500, 0, 600, curve)};
    auto r = RunDynamicSim(c.Inputs(), ConfigNamed("FGD+request"), Params(), 1.0, 1);
    ASSERT_FALSE(r.ok()) << curve;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), AllOf(HasSubstr("'lost'"), HasSubstr("usage curve")));
  }
}

TEST(DynamicInputTest, NoCurvesOrNoFleetAreErrors) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.jobs = {Job("a", 1, 500, 0, 600)};
  auto r = RunDynamicSim(c.Inputs(), ConfigNamed("FGD+request"), Params(), 1.0, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("no usage curves"));

  c.curves = {Flat(0.5f)};
  DynamicInputs in = c.Inputs();
  in.fleet = nullptr;
  auto no_fleet = RunDynamicSim(in, ConfigNamed("FGD+request"), Params(), 1.0, 1);
  ASSERT_FALSE(no_fleet.ok());
  EXPECT_THAT(no_fleet.status().message(), HasSubstr("no fleet"));
}

TEST(DynamicInputTest, UnknownPredictorOrPolicyNamesAreErrors) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.5f)};
  c.jobs = {Job("a", 1, 500, 0, 600)};
  DynamicConfig bad_predictor = ConfigNamed("FGD+request");
  bad_predictor.predictor = "oracle";
  auto r = RunDynamicSim(c.Inputs(), bad_predictor, Params(), 1.0, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("'oracle'"), HasSubstr("vpa")));

  DynamicConfig bad_policy = ConfigNamed("FGD+request");
  bad_policy.policy = "Tetris";
  r = RunDynamicSim(c.Inputs(), bad_policy, Params(), 1.0, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("'Tetris'"), HasSubstr("BestFit")));
}

// Curves are input too: a curve whose series differ in length, or with no step, must be an
// error, not a read past the end of a series or a division by zero. Run in a child process so
// that the crash this guards against fails this test only.
TEST(DynamicInputTest, MalformedCurvesAreErrors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run_with = [](UsageCurve curve) {
    Case c;
    c.fleet = H200Fleet(1, 1);
    c.curves = {std::move(curve)};
    c.jobs = {Job("a", 1, 500, 0, 3600)};
    auto r = RunDynamicSim(c.Inputs(), ConfigNamed("FGD+request"), Params(7200), 1.0, 1);
    std::exit(!r.ok() && r.status().code() == StatusCode::kInvalidArgument ? 0 : 1);
  };
  UsageCurve short_series = Flat(0.5f);
  short_series.gpu_mem.resize(10);
  short_series.gpu_busy.resize(10);
  EXPECT_EXIT(run_with(short_series), ::testing::ExitedWithCode(0), "")
      << "gpu_mem and gpu_busy shorter than host_mem";
  UsageCurve no_step = Flat(0.5f);
  no_step.step_s = 0;
  EXPECT_EXIT(run_with(no_step), ::testing::ExitedWithCode(0), "") << "step_s 0";
}

// --- the horizon ---

TEST(DynamicHorizonTest, AJobFinishingAfterTheHorizonIsNotCounted) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.5f)};
  c.jobs = {Job("long", 1, 1000, 0, 7200)};
  DynamicResult r = Simulate(c, ConfigNamed("FGD+request"), Params(3600));
  EXPECT_EQ(r.jobs_completed, 0);
  EXPECT_EQ(r.completed_gpu_hours, 0);
  EXPECT_EQ(r.possible_gpu_hours, 0);
  EXPECT_EQ(r.jct_mean_s, 0);

  r = Simulate(c, ConfigNamed("FGD+request"), Params(7200));  // finishes exactly at the horizon
  EXPECT_EQ(r.jobs_completed, 1);
  EXPECT_NEAR(r.completed_gpu_hours, 2.0, 1e-9);

  // The second job of a full GPU would finish at 7200 + 3600: past a 9000 s horizon.
  c.jobs = {Job("first", 1, 1000, 0, 7200), Job("second", 1, 1000, 0, 3600)};
  r = Simulate(c, ConfigNamed("FGD+request"), Params(9000));
  EXPECT_EQ(r.jobs_completed, 1);
  EXPECT_NEAR(r.completed_gpu_hours, 2.0, 1e-9);
  EXPECT_NEAR(r.possible_gpu_hours, 3.0, 1e-9);  // both could have finished, run at once
  // The second waited from 0 to 7200.
  EXPECT_NEAR(r.queue_p99_s, 7200, 300);
}

TEST(DynamicHorizonTest, DefaultHorizonIsTheLastArrival) {
  Case c;
  c.fleet = H200Fleet(1, 2);
  c.curves = {Flat(0.5f)};
  c.jobs = {Job("early", 1, 1000, 0, 3600), Job("late", 1, 1000, 5400, 3600)};
  const DynamicResult r = Simulate(c, ConfigNamed("FGD+request"), Params(-1));
  EXPECT_EQ(r.jobs_completed, 1);  // "late" arrives at the horizon
  EXPECT_NEAR(r.completed_gpu_hours, 1.0, 1e-9);
}

// A horizon between two ticks: a job that finishes before it counts, as it does in
// possible_gpu_hours. Alone on an empty fleet, completed must equal possible.
TEST(DynamicHorizonTest, AJobFinishingBeforeAnUnalignedHorizonIsCounted) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.5f)};
  c.jobs = {Job("short", 1, 1000, 0, 7000)};
  const DynamicResult r = Simulate(c, ConfigNamed("FGD+request"), Params(7100));
  EXPECT_NEAR(r.possible_gpu_hours, 7000 / 3600.0, 1e-9);
  EXPECT_EQ(r.jobs_completed, 1) << "finishes at 7000, horizon 7100";
  EXPECT_NEAR(r.completed_gpu_hours, r.possible_gpu_hours, 1e-9);
}

// Backfilling starves a wide job: "w" needs both GPUs of the node, and "s2" takes the free one
// first; the full cycle preempts after a day's wait, up to a 120 h horizon.
constexpr int64_t kHour = 3600;
Case StarvedWideJob() {
  Case c;
  c.fleet = H200Fleet(1, 2);
  c.curves = {Flat(0.5f)};
  c.jobs = {Job("s1", 1, 1000, 0, 100 * kHour), Job("w", 2, 1000, kHour, 10 * kHour),
            Job("s2", 1, 1000, 2 * kHour, 100 * kHour)};
  return c;
}
DynamicParams PreemptAfterADay() {
  DynamicParams p = Params(120 * kHour);
  p.preemption_min_wait_s = 24 * kHour;
  return p;
}

// The full cycle's rebalancer, once "w" has waited a day and no move can help (there is one
// node), checkpoints the jobs that waited less, runs "w", and queues them again with their
// progress kept.
TEST(DynamicPreemptionTest, AStarvedWideJobRunsAndThePreemptedKeepTheirProgress) {
  Case c = StarvedWideJob();
  const int64_t h = kHour;
  // s1 and s2 are taken at 25 h and resume at 35 h: they finish near 110 h and 112 h. Had they
  // restarted from zero they would finish after 135 h.
  DynamicConfig cycle{"cycle", "paladin", "request", /*rebalance=*/true};
  DynamicParams p = PreemptAfterADay();
  DynamicResult r = Simulate(c, cycle, p);
  EXPECT_EQ(r.preemptions, 2);
  EXPECT_EQ(r.migrations, 2);
  EXPECT_GT(r.migration_downtime_s, 0);
  EXPECT_EQ(r.jobs_completed, 3);
  EXPECT_NEAR(r.completed_gpu_hours, 220, 1e-9);
  // The longest wait is w's day; s1 and s2 wait 10 h while it runs.
  EXPECT_NEAR(r.queue_p99_s, 24 * h, 1);
  EXPECT_NEAR(r.queue_mean_s, (24 * h + 2 * 10 * h) / 3.0, 1);

  // Without preemption w waits for s2 to finish (1 h to 102 h).
  DynamicParams no = p;
  no.preemption = false;
  r = Simulate(c, cycle, no);
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_EQ(r.jobs_completed, 3);
  EXPECT_NEAR(r.queue_p99_s, 101 * h, 1);
}

// The moves' cost from a fleet's measured moves (sim dynamic --move-costs): the same scenario,
// its two preemptions now costed by a model whose measured moves took five times the prior's
// estimate at their size. The same moves happen; each costs about five times as much.
TEST(DynamicPreemptionTest, MeasuredMovesSetWhatAMoveCosts) {
  Case c = StarvedWideJob();
  DynamicConfig cycle{"cycle", "paladin", "request", /*rebalance=*/true};
  DynamicParams p = PreemptAfterADay();
  const DynamicResult prior = Simulate(c, cycle, p);
  ASSERT_EQ(prior.migrations, 2);
  auto model = std::make_shared<MoveCostModel>(p.migration);
  for (const double gib : {40.0, 70.0, 100.0}) {
    const double bytes = gib * 1024 * 1024 * 1024;
    model->Observe("node-a", "node-b", {bytes, 0, 5 * p.migration.DowntimeS(bytes, 0)});
  }
  p.measured_costs = model;
  const DynamicResult measured = Simulate(c, cycle, p);
  EXPECT_EQ(measured.migrations, 2);
  EXPECT_EQ(measured.jobs_completed, 3);
  EXPECT_NEAR(measured.migration_downtime_s / prior.migration_downtime_s, 5, 0.5);
}

// Only jobs that have waited less than the starved job in all are taken. "c" (CPU only, so it
// takes no one) waits 29 h for the blocker's CPU and starts at 30 h; "w" arrives at 31 h and
// needs c's CPU. It has waited a day at 55 h, but c waited longer: w takes it only once its own
// wait is longer (the hourly retry after 60 h: 61 h), and c resumes when w is done (71 h).
TEST(DynamicPreemptionTest, JobsThatWaitedLongerAreTakenOnlyOnceTheStarvedJobWaitedMore) {
  Case c;
  c.fleet = H200Fleet(1, 2);
  c.curves = {Flat(0.5f)};
  const int64_t h = 3600;
  c.jobs = {Job("blocker", 2, 1000, 0, 30 * h), Job("c", 0, 0, h, 100 * h),
            Job("w", 1, 1000, 31 * h, 10 * h)};
  c.jobs[0].request.cpu_milli = 64000;
  c.jobs[1].request.cpu_milli = 60000;
  c.jobs[2].request.cpu_milli = 8000;
  DynamicConfig cycle{"cycle", "paladin", "request", /*rebalance=*/true};
  DynamicParams p = Params(200 * h);
  p.preemption_min_wait_s = 24 * h;
  const DynamicResult r = Simulate(c, cycle, p);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.jobs_completed, 3);
  // Waits: blocker 0; c 29 h + 10 h; w 30 h.
  EXPECT_NEAR(r.queue_mean_s, (0 + 39 * h + 30 * h) / 3.0, 1);
}

// A 2-GPU job killed for its memory comes back with a quota below a whole GPU. On a fleet with a
// node entirely free it must start again at once, whatever the packing policy. (The sim gives
// multi-GPU jobs shares below 1000, which the GpuFit filter accepts on partly used GPUs while
// the baselines' GPU selector hands out fully free GPUs only: the packer picks the tighter node,
// its selector finds no GPUs there, and the job waits although another node is free.)
TEST(DynamicQueueTest, AMultiGpuJobKilledForMemoryRestartsOnAFreeNode) {
  for (const char* policy : {"FGD", "paladin", "BestFit"}) {
    SCOPED_TRACE(policy);
    Case c;
    c.fleet = H200Fleet(2, 2);
    // "x" takes node 0 and is killed at 7500 s; "f" shares a GPU of node 1 for ten hours.
    c.curves = {Stepped(0.1f, 0.9f, 120), Flat(0.1f)};
    c.jobs = {Job("x", 2, 1000, 0, 3 * 3600, 0), Job("f", 1, 300, 0, 10 * 3600, 1)};
    const DynamicResult r = Simulate(c, DynamicConfig{"vpa", policy, "vpa"}, Params());
    EXPECT_EQ(r.ooms, 1);
    EXPECT_EQ(r.jobs_completed, 2);
    EXPECT_EQ(r.queue_p99_s, 0);
    EXPECT_EQ(r.jct_mean_s, ((3 * 3600 + 300) + 10 * 3600) / 2.0);
  }
}

// --- out of sample: folds by pod ---

// Pod `id`'s series, one sample a minute for a day: a level, and in two hours of five (which
// ones depend on `phase`) a model loaded on top of it, `jump` high (shares of the GPU's memory).
UsageSeries PodSeries(const std::string& id, double level, double jump, int phase) {
  UsageSeries s;
  s.id = id;
  for (int i = 0; i < 24 * 60; ++i) {
    const bool loaded = (i / 60 * 3 + phase) % 5 < 2;
    const double wave = (loaded ? jump : 0) + 0.01 * ((i * 7919) % 13) / 13.0;
    s.samples.push_back({int64_t{i} * 60, std::min(1.0, level + wave)});
  }
  return s;
}

UsageCurve CurveOf(const UsageSeries& gpu, const UsageSeries& host) {
  UsageCurve c;
  c.id = gpu.id;
  c.step_s = 60;
  for (size_t i = 0; i < gpu.samples.size(); ++i) {
    c.gpu_mem.push_back(static_cast<float>(gpu.samples[i].value));
    c.gpu_busy.push_back(0.5f);
    c.host_mem.push_back(static_cast<float>(host.samples[i].value));
  }
  return c;
}

// A job replaying a pod of fold f is sized by class models that never saw fold f: removing
// fold f's pods from the training series changes nothing in a run whose jobs all replay fold f,
// while a model trained on every pod (fold f's included) does change it.
TEST(DynamicFoldsTest, AJobsSizingDoesNotDependOnItsOwnFoldsPods) {
  constexpr int kFolds = 3;
  constexpr uint64_t kSeed = 1;
  std::vector<UsageSeries> gpu, host;
  for (int i = 0; i < 18; ++i) {
    const std::string id = "pod" + std::to_string(i);
    // Fold 0's pods jump much further than the others: learning from them would show.
    const bool wild = FoldOf(id, kFolds, kSeed) == 0;
    gpu.push_back(PodSeries(id, 0.1 + 0.02 * (i % 4), wild ? 0.6 : 0.05 + 0.01 * (i % 3), i));
    host.push_back(PodSeries(id, 0.2, wild ? 0.5 : 0.04, i + 2));
  }
  Case c;
  c.fleet = H200Fleet(2, 4);
  std::vector<int32_t> curve_fold;
  std::vector<UsageSeries> gpu_without, host_without;  // fold 0's pods removed
  for (size_t i = 0; i < gpu.size(); ++i) {
    c.curves.push_back(CurveOf(gpu[i], host[i]));
    curve_fold.push_back(FoldOf(gpu[i].id, kFolds, kSeed));
    if (curve_fold.back() != 0) {
      gpu_without.push_back(gpu[i]);
      host_without.push_back(host[i]);
    }
  }
  ASSERT_GE(gpu.size() - gpu_without.size(), 3u) << "fold 0 needs pods of its own";
  ASSERT_GE(gpu_without.size(), 8u);
  // Jobs replaying fold 0's pods only, sharing GPUs, for long enough to be resized many times.
  for (size_t i = 0; i < c.curves.size(); ++i) {
    if (curve_fold[i] != 0) continue;
    DynamicJob j = Job("j" + std::to_string(i), 1, 400, static_cast<int64_t>(i) * 600, 20 * 3600,
                       static_cast<int32_t>(i));
    c.jobs.push_back(j);
  }
  const ResourceSpec gpu_spec{1.0, 3600, 48.0 * (1 << 30)}, host_spec{1.0, 3600, 1 << 30};
  const PaladinPredictorParams params;
  const auto run = [&](std::span<const std::shared_ptr<const PaladinClassModel>> g,
                       std::span<const std::shared_ptr<const PaladinClassModel>> h) {
    DynamicInputs in = c.Inputs();
    in.curve_fold = curve_fold;
    in.gpu_class_models = g;
    in.host_class_models = h;
    DynamicParams p = Params(2 * 86400);
    p.paladin_quantile = 0.9;  // where the tails the models learned decide the quotas
    auto r = RunDynamicSim(in, ConfigNamed("paladin+paladin"), p, 1.0, 3);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : DynamicResult{};
  };
  const auto all_g = TrainFoldModels(gpu, gpu_spec, params, kFolds, kSeed);
  const auto all_h = TrainFoldModels(host, host_spec, params, kFolds, kSeed);
  const auto without_g = TrainFoldModels(gpu_without, gpu_spec, params, kFolds, kSeed);
  const auto without_h = TrainFoldModels(host_without, host_spec, params, kFolds, kSeed);
  // The models of the other folds did learn from fold 0 (they differ), fold 0's did not.
  ASSERT_EQ(all_g.size(), 3u);
  EXPECT_NE(all_g[1]->pooled_count(), without_g[1]->pooled_count());
  EXPECT_EQ(all_g[0]->pooled_count(), without_g[0]->pooled_count());
  EXPECT_GT(all_g[0]->pooled_count(), 100);
  const DynamicResult with = run(all_g, all_h);
  const DynamicResult without = run(without_g, without_h);
  ExpectSameResult(with, without);
  EXPECT_EQ(with.ooms, without.ooms);
  EXPECT_EQ(with.grown_on_demand, without.grown_on_demand);
  EXPECT_EQ(with.grown_in_place, without.grown_in_place);
  EXPECT_GT(with.mem_alloc_gib_h, 0);
  // The test can fail: models that saw fold 0 size its jobs differently.
  const std::vector<std::shared_ptr<const PaladinClassModel>> seen_g(
      kFolds, TrainClassModel(gpu, gpu_spec, params));
  const std::vector<std::shared_ptr<const PaladinClassModel>> seen_h(
      kFolds, TrainClassModel(host, host_spec, params));
  const DynamicResult in_sample = run(seen_g, seen_h);
  EXPECT_NE(in_sample.mem_alloc_gib_h, with.mem_alloc_gib_h);
}

TEST(DynamicFoldsTest, FoldsThatDoNotMatchTheCurvesAreErrors) {
  Case c;
  c.fleet = H200Fleet(1, 1);
  c.curves = {Flat(0.5f), Flat(0.3f)};
  c.jobs = {Job("a", 1, 500, 0, 600)};
  const std::vector<std::shared_ptr<const PaladinClassModel>> models = {
      std::make_shared<PaladinClassModel>(), std::make_shared<PaladinClassModel>()};
  for (const std::vector<int32_t>& folds :
       std::vector<std::vector<int32_t>>{{0}, {0, 2}, {-1, 0}}) {
    DynamicInputs in = c.Inputs();
    in.curve_fold = folds;
    in.gpu_class_models = models;
    in.host_class_models = models;
    auto r = RunDynamicSim(in, ConfigNamed("paladin+paladin"), Params(), 1.0, 1);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("fold"));
  }
}

}  // namespace
}  // namespace paladin::core
