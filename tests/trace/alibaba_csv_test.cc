// Readers of the Alibaba GPU trace v2023 CSV files. Trace files are untrusted input: every bad
// row gives an error naming the file, the line and the field.
#include "paladin/trace/alibaba_csv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paladin::trace {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kPodHeader[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";

// A model table with T4 (bit 0) and V100M32 (bit 1).
core::GpuModelTable TwoModels() {
  core::GpuModelTable models;
  (void)models.Intern("T4");
  (void)models.Intern("V100M32");
  return models;
}

StatusOr<std::vector<core::Workload>> ParsePods(const std::string& text) {
  return ParsePodCsv(text, "pods.csv", TwoModels());
}

std::string ErrorOf(const StatusOr<std::vector<core::Workload>>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

// --- pods ---

TEST(ParsePodCsvTest, ReadsEachField) {
  auto pods = ParsePods(std::string(kPodHeader) +
                        "p0,12000,16384,1,1000,\n"
                        "p1,6000,12288,1,460,T4|V100M32\n"
                        "p2,88000,327680,8,1000,V100M32\n"
                        "p3,4000,8192,0,0,\n");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 4u);
  const core::Workload& p1 = (*pods)[1];
  EXPECT_EQ(p1.name, "p1");
  EXPECT_EQ(p1.cpu_milli, 6000);
  EXPECT_EQ(p1.mem_mib, 12288);
  EXPECT_EQ(p1.gpu_count, 1);
  EXPECT_EQ(p1.gpu_milli, 460);
  EXPECT_EQ(p1.allowed_models, 0b11u);
  EXPECT_EQ((*pods)[0].allowed_models, 0u);  // empty gpu_spec: any model
  EXPECT_EQ((*pods)[2].gpu_count, 8);
  EXPECT_EQ((*pods)[2].allowed_models, 0b10u);
  EXPECT_EQ((*pods)[3].gpu_count, 0);
  for (const auto& w : *pods) EXPECT_TRUE(core::ValidateWorkload(w).ok()) << w.name;
}

TEST(ParsePodCsvTest, ATruncatedRowNamesTheSourceAndLine) {
  const std::string error = ErrorOf(ParsePods(std::string(kPodHeader) + "p0,12000,16384,1,1000,\n"
                                                                        "p1,6000,12288\n"));
  EXPECT_THAT(error, AllOf(HasSubstr("pods.csv:3"), HasSubstr("truncated"),
                           HasSubstr("expected 6 fields"), HasSubstr("found 3")));
}

TEST(ParsePodCsvTest, ARowWithTooManyFieldsIsAnError) {
  const std::string error = ErrorOf(ParsePods(std::string(kPodHeader) + "p0,1,2,0,0,,extra\n"));
  EXPECT_THAT(error, AllOf(HasSubstr("pods.csv:2"), HasSubstr("found 7")));
}

TEST(ParsePodCsvTest, ANonIntegerFieldNamesFileLineAndField) {
  const std::string error = ErrorOf(ParsePods(std::string(kPodHeader) + "p0,12000,16384,1,1000,\n"
                                                                        "p1,6000,lots,1,460,\n"));
  EXPECT_THAT(error, AllOf(HasSubstr("pods.csv:3"), HasSubstr("field 'memory_mib'"),
                           HasSubstr("'lots' is not an integer")));
}

TEST(ParsePodCsvTest, IntegralFloatsAreAcceptedOthersAreNot) {
  // pandas writes integer columns with missing values as floats.
  auto pods = ParsePods(std::string(kPodHeader) + "p0,12000.0,16384,1,1000.0,\n");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ((*pods)[0].cpu_milli, 12000);
  EXPECT_THAT(ErrorOf(ParsePods(std::string(kPodHeader) + "p0,12000.5,16384,1,1000,\n")),
              AllOf(HasSubstr("field 'cpu_milli'"), HasSubstr("not an integer")));
}

TEST(ParsePodCsvTest, HugeOrNonFiniteNumbersAreRejectedAsNotIntegers) {
  for (const char* value : {"1e300", "1e19", "-1e19", "inf", "nan"}) {
    const std::string error =
        ErrorOf(ParsePods(std::string(kPodHeader) + "p0," + value + ",16384,1,1000,\n"));
    EXPECT_THAT(error, AllOf(HasSubstr("pods.csv:2"), HasSubstr("field 'cpu_milli'"))) << value;
  }
  EXPECT_THAT(ErrorOf(ParsePods(std::string(kPodHeader) + "p0,99999999999999999999,1,1,1000,\n")),
              HasSubstr("too large"));
}

TEST(ParsePodCsvTest, AMissingColumnIsNamed) {
  const std::string error = ErrorOf(ParsePods("name,cpu_milli,memory_mib,num_gpu\np0,1,2,0\n"));
  EXPECT_THAT(error, AllOf(HasSubstr("pods.csv:1"), HasSubstr("missing column 'gpu_milli'"),
                           HasSubstr("header has: name, cpu_milli, memory_mib, num_gpu")));
}

TEST(ParsePodCsvTest, AnUnknownGpuModelIsNamedWithTheField) {
  const std::string error =
      ErrorOf(ParsePods(std::string(kPodHeader) + "p0,12000,16384,1,1000,\n"
                                                  "p1,12000,16384,1,1000,T4|A100\n"));
  EXPECT_THAT(error, AllOf(HasSubstr("pods.csv:3"), HasSubstr("field 'gpu_spec'"),
                           HasSubstr("'A100'"), HasSubstr("T4, V100M32")));
}

TEST(ParsePodCsvTest, OutOfRangeValuesGiveTheRange) {
  struct Case {
    const char* row;
    const char* message_part;
  };
  const Case cases[] = {
      {"p0,12000,16384,1,1500,\n", "field 'gpu_milli': 1500 outside 0..1000"},
      {"p0,12000,16384,17,1000,\n", "field 'num_gpu': 17 outside 0..16"},
      {"p0,-1,16384,1,1000,\n", "field 'cpu_milli': -1 outside 0..1000000000"},
      {"p0,12000,16384,1,0,\n", "field 'gpu_milli': 0 for a task asking 1 GPUs"},
      {"p0,12000,16384,0,500,\n", "field 'gpu_milli': 500 for a task with num_gpu 0"},
      {"p0,12000,16384,2,500,\n", "must take whole GPUs (1000), got 500"},
      {",12000,16384,1,1000,\n", "field 'name': empty task name"},
      {"p0,,16384,1,1000,\n", "field 'cpu_milli': empty"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ErrorOf(ParsePods(std::string(kPodHeader) + c.row)),
                AllOf(HasSubstr("pods.csv:2"), HasSubstr(c.message_part)))
        << c.row;
  }
}

TEST(ParsePodCsvTest, CrlfLineEndingsParse) {
  auto pods = ParsePods(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\r\n"
      "p0,12000,16384,1,1000,T4\r\n"
      "p1,6000,12288,1,460,\r\n");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 2u);
  EXPECT_EQ((*pods)[0].allowed_models, 0b01u);  // "T4", not "T4\r"
  EXPECT_EQ((*pods)[1].gpu_milli, 460);
  EXPECT_EQ((*pods)[1].allowed_models, 0u);
}

TEST(ParsePodCsvTest, QuotedFieldsParse) {
  auto pods = ParsePods(std::string(kPodHeader) +
                        "\"pod, \"\"one\"\"\",\"12000\",16384,1,\"1000\",\"T4|V100M32\"\n"
                        "\"multi\nline\",1000,1024,0,0,\n"
                        "p2,2000,1024,0,0,\n");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 3u);
  EXPECT_EQ((*pods)[0].name, "pod, \"one\"");
  EXPECT_EQ((*pods)[0].cpu_milli, 12000);
  EXPECT_EQ((*pods)[0].allowed_models, 0b11u);
  EXPECT_EQ((*pods)[1].name, "multi\nline");
}

TEST(ParsePodCsvTest, LineNumbersCountBlankLinesAndQuotedNewlines) {
  // Line 1 header, 2 p0, 3 blank, 4-5 the quoted two-line name, 6 the bad row.
  const std::string error =
      ErrorOf(ParsePods(std::string(kPodHeader) + "p0,1000,1024,0,0,\n"
                                                  "\n"
                                                  "\"two\nlines\",1000,1024,0,0,\n"
                                                  "p3,x,1024,0,0,\n"));
  EXPECT_THAT(error, AllOf(HasSubstr("pods.csv:6"), HasSubstr("field 'cpu_milli'")));
}

TEST(ParsePodCsvTest, AnUnterminatedQuoteIsAnError) {
  EXPECT_THAT(ErrorOf(ParsePods(std::string(kPodHeader) + "\"p0,1000,1024,0,0,\n")),
              AllOf(HasSubstr("pods.csv:2"), HasSubstr("unterminated quoted field")));
}

TEST(ParsePodCsvTest, EmptyInputsAreErrors) {
  EXPECT_THAT(ErrorOf(ParsePods("")), HasSubstr("empty file"));
  EXPECT_THAT(ErrorOf(ParsePods(kPodHeader)), HasSubstr("pods.csv: no tasks"));
}

TEST(ParsePodCsvTest, ColumnsAreFoundByNameInAnyOrder) {
  auto pods = ParsePods(
      "qos,gpu_milli,num_gpu,name,memory_mib,cpu_milli\n"
      "LS,250,1,p0,1024,3000\n");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ((*pods)[0].name, "p0");
  EXPECT_EQ((*pods)[0].cpu_milli, 3000);
  EXPECT_EQ((*pods)[0].gpu_milli, 250);
}

// --- pod times ---

constexpr char kTimesHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

StatusOr<std::vector<PodTimes>> ParseTimes(const std::string& text) {
  return ParsePodTimes(text, "pods.csv");
}

TEST(ParsePodTimesTest, ReadsTheTimesInFileOrder) {
  auto times = ParseTimes(std::string(kTimesHeader) +
                          "p0,1000,1024,1,500,,LS,Running,100,900,120\n"
                          "p1,1000,1024,0,0,,BE,Succeeded,0,50,0\n"
                          "p2,1000,1024,1,1000,T4,LS,Running,7200.0,86400,7300\n");
  ASSERT_TRUE(times.ok()) << times.status().ToString();
  ASSERT_EQ(times->size(), 3u);
  EXPECT_EQ((*times)[0].creation_s, 100);
  EXPECT_EQ((*times)[0].scheduled_s, 120);
  EXPECT_EQ((*times)[0].deletion_s, 900);
  EXPECT_EQ((*times)[1].creation_s, 0);
  EXPECT_EQ((*times)[1].scheduled_s, 0);
  EXPECT_EQ((*times)[1].deletion_s, 50);
  EXPECT_EQ((*times)[2].creation_s, 7200);
  EXPECT_EQ((*times)[2].scheduled_s, 7300);
  EXPECT_EQ((*times)[2].deletion_s, 86400);
}

TEST(ParsePodTimesTest, ColumnsAreFoundByName) {
  auto times = ParseTimes(
      "scheduled_time,name,deletion_time,creation_time\n"
      "20,p0,30,10\n");
  ASSERT_TRUE(times.ok()) << times.status().ToString();
  ASSERT_EQ(times->size(), 1u);
  EXPECT_EQ((*times)[0].creation_s, 10);
  EXPECT_EQ((*times)[0].scheduled_s, 20);
  EXPECT_EQ((*times)[0].deletion_s, 30);
}

TEST(ParsePodTimesTest, EmptyScheduledOrDeletionTimesReadAsMinusOne) {
  auto times = ParseTimes(std::string(kTimesHeader) +
                          "never-scheduled,1000,1024,1,500,,LS,Pending,100,,\n"
                          "still-running,1000,1024,1,500,,LS,Running,100,,150\n"
                          "deleted-unscheduled,1000,1024,1,500,,LS,Failed,100,400,\n");
  ASSERT_TRUE(times.ok()) << times.status().ToString();
  ASSERT_EQ(times->size(), 3u);
  EXPECT_EQ((*times)[0].scheduled_s, -1);
  EXPECT_EQ((*times)[0].deletion_s, -1);
  EXPECT_EQ((*times)[1].scheduled_s, 150);
  EXPECT_EQ((*times)[1].deletion_s, -1);
  EXPECT_EQ((*times)[2].scheduled_s, -1);
  EXPECT_EQ((*times)[2].deletion_s, 400);
  for (const PodTimes& t : *times) EXPECT_EQ(t.creation_s, 100);
}

TEST(ParsePodTimesTest, APodListWithoutTimesGivesNoTimes) {
  auto times = ParseTimes(std::string(kPodHeader) + "p0,12000,16384,1,1000,\n");
  ASSERT_TRUE(times.ok()) << times.status().ToString();
  EXPECT_TRUE(times->empty());
}

TEST(ParsePodTimesTest, BadTimesNameTheLineAndField) {
  struct Case {
    const char* row;
    const char* message_part;
  };
  const Case cases[] = {
      {"p0,1,1,0,0,,LS,Running,500,400,\n",
       "pods.csv:2: field 'deletion_time': before the creation"},
      {"p0,1,1,0,0,,LS,Running,100,400,450\n",
       "pods.csv:2: field 'deletion_time': before the scheduled"},
      {"p0,1,1,0,0,,LS,Running,,400,\n", "pods.csv:2: field 'creation_time': empty"},
      {"p0,1,1,0,0,,LS,Running,-5,400,\n", "pods.csv:2: field 'creation_time': -5 outside"},
      {"p0,1,1,0,0,,LS,Running,100,soon,\n", "pods.csv:2: field 'deletion_time': 'soon'"},
      {"p0,1,1,0,0,,LS,Running,100,,1.5\n", "pods.csv:2: field 'scheduled_time': '1.5'"},
  };
  for (const Case& c : cases) {
    auto times = ParseTimes(std::string(kTimesHeader) + c.row);
    ASSERT_FALSE(times.ok()) << c.row;
    EXPECT_EQ(times.status().code(), StatusCode::kInvalidArgument) << c.row;
    EXPECT_THAT(times.status().message(), HasSubstr(c.message_part)) << c.row;
  }
  // The error names the line of the bad row, not the first.
  auto later = ParseTimes(std::string(kTimesHeader) +
                          "p0,1,1,0,0,,LS,Running,100,400,\n"
                          "p1,1,1,0,0,,LS,Running,900,800,\n");
  ASSERT_FALSE(later.ok());
  EXPECT_THAT(later.status().message(),
              AllOf(HasSubstr("pods.csv:3"), HasSubstr("field 'deletion_time'")));
}

TEST(ParsePodTimesTest, CreationWithoutTheOtherTimeColumnsIsAnError) {
  auto times = ParseTimes("name,creation_time,deletion_time\np0,1,2\n");
  ASSERT_FALSE(times.ok());
  EXPECT_THAT(times.status().message(), HasSubstr("missing column 'scheduled_time'"));
}

// --- nodes ---

constexpr char kNodeHeader[] = "sn,cpu_milli,memory_mib,gpu,model\n";

TEST(ParseNodeCsvTest, BuildsTheFleetAndInternsModels) {
  auto fleet = ParseNodeCsv(std::string(kNodeHeader) +
                                "n0,64000,262144,2,P100\n"
                                "n1,96000,786432,8,G2\n"
                                "n2,32000,131072,0,\n"
                                "n3,64000,262144,4,P100\n",
                            "nodes.csv");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  ASSERT_EQ(fleet->size(), 4u);
  EXPECT_EQ(fleet->models().size(), 2u);
  EXPECT_EQ(fleet->models().Name(0), "P100");
  EXPECT_EQ(fleet->models().MemoryMib(0), 16280);  // a public model
  EXPECT_EQ(fleet->models().MemoryMib(1), 0);      // G2 is undisclosed
  EXPECT_EQ(fleet->node(1).name, "n1");
  EXPECT_EQ(fleet->node(1).cpu_milli, 96000);
  EXPECT_EQ(fleet->node(1).gpu_count(), 8);
  EXPECT_EQ(fleet->node(2).model, core::kNoModel);
  EXPECT_EQ(fleet->node(3).model, 0);
  EXPECT_EQ(fleet->GpuMilliCapacity(), (2 + 8 + 4) * 1000);
}

TEST(ParseNodeCsvTest, BadRowsNameFileLineAndField) {
  struct Case {
    const char* row;
    const char* message_part;
  };
  const Case cases[] = {
      {"n0,64000,262144,17,T4\n", "nodes.csv:2: field 'gpu': 17 outside 0..16"},
      {"n0,64000,262144,2,\n", "nodes.csv:2: field 'model': a node with GPUs needs a model"},
      {"n0,64k,262144,2,T4\n", "nodes.csv:2: field 'cpu_milli': '64k' is not an integer"},
      {",64000,262144,2,T4\n", "nodes.csv:2: field 'sn': empty node name"},
      {"n0,64000\n", "nodes.csv:2: expected 5 fields"},
  };
  for (const Case& c : cases) {
    auto fleet = ParseNodeCsv(std::string(kNodeHeader) + c.row, "nodes.csv");
    ASSERT_FALSE(fleet.ok()) << c.row;
    EXPECT_THAT(fleet.status().message(), HasSubstr(c.message_part)) << c.row;
  }
  auto missing = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu\nn0,1,1,0\n", "nodes.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("missing column 'model'"));
  EXPECT_THAT(ParseNodeCsv(kNodeHeader, "nodes.csv").status().message(),
              HasSubstr("nodes.csv: no nodes"));
}

TEST(ReadCsvTest, AMissingFileIsAnIoErrorNamingThePath) {
  auto fleet = ReadNodeCsv("/nonexistent/nodes.csv");
  ASSERT_FALSE(fleet.ok());
  EXPECT_EQ(fleet.status().code(), StatusCode::kIoError);
  EXPECT_THAT(fleet.status().message(), HasSubstr("/nonexistent/nodes.csv"));
}

// --- the bundled trace ---

class BundledTraceTest : public ::testing::Test {
 protected:
  static std::string Path(const std::string& file) {
    return PALADIN_SOURCE_DATA_DIR "/alibaba-gpu-2023/" + file;
  }
};

TEST_F(BundledTraceTest, NodeListHas1213NodesAnd6212Gpus) {
  auto fleet = ReadNodeCsv(Path("openb_node_list_gpu_node.csv"));
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  EXPECT_EQ(fleet->size(), 1213u);
  EXPECT_EQ(fleet->GpuMilliCapacity(), 6212 * 1000);
}

TEST_F(BundledTraceTest, PodListsLoadWithTheirRowCounts) {
  auto fleet = ReadNodeCsv(Path("openb_node_list_gpu_node.csv"));
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  struct Case {
    const char* file;
    size_t tasks;
  };
  for (const Case& c :
       {Case{"openb_pod_list_default.csv", 8152}, Case{"openb_pod_list_multigpu20.csv", 8324}}) {
    auto pods = ReadPodCsv(Path(c.file), fleet->models());
    ASSERT_TRUE(pods.ok()) << pods.status().ToString();
    EXPECT_EQ(pods->size(), c.tasks) << c.file;
  }
}

TEST_F(BundledTraceTest, TheFiveColumnMultiGpuFileHasNoModelConstraints) {
  auto fleet = ReadNodeCsv(Path("openb_node_list_gpu_node.csv"));
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  auto pods = ReadPodCsv(Path("openb_pod_list_multigpu20.csv"), fleet->models());
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  int multi_gpu = 0;
  for (const auto& w : *pods) {
    EXPECT_EQ(w.allowed_models, 0u) << w.name;
    multi_gpu += w.gpu_count > 1 ? 1 : 0;
  }
  EXPECT_GT(multi_gpu, 0);
}

TEST_F(BundledTraceTest, PodTimesMatchThePodRows) {
  auto pods = ReadPodTimes(Path("openb_pod_list_default.csv"));
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ(pods->size(), 8152u);
  for (const PodTimes& t : *pods) {
    ASSERT_GE(t.creation_s, 0);
    if (t.deletion_s >= 0) {
      ASSERT_GE(t.deletion_s, t.creation_s);
    }
  }
  auto multi = ReadPodTimes(Path("openb_pod_list_multigpu20.csv"));
  ASSERT_TRUE(multi.ok()) << multi.status().ToString();
  EXPECT_TRUE(multi->empty());  // the five-column variant carries no times
}

}  // namespace
}  // namespace paladin::trace
