// The fleet CLI's formatting and argument parsing (src/cli/fleet_format.cc): no server needed.
#include "cli/fleet_format.h"

#include <gtest/gtest.h>

#include <string>

namespace paladin::cli::fleet {
namespace {

constexpr uint64_t kMiB = 1024ull * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;

TEST(FleetFormatBytes, PicksTheUnitAndOneDecimalBelowTen) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(512 * kMiB), "512 MiB");
  EXPECT_EQ(FormatBytes(8 * kGiB), "8.0 GiB");
  EXPECT_EQ(FormatBytes(3 * kGiB / 2), "1.5 GiB");
  EXPECT_EQ(FormatBytes(80 * kGiB), "80 GiB");
  EXPECT_EQ(FormatBytes(1024 * kGiB), "1.0 TiB");
  // 9.96 GiB rounds to 10: no "10.0 GiB".
  EXPECT_EQ(FormatBytes(static_cast<uint64_t>(9.96 * static_cast<double>(kGiB))), "10 GiB");
  EXPECT_EQ(FormatBytes(UINT64_MAX), "16777216 TiB");
}

TEST(FleetFormatDuration, SecondsMinutesHoursDays) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(45.9), "45s");
  EXPECT_EQ(FormatDuration(192), "3m12s");
  EXPECT_EQ(FormatDuration(3600), "1h00m");
  EXPECT_EQ(FormatDuration(2 * 3600 + 5 * 60 + 7), "2h05m");
  EXPECT_EQ(FormatDuration(3 * 86400 + 4 * 3600), "3d04h");
}

TEST(FleetFormatDuration, NegativeAndNonFiniteAreZero) {
  EXPECT_EQ(FormatDuration(-5), "0s");
  EXPECT_EQ(FormatDuration(std::nan("")), "0s");
  EXPECT_EQ(FormatDuration(1e300), "11574074d01h");
}

TEST(FleetFormatAgo, RelativeToNow) {
  EXPECT_EQ(FormatAgo(1000.0, 1192.0), "3m12s ago");
  EXPECT_EQ(FormatAgo(std::nullopt, 1192.0), "-");
  EXPECT_EQ(FormatAgo(2000.0, 1000.0), "0s ago");  // a clock ahead of ours
}

TEST(FleetParseSizeFlag, AcceptsUnitsAndBytes) {
  EXPECT_EQ(*ParseSizeFlag("--gpu-mem", "8GiB"), 8 * kGiB);
  EXPECT_EQ(*ParseSizeFlag("--gpu-mem", "512MiB"), 512 * kMiB);
  EXPECT_EQ(*ParseSizeFlag("--gpu-mem", "1.5GiB"), 3 * kGiB / 2);
  EXPECT_EQ(*ParseSizeFlag("--gpu-mem", "8G"), 8 * kGiB);
  EXPECT_EQ(*ParseSizeFlag("--gpu-mem", "4096"), 4096u);
}

TEST(FleetParseSizeFlag, ErrorsNameTheFlagAndTheValue) {
  for (const char* bad : {"", "abc", "-1GiB", "8XB", "1.2.3GiB", "0x10", "inf", "nan", "8 GiBs"}) {
    StatusOr<uint64_t> r = ParseSizeFlag("--gpu-mem-max", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--gpu-mem-max '" + std::string(bad) + "'"),
              std::string::npos)
        << r.status().message();
  }
}

TEST(FleetParseSizeFlag, ZeroOnlyWhenAllowed) {
  EXPECT_FALSE(ParseSizeFlag("--gpu-mem", "0").ok());
  EXPECT_EQ(*ParseSizeFlag("--gpu-mem", "0", /*allow_zero=*/true), 0u);
}

TEST(FleetParseGpuMemFlag, AutoOrBytes) {
  EXPECT_EQ(*ParseGpuMemFlag("--gpu-mem", "auto"), api::Json("auto"));
  EXPECT_EQ(*ParseGpuMemFlag("--gpu-mem", "2GiB"), api::Json(2 * kGiB));
  StatusOr<api::Json> bad = ParseGpuMemFlag("--gpu-mem", "lots");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("or auto"), std::string::npos);
}

TEST(FleetParseNodeGpu, NodeAloneOrWithAGpuIndex) {
  StatusOr<NodeGpu> node = ParseNodeGpu("--to", "node-b");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->node, "node-b");
  EXPECT_FALSE(node->gpu.has_value());
  StatusOr<NodeGpu> gpu = ParseNodeGpu("--to", "node-b/1");
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(gpu->node, "node-b");
  EXPECT_EQ(gpu->gpu, 1);
  EXPECT_EQ(ParseNodeGpu("--to", "gpu-box.example.com/12")->gpu, 12);
}

TEST(FleetParseNodeGpu, RefusesMalformedTargets) {
  for (const char* bad :
       {"", "/1", "node-b/", "node-b/x", "node-b/-1", "node-b/1/2", "node b", "node-b/99999"}) {
    StatusOr<NodeGpu> r = ParseNodeGpu("--to", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("--to '", 0), 0u) << r.status().message();
  }
}

TEST(FleetParseEnv, NameEqualsValue) {
  StatusOr<std::map<std::string, std::string>> env = ParseEnv({"A=1", "B_2=x=y", "EMPTY=", "A=3"});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->at("A"), "3");
  EXPECT_EQ(env->at("B_2"), "x=y");
  EXPECT_EQ(env->at("EMPTY"), "");
  for (const char* bad : {"NOVALUE", "=1", "1A=2", "A-B=1", "A B=1"}) {
    EXPECT_FALSE(ParseEnv({bad}).ok()) << bad;
  }
}

TEST(FleetPrintable, ReplacesControlCharactersAndBadUtf8) {
  EXPECT_EQ(Printable("plain"), "plain");
  EXPECT_EQ(Printable("a\x1b[2Jb"), "a?[2Jb");
  EXPECT_EQ(Printable("tab\there\n"), "tab?here?");
  EXPECT_EQ(Printable("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(Printable("\xff\xfe"), "??");
  EXPECT_EQ(Printable("\xc3"), "?");
  EXPECT_EQ(Printable("\xc2\x9b"
                      "31m"),
            "??31m");  // C1 CSI
  EXPECT_EQ(Printable(std::string("nul\0byte", 8)), "nul?byte");
}

TEST(FleetTable, AlignsColumnsByCharacters) {
  Table t({"ID", "NAME", "STATE"});
  t.AddRow({"j-000001", "train", "running"});
  t.AddRow({"j-000002", "caf\xc3\xa9-\xc3\xa9val", "pending"});
  t.AddRow({"j-3", "x"});  // a short row is padded with empty cells
  EXPECT_EQ(t.Render(),
            "ID        NAME       STATE\n"
            "j-000001  train      running\n"
            "j-000002  caf\xc3\xa9-\xc3\xa9val  pending\n"
            "j-3       x\n");
}

TEST(FleetTable, CellsFromTheServerCannotEscapeTheTerminal) {
  Table t({"NAME"});
  t.AddRow({"evil\x1b]0;title\x07"});
  EXPECT_EQ(t.Render(), "NAME\nevil?]0;title?\n");
}

TEST(FleetMemoryBar, UsedAllocatedFree) {
  EXPECT_EQ(MemoryBar(0, 0, 80, 8), "[........]");
  EXPECT_EQ(MemoryBar(20, 40, 80, 8), "[##==....]");
  EXPECT_EQ(MemoryBar(60, 40, 80, 8), "[####!!..]");
  EXPECT_EQ(MemoryBar(100, 100, 80, 4), "[####]");
  EXPECT_EQ(MemoryBar(5, 5, 0, 4), "[....]");
}

TEST(FleetEscape, PathSegmentsCannotClimb) {
  EXPECT_EQ(Escape("j-000001"), "j-000001");
  EXPECT_EQ(Escape("../tokens"), "..%2Ftokens");
  EXPECT_EQ(Escape(".."), "%2E%2E");
  EXPECT_EQ(Escape("."), "%2E");
  EXPECT_EQ(Escape("a b?c&d"), "a%20b%3Fc%26d");
  EXPECT_EQ(Escape("\xc3\xa9"), "%C3%A9");
}

TEST(FleetQuery, SkipsEmptyValues) {
  EXPECT_EQ(Query({}), "");
  EXPECT_EQ(Query({{"team", ""}, {"all", ""}}), "");
  EXPECT_EQ(Query({{"team", "vision & nlp"}, {"all", "1"}}), "?team=vision%20%26%20nlp&all=1");
}

TEST(FleetJsonFields, NeverThrowOnMissingNullOrWrongTypes) {
  const api::Json j = api::Json::parse(
      R"({"s": "x", "n": 3, "f": 2.5, "neg": -4, "null": null, "arr": [1], "obj": {}})");
  EXPECT_EQ(Str(j, "s"), "x");
  EXPECT_EQ(Str(j, "n"), "3");
  EXPECT_EQ(Str(j, "null", "fb"), "fb");
  EXPECT_EQ(Str(j, "obj", "fb"), "fb");
  EXPECT_EQ(Str(api::Json::array(), "s", "fb"), "fb");
  EXPECT_EQ(Num(j, "f"), 2.5);
  EXPECT_EQ(Num(j, "s"), std::nullopt);
  EXPECT_EQ(Bytes(j, "n"), 3u);
  EXPECT_EQ(Bytes(j, "neg"), std::nullopt);
  EXPECT_EQ(Bytes(j, "f"), 2u);
  EXPECT_EQ(Int(j, "neg"), -4);
  EXPECT_EQ(Int(j, "f"), std::nullopt);
  EXPECT_EQ(Array(j, "arr").size(), 1u);
  EXPECT_TRUE(Array(j, "obj").empty());
  EXPECT_TRUE(Array(api::Json(), "arr").empty());
  EXPECT_EQ(BytesCell(j, "missing"), "-");
}

TEST(FleetPlacementCell, NodeAndGpu) {
  EXPECT_EQ(PlacementCell(api::Json::parse(R"({"node": "node-a", "gpu": 0})")), "node-a/0");
  EXPECT_EQ(PlacementCell(api::Json::parse(R"({"node": "node-a", "gpu": null})")), "node-a");
  EXPECT_EQ(PlacementCell(api::Json::parse(R"({"node": null})")), "-");
}

TEST(FleetNewLogText, AppendedTextAndASlidingWindow) {
  EXPECT_EQ(NewLogText("", "abc"), "abc");
  EXPECT_EQ(NewLogText("line1\n", "line1\nline2\n"), "line2\n");
  EXPECT_EQ(NewLogText("same", "same"), "");
  // The server's window slid past the start of what was shown: the overlap is found.
  EXPECT_EQ(NewLogText("aaa\nbbb\nccc\n", "bbb\nccc\nddd\n"), "ddd\n");
  // Repeated lines: the largest overlap wins, so nothing shown is shown again.
  EXPECT_EQ(NewLogText("x\nx\nx\n", "x\nx\nx\ny\n"), "y\n");
  EXPECT_EQ(NewLogText("x\nx\nx\n", "x\nx\ny\n"), "y\n");
  // A window smaller than what was shown (the server trimmed more than it added).
  EXPECT_EQ(NewLogText("aaa\nbbb\nccc\n", "ccc\n"), "");
  // Nothing in common: everything is new.
  EXPECT_EQ(NewLogText("old\n", "new\n"), "new\n");
}

TEST(FleetTailLines, LastNLines) {
  EXPECT_EQ(TailLines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(TailLines("a\nb\nc", 1), "c");
  EXPECT_EQ(TailLines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(TailLines("a\nb\n", 0), "a\nb\n");
  EXPECT_EQ(TailLines("", 3), "");
}

TEST(FleetIsEnded, TerminalStates) {
  for (const char* s : {"succeeded", "failed", "cancelled"}) {
    EXPECT_TRUE(IsEnded(api::Json{{"state", s}})) << s;
  }
  for (const char* s : {"pending", "running", "migrating", "checkpointed", "frozen"}) {
    EXPECT_FALSE(IsEnded(api::Json{{"state", s}})) << s;
  }
  // A job without a state, or not a job at all, has not ended as far as anyone can tell.
  EXPECT_FALSE(IsEnded(api::Json::object()));
  EXPECT_FALSE(IsEnded(api::Json{{"state", 3}}));
  EXPECT_FALSE(IsEnded(api::Json::array()));
}

}  // namespace
}  // namespace paladin::cli::fleet
