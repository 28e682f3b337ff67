// Every code of every small float decodes to the value docs/formats.md "Small floats" gives it.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/formats.h"

using namespace shardq;

TEST(Formats, E2M1AllSixteenCodes) {
  const float expected[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int code = 0; code < 16; ++code) {
    EXPECT_EQ(e2m1_to_float(uint8_t(code)), expected[code]) << code;
    EXPECT_EQ(std::signbit(e2m1_to_float(uint8_t(code))), code >= 8) << code;
  }
}

TEST(Formats, E4M3AllCodes) {
  for (int code = 0; code < 256; ++code) {
    const float value = e4m3_to_float(uint8_t(code));
    const int exponent = (code >> 3) & 0xF, mantissa = code & 7;
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    const double magnitude = exponent == 0 ? mantissa * std::pow(2.0, -9)
                                           : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
    EXPECT_EQ(double(value), (code & 0x80) ? -magnitude : magnitude) << code;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
}

TEST(Formats, E8M0AllCodes) {
  for (int code = 0; code < 255; ++code) EXPECT_EQ(double(e8m0_to_float(uint8_t(code))), std::pow(2.0, code - 127)) << code;
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
}
