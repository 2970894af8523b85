// The project's one size parser and formatter (paladin/base/size.h): why a text is refused, how
// a fraction rounds, and the limits. (tests/quota/region_test.cc checks the everyday forms.)
#include "paladin/base/size.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace paladin::base {
namespace {

TEST(ReadSize, SaysWhyATextIsNotASize) {
  struct Case {
    const char* text;
    SizeError why;
  };
  const Case cases[] = {
      {"", SizeError::kNotANumber},
      {"GiB", SizeError::kNotANumber},
      {"-1", SizeError::kNotANumber},
      {"0x10", SizeError::kNotANumber},
      {"1e9", SizeError::kNotANumber},
      {"1.5.5GiB", SizeError::kNotANumber},
      {"10XB", SizeError::kUnknownUnit},
      {"10 G B", SizeError::kUnknownUnit},
      {"0.0000001", SizeError::kFractionalBytes},
      {"1.5B", SizeError::kFractionalBytes},
      {"8589934592GiB", SizeError::kTooLarge},
      {"99999999999999999999", SizeError::kTooLarge},
  };
  for (const Case& c : cases) {
    uint64_t bytes = 12345;
    EXPECT_EQ(ReadSize(c.text, &bytes), c.why) << "'" << c.text << "'";
    EXPECT_EQ(bytes, 12345U) << "'" << c.text << "': untouched on failure";
  }
}

TEST(ReadSize, AFractionOfAUnitRoundsUpToAWholeByte) {
  uint64_t bytes = 0;
  ASSERT_TRUE(ParseSize("0.1GiB", &bytes));
  EXPECT_EQ(bytes, 107374183U) << "0.1 GiB is 107374182.4 bytes";
  ASSERT_TRUE(ParseSize("0.1KB", &bytes));
  EXPECT_EQ(bytes, 100U) << "exact: no byte added";
  ASSERT_TRUE(ParseSize("1.0", &bytes));
  EXPECT_EQ(bytes, 1U) << "a whole number of bytes written with a point";
  ASSERT_TRUE(ParseSize("0.0000000000000000001TiB", &bytes));
  EXPECT_EQ(bytes, 1U) << "a digit past the 18th still asks for a part of a byte";
}

TEST(ReadSize, TheLargestSizeIsTheLargestSignedByteCount) {
  uint64_t bytes = 0;
  ASSERT_TRUE(ParseSize("9223372036854775807", &bytes));
  EXPECT_EQ(bytes, uint64_t{INT64_MAX});
  EXPECT_EQ(ReadSize("9223372036854775808", &bytes), SizeError::kTooLarge);
  EXPECT_EQ(ReadSize("8388608TiB", &bytes), SizeError::kTooLarge);  // 2^63 bytes
}

TEST(FormatSize, EveryOutputReadsBackToWithinItsRounding) {
  for (uint64_t b : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 20, (uint64_t{3} << 30) / 2,
                     uint64_t{1} << 40, (uint64_t{1} << 50) + 12345}) {
    uint64_t back = 0;
    ASSERT_TRUE(ParseSize(FormatSize(b), &back)) << FormatSize(b);
    const double error = static_cast<double>(back > b ? back - b : b - back);
    EXPECT_LE(error, 0.005 * static_cast<double>(b) + 1) << FormatSize(b);
  }
}

}  // namespace
}  // namespace paladin::base
