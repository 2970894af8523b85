// The Lucid profile reader on small files written to a temporary directory: profile names, pair
// speeds in both directions, NaN for unmeasured pairs, the median for them, and errors that name
// the missing file or column.
#include "paladin/trace/lucid.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace paladin::trace {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSingleHeader[] = "model,dataset,batchsize,amp,speed,gpu_util,label\n";
constexpr char kPairHeader[] =
    "model1,dataset1,batchsize1,amp1,model2,dataset2,batchsize2,amp2,speed1,speed2\n";

class LucidTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("lucid_") + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& file, const std::string& text) {
    std::ofstream out(dir_ / file, std::ios::binary);
    out << text;
  }
  // Three profiles: resnet50 (0), bert (1), vgg16 (2); resnet50 is listed twice.
  void WriteSingle() {
    Write("single_data.csv", std::string(kSingleHeader) +
                                 "resnet50,ImageNet,64,1,100.5,0.9,0\n"
                                 "bert,SQuAD,32,0,20,0.7,1\n"
                                 "resnet50,ImageNet,64,1,101,0.9,0\n"
                                 "vgg16,CIFAR10,128,0,300,0.5,2\n");
  }
  StatusOr<LucidProfiles> Read() const { return ReadLucidProfiles(dir_.string()); }

  std::filesystem::path dir_;
};

TEST_F(LucidTest, ReadsProfilesAndPairSpeedsBothWays) {
  WriteSingle();
  Write("colocate_info.csv", std::string(kPairHeader) +
                                 "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.8,0.6\n"
                                 "bert,SQuAD,32,0,vgg16,CIFAR10,128,0,0.9,0.8\n"
                                 // measured again: the two measurements are averaged
                                 "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.8,0.5\n"
                                 // never profiled alone: skipped
                                 "gpt2,wiki,8,1,resnet50,ImageNet,64,1,0.3,0.3\n");
  auto p = Read();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_THAT(p->names,
              ElementsAre("resnet50/ImageNet/64/1", "bert/SQuAD/32/0", "vgg16/CIFAR10/128/0"));
  EXPECT_EQ(p->pairs, 3);
  const core::Interference& f = p->interference;
  ASSERT_EQ(f.profiles, 3);
  ASSERT_EQ(f.pair_speed.size(), 9u);
  auto speed = [&](int a, int b) { return f.pair_speed[static_cast<size_t>(a * 3 + b)]; };
  EXPECT_DOUBLE_EQ(speed(0, 1), 0.8);   // resnet50 with bert: speed1
  EXPECT_DOUBLE_EQ(speed(1, 0), 0.55);  // bert with resnet50: speed2, averaged
  EXPECT_DOUBLE_EQ(speed(1, 2), 0.9);
  EXPECT_DOUBLE_EQ(speed(2, 1), 0.8);
  for (auto [a, b] :
       {std::pair{0, 0}, std::pair{0, 2}, std::pair{1, 1}, std::pair{2, 0}, std::pair{2, 2}}) {
    EXPECT_TRUE(std::isnan(speed(a, b))) << a << " with " << b;
  }
  // Measured speeds 0.5 0.6 0.8 0.8 0.8 0.9: the median is 0.8.
  EXPECT_DOUBLE_EQ(f.unmeasured_speed, 0.8);
}

TEST_F(LucidTest, AJobWithItselfTakesBothSpeeds) {
  WriteSingle();
  Write("colocate_info.csv",
        std::string(kPairHeader) + "vgg16,CIFAR10,128,0,vgg16,CIFAR10,128,0,0.7,0.6\n");
  auto p = Read();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->interference.pair_speed[2 * 3 + 2], 0.65);
  EXPECT_TRUE(std::isnan(p->interference.pair_speed[0]));
}

// The median of an even number of speeds (and there always is one: two per pair) is the mean
// of the two middle ones.
TEST_F(LucidTest, TheMedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  WriteSingle();
  Write("colocate_info.csv", std::string(kPairHeader) +
                                 "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.9,0.8\n"
                                 "bert,SQuAD,32,0,vgg16,CIFAR10,128,0,0.7,0.6\n");
  auto p = Read();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->interference.unmeasured_speed, 0.75);  // of 0.6 0.7 0.8 0.9
}

TEST_F(LucidTest, AMissingFileIsNamed) {
  auto p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kIoError);
  EXPECT_THAT(p.status().message(), HasSubstr((dir_ / "single_data.csv").string()));

  WriteSingle();
  p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kIoError);
  EXPECT_THAT(p.status().message(), HasSubstr((dir_ / "colocate_info.csv").string()));
}

TEST_F(LucidTest, AMissingColumnIsNamed) {
  Write("single_data.csv", "model,dataset,batchsize,label\nresnet50,ImageNet,64,0\n");
  Write("colocate_info.csv",
        std::string(kPairHeader) + "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.8,0.6\n");
  auto p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("single_data.csv"), HasSubstr("missing column 'amp'")));

  WriteSingle();
  Write("colocate_info.csv",
        "model1,dataset1,batchsize1,amp1,model2,dataset2,batchsize2,amp2,speed1\n"
        "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.8\n");
  p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("colocate_info.csv"), HasSubstr("missing column 'speed2'")));

  Write("colocate_info.csv",
        "model1,dataset1,batchsize1,amp1,model2,dataset2,amp2,speed1,speed2\n"
        "resnet50,ImageNet,64,1,bert,SQuAD,0,0.8,0.6\n");
  p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("missing column 'batchsize2'"));
}

TEST_F(LucidTest, BadSpeedsNameLineAndField) {
  WriteSingle();
  Write("colocate_info.csv", std::string(kPairHeader) +
                                 "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.8,0.6\n"
                                 "bert,SQuAD,32,0,vgg16,CIFAR10,128,0,fast,0.6\n");
  auto p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), AllOf(HasSubstr("colocate_info.csv:3"),
                                          HasSubstr("field 'speed1'"), HasSubstr("'fast'")));
  Write("colocate_info.csv",
        std::string(kPairHeader) + "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.8,0\n");
  p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), AllOf(HasSubstr("colocate_info.csv:2"),
                                          HasSubstr("field 'speed2'"), HasSubstr("outside")));
}

TEST_F(LucidTest, NoProfilesOrNoMatchingPairsAreErrors) {
  Write("single_data.csv", kSingleHeader);
  Write("colocate_info.csv",
        std::string(kPairHeader) + "resnet50,ImageNet,64,1,bert,SQuAD,32,0,0.8,0.6\n");
  auto p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), AllOf(HasSubstr("single_data.csv"), HasSubstr("no profiles")));

  WriteSingle();
  Write("colocate_info.csv",
        std::string(kPairHeader) + "gpt2,wiki,8,1,resnet50,ImageNet,64,1,0.3,0.3\n");
  p = Read();
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("colocate_info.csv"), HasSubstr("no pair matches a profile")));
}

}  // namespace
}  // namespace paladin::trace
