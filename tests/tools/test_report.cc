// The report's chart labels: plain numbers with SI suffixes, never exponent form.
#include <gtest/gtest.h>

#include "tools/report.h"

using joule::tools::tick_label;

TEST(Report, TickLabelsArePlainNumbersWithSiSuffixes) {
  EXPECT_EQ(tick_label(0), "0");
  EXPECT_EQ(tick_label(38400), "38.4k");
  EXPECT_EQ(tick_label(1280), "1.28k");
  EXPECT_EQ(tick_label(999.6), "1k");  // rounds up into the next scale, never "1e+03"
  EXPECT_EQ(tick_label(13387765111.0), "13.4G");
  EXPECT_EQ(tick_label(1925585), "1.93M");
  EXPECT_EQ(tick_label(535), "535");
  EXPECT_EQ(tick_label(6.5), "6.5");
  EXPECT_EQ(tick_label(0.112), "0.112");
  EXPECT_EQ(tick_label(0.05), "0.05");
  EXPECT_EQ(tick_label(0.0025), "2.5m");
  EXPECT_EQ(tick_label(2.5e-5), "25\u00b5");
  EXPECT_EQ(tick_label(-38400), "-38.4k");
  for (double v : {1e-12, 3e-7, 0.0099, 0.01, 0.999, 999.4, 999.5, 1e5, 9.99e11, 7e14})
    EXPECT_EQ(tick_label(v).find('e'), std::string::npos) << v << " -> " << tick_label(v);
}
