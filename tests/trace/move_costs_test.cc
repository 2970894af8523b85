// The measured moves' CSV (paladin move-costs writes it, sim dynamic --move-costs reads it):
// what is written reads back the same, and a hostile file is refused naming the line and field.
#include "paladin/trace/move_costs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace paladin::trace {
namespace {

TEST(MoveCostsTest, WhatIsWrittenReadsBackTheSame) {
  const std::vector<MeasuredMove> moves = {
      {"node-a", "node-b", {2147483648.0, 0, 1.25}},
      {"node-b", "node-a", {0, 536870912.0, 0.5}},
      {"rack 1, node \"c\"", "node-a", {1024, 2048, 3.000001}},  // quoted as RFC 4180 says
      {"node-a", "node-c", {1, 0, 2.5e-7}},  // a pause far under a millisecond stays above 0
  };
  const std::string csv = MoveCostsCsv(moves);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "from,to,gpu_bytes,host_bytes,pause_s");
  StatusOr<std::vector<MeasuredMove>> back = ParseMoveCosts(csv, "moves.csv");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), moves.size());
  for (size_t i = 0; i < moves.size(); ++i) {
    EXPECT_EQ((*back)[i].from, moves[i].from);
    EXPECT_EQ((*back)[i].to, moves[i].to);
    EXPECT_EQ((*back)[i].observed.gpu_bytes, moves[i].observed.gpu_bytes);
    EXPECT_EQ((*back)[i].observed.host_bytes, moves[i].observed.host_bytes);
    EXPECT_NEAR((*back)[i].observed.pause_s, moves[i].observed.pause_s,
                1e-8 * moves[i].observed.pause_s);
  }
  StatusOr<std::vector<MeasuredMove>> none = ParseMoveCosts(MoveCostsCsv({}), "empty.csv");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(MoveCostsTest, AHostileRowIsRefusedNamingTheLineAndField) {
  const std::string header = "from,to,gpu_bytes,host_bytes,pause_s\n";
  const struct {
    std::string row, want;
  } cases[] = {
      {"a,b,-1,0,1\n", "moves.csv:2: field 'gpu_bytes'"},
      {"a,b,1,nan,1\n", "moves.csv:2: field 'host_bytes'"},
      {"a,b,1,0,0\n", "moves.csv:2: field 'pause_s'"},
      {"a,b,1,0,1e9\n", "moves.csv:2: field 'pause_s'"},  // over a week
      {"a,b,1,0,x\n", "moves.csv:2: field 'pause_s'"},
      {",b,1,0,1\n", "moves.csv:2: field 'from'"},
      {"a,,1,0,1\n", "moves.csv:2: field 'to'"},
      {"a,b,1,0\n", "moves.csv"},  // a short row
  };
  for (const auto& c : cases) {
    StatusOr<std::vector<MeasuredMove>> got = ParseMoveCosts(header + c.row, "moves.csv");
    ASSERT_FALSE(got.ok()) << c.row;
    EXPECT_NE(got.status().message().find(c.want), std::string::npos)
        << c.row << ": " << got.status().message();
  }
  StatusOr<std::vector<MeasuredMove>> no_pause = ParseMoveCosts("from,to,gpu_bytes\n", "m.csv");
  ASSERT_FALSE(no_pause.ok());
  EXPECT_NE(no_pause.status().message().find("host_bytes"), std::string::npos)
      << no_pause.status().message();
}

}  // namespace
}  // namespace paladin::trace
