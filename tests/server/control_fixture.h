// The control plane driven directly, with its clock injected (ControlOptions::clock): no HTTP,
// no sleeps. A fixture opens a Control over a fresh store, acts as the admin, and registers
// nodes with emulated GPUs; the tests move now_ themselves.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "harness.h"
#include "paladin/server/auth.h"
#include "paladin/server/store.h"
#include "server/control.h"

namespace paladin::server::testing {

class ControlTest : public ::testing::Test {
 protected:
  // A Control named NAME (its data folder's name) with OPTIONS, on the injected clock.
  void Open(const std::string& name, ControlOptions options = {}) {
    StatusOr<std::unique_ptr<Store>> store = Store::Open(TempDir(name) + "/paladin.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    options.clock = &clock_;
    StatusOr<std::unique_ptr<Control>> control = Control::Create(std::move(*store), options);
    ASSERT_TRUE(control.ok()) << control.status().ToString();
    control_ = std::move(*control);
    StatusOr<Principal> admin = ParseScope("admin");
    ASSERT_TRUE(admin.ok());
    admin_ = *admin;
  }

  // Registers NODE with GPUS emulated GPUs of 80 GiB (UUID GPU-NODE-i, or GPU-NODE for one).
  void Register(const std::string& node, int gpus = 1) {
    Json list = Json::array();
    for (int g = 0; g < gpus; ++g) {
      list.push_back({{"index", g},
                      {"uuid", "GPU-" + node + (gpus == 1 ? "" : "-" + std::to_string(g))},
                      {"model", "EMU"},
                      {"memory_bytes", 80 * kGiB},
                      {"emulated", true},
                      {"healthy", true}});
    }
    StatusOr<Json> r = control_->RegisterAgent(
        admin_, Json{{"name", node}, {"address", "127.0.0.1"}, {"gpus", list}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  // A copy's report in a heartbeat: job ID of EPOCH in STATE, using USED of its QUOTA bytes.
  static Json CopyReport(const std::string& id, int64_t epoch, const std::string& state,
                         int64_t used, int64_t quota) {
    return {{"id", id},         {"epoch", epoch},     {"state", state},
            {"pid", 1000},      {"used_bytes", used}, {"quota_bytes", quota},
            {"quota_grows", 0}, {"refusals", 0},      {"exit_code", nullptr},
            {"stdout", ""},     {"stderr", ""}};
  }

  // The result of a command carried out (a start, whose copy has pid 1000).
  static Json Done(const Json& command) {
    return {{"command", command["id"]}, {"ok", true}, {"error", ""}, {"detail", {{"pid", 1000}}}};
  }

  double now_ = 1'000'000;
  // The control plane's clock: what now_ says (the tests set it by hand).
  class FixtureClock final : public base::Clock {
   public:
    explicit FixtureClock(const double* now) : now_(now) {}
    double WallSeconds() const override { return *now_; }
    double SteadySeconds() const override { return *now_; }
    uint64_t BootNs() const override { return static_cast<uint64_t>(*now_ * 1e9); }

   private:
    const double* now_;
  };
  FixtureClock clock_{&now_};
  std::unique_ptr<Control> control_;
  Principal admin_;
};

}  // namespace paladin::server::testing
