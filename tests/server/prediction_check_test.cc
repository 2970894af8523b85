// The live check of the server's predictor, with the clock injected and a fake agent reporting
// usage: each job's forecast against the peak measured in each minute, summed per team and for
// the fleet, in `explain` and in /metrics. A job whose use is flat is never under-predicted; one
// whose use jumps far above its recent peaks is, in the window of the jump.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "control_fixture.h"

namespace paladin::server {
namespace {

using testing::kGiB;

class PredictionCheckTest : public testing::ControlTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Open("predcheck"));
    ASSERT_NO_FATAL_FAILURE(Register("n", 2));
  }

  std::string Submit(const std::string& team, const std::string& gpu_mem = "10GiB") {
    StatusOr<Json> r = control_->Submit(
        admin_, Json{{"command", {"w"}}, {"team", team}, {"gpu_mem", gpu_mem}, {"gpus", 1}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<std::string>() : "";
  }

  // A heartbeat that runs every start it was given and reports each job's use.
  void Beat() {
    Json results = Json::array();
    for (const Json& c : pending_) results.push_back(Done(c));
    pending_ = Json::array();
    Json jobs = Json::array();
    for (const auto& [id, epoch] : running_) {
      const auto code = exit_code_.find(id);
      Json job = CopyReport(id, epoch, code == exit_code_.end() ? "running" : "exited", used_[id],
                            quota_.count(id) != 0 ? quota_[id] : 10 * kGiB);
      job["refusals"] = refusals_[id];
      if (code != exit_code_.end()) job["exit_code"] = code->second;
      jobs.push_back(job);
    }
    for (const auto& [id, code] : exit_code_) running_.erase(id);
    exit_code_.clear();
    StatusOr<Json> r = control_->Heartbeat(
        admin_, "n", Json{{"gpus", Json::array()}, {"jobs", jobs}, {"results", results}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const Json& c : (*r)["commands"]) {
      if (c["kind"] != "start") continue;
      pending_.push_back(c);
      running_[c["job"].get<std::string>()] = c["epoch"].get<int64_t>();
    }
  }

  Json Check(const std::string& id) {
    StatusOr<Json> e = control_->Explain(admin_, id);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? (*e)["prediction_check"] : Json::object();
  }

  Json pending_ = Json::array();
  std::map<std::string, int64_t> running_;
  std::map<std::string, int64_t> used_;
  std::map<std::string, int64_t> quota_;     // reported quota, 10 GiB unless set
  std::map<std::string, int64_t> refusals_;  // allocations refused under the quota
  std::map<std::string, int> exit_code_;     // reported exited (once) with this code
};

// The value of the /metrics line `name{labels}`, or -1.
double MetricValue(const std::string& text, const std::string& name, const std::string& labels) {
  const std::string key = name + (labels.empty() ? "" : "{" + labels + "}") + " ";
  const size_t at = text.find("\n" + key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + 1 + key.size()));
}

TEST_F(PredictionCheckTest, UnderRateAndSlackPerJobTeamAndFleet) {
  const std::string flat = Submit("serve");
  const std::string jumpy = Submit("train");
  control_->Tick();
  Beat();  // takes the starts
  Beat();  // answers them
  ASSERT_EQ(running_.size(), 2u);
  // Twenty minutes, a report a second: "flat" uses 3 GiB throughout; "jumpy" 2 GiB, except for
  // the twelfth minute, when it loads 9 GiB.
  for (int s = 0; s < 20 * 60; ++s) {
    now_ += 1;
    used_[flat] = 3 * kGiB;
    used_[jumpy] = (s >= 11 * 60 && s < 12 * 60) ? 9 * kGiB : 2 * kGiB;
    Beat();
    control_->Tick();
  }
  const Json f = Check(flat), j = Check(jumpy);
  EXPECT_EQ(f["window_s"], 60);
  EXPECT_NEAR(f["target_under_rate"].get<double>(), 0.02, 1e-12);
  // The first report (0 bytes, when the start was answered) opens a window; the report 1,200 s
  // later resolves the twentieth.
  EXPECT_EQ(f["windows"], 20);
  EXPECT_EQ(j["windows"], 20);
  // Flat use is never above a forecast that starts at the request and then stays at or above
  // the use; the slack left is (forecast - 3 GiB) / forecast, between 0 and 1.
  EXPECT_EQ(f["under"], 0);
  EXPECT_GT(f["mean_slack"].get<double>(), 0);
  EXPECT_LT(f["mean_slack"].get<double>(), 1);
  // The jump to 9 GiB is above a forecast made on 2 GiB peaks: the window it starts in
  // ([660 s, 720 s) after the first report) is under-predicted. Its last second opens the next
  // window, whose forecast has seen 9 GiB.
  EXPECT_EQ(j["under"], 1);
  EXPECT_DOUBLE_EQ(j["under_rate"].get<double>(), 1.0 / 20);

  // By the forecast's phase: the first window's forecast was made while the job was loading
  // (younger than a window), most others on flat use (steady); the jump came in a steady
  // window, and the window after it was forecast in growth. The phases add up to the totals.
  for (const Json* check : {&f, &j}) {
    const Json& phases = (*check)["by_phase"];
    ASSERT_EQ(phases.size(), 5u) << phases.dump();
    int64_t windows = 0, under = 0;
    double slack = 0;
    for (const char* phase : {"loading", "idle", "growth", "steady", "active"}) {
      const Json& p = phases[phase];
      windows += p["windows"].get<int64_t>();
      under += p["under"].get<int64_t>();
      slack += p["mean_slack"].get<double>() * p["windows"].get<double>();
      if (p["windows"] == 0) {
        EXPECT_EQ(p["under_rate"], 0.0) << phase;
      }
    }
    EXPECT_EQ(windows, (*check)["windows"]);
    EXPECT_EQ(under, (*check)["under"]);
    EXPECT_NEAR(slack / windows, (*check)["mean_slack"].get<double>(), 1e-9);
    EXPECT_EQ(phases["loading"]["windows"], 1) << phases.dump();
    EXPECT_GE(phases["steady"]["windows"], 16) << phases.dump();
  }
  const Json& steady = j["by_phase"]["steady"];
  EXPECT_EQ(steady["under"], 1);
  EXPECT_DOUBLE_EQ(steady["under_rate"].get<double>(), 1.0 / steady["windows"].get<double>());
  EXPECT_EQ(j["by_phase"]["growth"]["windows"], 1) << j.dump();
  EXPECT_EQ(f["by_phase"]["growth"]["windows"], 0) << f.dump();

  // explain sets the job's figures beside its team's and the fleet's; a team sees its own
  // team's as the fleet's.
  EXPECT_EQ(j["team"]["name"], "train");
  EXPECT_EQ(j["team"]["windows"], 20);
  EXPECT_EQ(j["team"]["under"], 1);
  EXPECT_EQ(f["team"]["name"], "serve");
  EXPECT_EQ(f["team"]["under"], 0);
  EXPECT_EQ(j["fleet"]["windows"], 40);
  EXPECT_EQ(j["fleet"]["under"], 1);
  EXPECT_DOUBLE_EQ(j["fleet"]["under_rate"].get<double>(), 1.0 / 40);
  StatusOr<Principal> serve_scope = ParseScope("team:serve");
  ASSERT_TRUE(serve_scope.ok());
  StatusOr<Json> seen_by_team = control_->Explain(*serve_scope, flat);
  ASSERT_TRUE(seen_by_team.ok()) << seen_by_team.status().message();
  EXPECT_EQ((*seen_by_team)["prediction_check"]["fleet"]["windows"], 20);
  EXPECT_EQ((*seen_by_team)["prediction_check"]["fleet"]["under"], 0);

  // The fleet's figures in /v1/summary and each team's in /v1/teams (the dashboard's panel).
  StatusOr<Json> summary = control_->Summary(admin_);
  ASSERT_TRUE(summary.ok());
  const Json& fleet = (*summary)["prediction_check"];
  EXPECT_EQ(fleet["windows"], 40);
  EXPECT_EQ(fleet["under"], 1);
  EXPECT_DOUBLE_EQ(fleet["under_rate"].get<double>(), 1.0 / 40);
  EXPECT_DOUBLE_EQ(fleet["mean_slack"].get<double>(),
                   (f["mean_slack"].get<double>() + j["mean_slack"].get<double>()) / 2);
  EXPECT_NEAR(fleet["target_under_rate"].get<double>(), 0.02, 1e-12);
  EXPECT_EQ(fleet["window_s"], 60);
  StatusOr<Json> teams = control_->Teams(admin_);
  ASSERT_TRUE(teams.ok());
  std::map<std::string, Json> by_team;
  for (const Json& t : (*teams)["teams"]) by_team[t["name"]] = t["prediction_check"];
  ASSERT_EQ(by_team.size(), 2u) << teams->dump();
  EXPECT_EQ(by_team["serve"]["windows"], 20);
  EXPECT_EQ(by_team["serve"]["under"], 0);
  EXPECT_DOUBLE_EQ(by_team["serve"]["mean_slack"].get<double>(), f["mean_slack"].get<double>());
  EXPECT_EQ(by_team["train"]["windows"], 20);
  EXPECT_DOUBLE_EQ(by_team["train"]["under_rate"].get<double>(), 1.0 / 20);

  // /metrics: each team's figures are its job's; the fleet's are their sum.
  const std::string m = control_->Metrics(admin_);
  const std::string serve = "scope=\"team\",team=\"serve\"",
                    train = "scope=\"team\",team=\"train\"";
  EXPECT_EQ(MetricValue(m, "paladin_prediction_windows_total", serve), 20);
  EXPECT_EQ(MetricValue(m, "paladin_prediction_windows_total", train), 20);
  EXPECT_EQ(MetricValue(m, "paladin_prediction_windows_total", "scope=\"fleet\""), 40);
  EXPECT_DOUBLE_EQ(MetricValue(m, "paladin_prediction_under_rate", serve), 0);
  EXPECT_DOUBLE_EQ(MetricValue(m, "paladin_prediction_under_rate", train),
                   j["under_rate"].get<double>());
  EXPECT_DOUBLE_EQ(MetricValue(m, "paladin_prediction_under_rate", "scope=\"fleet\""), 1.0 / 40);
  EXPECT_DOUBLE_EQ(MetricValue(m, "paladin_prediction_mean_slack", "scope=\"fleet\""),
                   (f["mean_slack"].get<double>() + j["mean_slack"].get<double>()) / 2);
  EXPECT_NEAR(MetricValue(m, "paladin_prediction_target_under_rate", ""), 0.02, 1e-12);

  // A team sees its own figures only, and its "fleet" is what it can see.
  StatusOr<Principal> serve_team = ParseScope("team:serve");
  ASSERT_TRUE(serve_team.ok());
  const std::string ms = control_->Metrics(*serve_team);
  EXPECT_EQ(MetricValue(ms, "paladin_prediction_windows_total", train), -1);
  EXPECT_EQ(MetricValue(ms, "paladin_prediction_windows_total", "scope=\"fleet\""), 20);
  StatusOr<Json> team_summary = control_->Summary(*serve_team);
  ASSERT_TRUE(team_summary.ok());
  EXPECT_EQ((*team_summary)["prediction_check"]["windows"], 20);
  EXPECT_EQ((*team_summary)["prediction_check"]["under"], 0);
}

// An "auto" job that runs out of GPU memory under its quota starts again at the size core's
// predictor gives it after an OOM (`Predictor::ObserveOom`, what the dynamic simulation does):
// for `paladin`, at least 1.2 x the quota it outgrew. Here its use was flat for ninety minutes,
// so its forecast sat below that floor, and the floor is the new quota.
TEST_F(PredictionCheckTest, AnOomSizesTheNextRunWithTheCorePredictor) {
  const std::string id = Submit("train", "auto");
  quota_[id] = 4 * kGiB;  // what the start asks for, below
  control_->Tick();
  Beat();
  Beat();
  ASSERT_EQ(running_.size(), 1u);
  StatusOr<Json> placed = control_->GetJob(admin_, id);
  ASSERT_TRUE(placed.ok());
  const int64_t quota = (*placed)["quota_bytes"];
  EXPECT_EQ(quota, 4 * kGiB) << "no history: the default";
  // Long enough for the class model to read its 98% quantile (49 windows and more).
  for (int s = 0; s < 90 * 60; s += 10) {
    now_ += 10;
    used_[id] = quota - kGiB / 8;
    Beat();
    control_->Tick();
  }
  StatusOr<Json> before = control_->GetJob(admin_, id);
  ASSERT_TRUE(before.ok());
  EXPECT_LT((*before)["predicted_bytes"].get<int64_t>(), quota * 6 / 5) << before->dump();
  // Refused allocations, then a non-zero exit: an OOM.
  refusals_[id] = 3;
  exit_code_[id] = 1;
  now_ += 1;
  Beat();
  StatusOr<Json> after = control_->GetJob(admin_, id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)["restarts"], 1) << after->dump();
  EXPECT_EQ((*after)["quota_bytes"],
            static_cast<int64_t>(std::ceil(static_cast<double>(quota) * 1.2)))
      << after->dump();
  EXPECT_NE((*after)["reason"].get<std::string>().find("after an OOM"), std::string::npos)
      << after->dump();
}

}  // namespace
}  // namespace paladin::server
