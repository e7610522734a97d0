// The report's chart labels (plain numbers with SI suffixes, never exponent form), its quantities in their own units,
// and the names scripts read (summary.json's keys, emissions.csv's header).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/report.h"
#include "trainer/cost/run_summary.h"

using joule::tools::quantity;
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
  EXPECT_EQ(tick_label(0.0025), "0.0025");  // no milli: "2.5m" on an axis in hours reads as 2.5 milli-hours
  EXPECT_EQ(tick_label(2.5e-5), "0.000025");
  EXPECT_EQ(tick_label(-38400), "-38.4k");
  for (double v : {1e-12, 3e-7, 0.0099, 0.01, 0.999, 999.4, 999.5, 1e5, 9.99e11, 7e14})
    EXPECT_EQ(tick_label(v).find('e'), std::string::npos) << v << " -> " << tick_label(v);
}

// Units and SI prefixes are never combined: the report's bar labels said "4.63m h".
TEST(Report, QuantitiesReadInTheirOwnUnits) {
  EXPECT_EQ(quantity(4.63e-3, "h"), "16.7 s");
  EXPECT_EQ(quantity(0.5, "h"), "30 min");
  EXPECT_EQ(quantity(27.2, "h"), "27.2 h");
  EXPECT_EQ(quantity(0.0046, "kWh"), "4.6 Wh");
  EXPECT_EQ(quantity(1234, "kWh"), "1.23 MWh");
  EXPECT_EQ(quantity(1500, "Wh"), "1.5 kWh");
  EXPECT_EQ(quantity(0.0012, "USD"), "USD 0.0012");
  EXPECT_EQ(quantity(12345.6, "USD"), "USD 12346");
  for (double v : {1e-7, 3e-4, 0.02, 7.0, 5e4})
    for (const char* unit : {"h", "kWh", "USD", "seq/s"}) {
      const std::string q = quantity(v, unit);
      EXPECT_EQ(q.find("m h"), std::string::npos) << q;
      EXPECT_TRUE(q.find("e+") == std::string::npos && q.find("e-") == std::string::npos) << q;  // no exponent form
    }
}

// summary.json's keys (and `joule summary --json`'s) and emissions.csv's header are what scripts read: a key may be
// added with a new schema_version, never renamed or removed (tests/fixtures/summary_schema.txt).
TEST(Report, SummaryKeysAndTheCsvHeaderStayStable) {
  std::ifstream in(std::string(JOULE_TEST_FIXTURES) + "/summary_schema.txt");
  std::map<std::string, std::string> golden;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') golden[line.substr(0, line.find(' '))] = line.substr(line.find(' ') + 1);
  const nlohmann::json j = joule::trainer::RunSummary{}.to_json();
  EXPECT_EQ(j["schema_version"].get<int64_t>(), std::stoll(golden["schema_version"]));
  std::istringstream keys(golden["keys"]);
  for (std::string key; keys >> key;) EXPECT_TRUE(j.contains(key)) << "summary.json lost the key " << key;
  EXPECT_EQ(std::string(joule::trainer::kEmissionsCsvHeader), golden["csv"]);
}
