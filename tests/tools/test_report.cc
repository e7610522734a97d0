// The report's chart labels (plain numbers with SI suffixes, never exponent form), its quantities in their own units,
// and the names scripts read (summary.json's keys, emissions.csv's header).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
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

// Chart axes tick at 1-2-5 steps covering the data, widened to the outer ticks, with one number of decimals along an
// axis: the report's axes were labelled at the extremes and quarters of the range (7.38, 5.99, 4.6, 3.21, 1.82).
TEST(Report, AxisTicksAreOneTwoFiveStepsCoveringTheData) {
  using joule::tools::axis_ticks;
  const auto loss = axis_ticks(1.82, 7.38);
  EXPECT_EQ(loss.labels, (std::vector<std::string>{"0", "2", "4", "6", "8"}));
  const auto accuracy = axis_ticks(0.0987, 0.657);
  EXPECT_EQ(accuracy.labels, (std::vector<std::string>{"0", "0.2", "0.4", "0.6", "0.8"}));
  const auto minutes = axis_ticks(0.0695, 0.254);
  EXPECT_EQ(minutes.labels, (std::vector<std::string>{"0.05", "0.10", "0.15", "0.20", "0.25", "0.30"}));
  const auto sequences = axis_ticks(1500, 2600);
  EXPECT_EQ(sequences.labels, (std::vector<std::string>{"1.4k", "1.6k", "1.8k", "2.0k", "2.2k", "2.4k", "2.6k"}));
  const auto negative = axis_ticks(-3.3, -0.4);
  EXPECT_EQ(negative.labels, (std::vector<std::string>{"-4", "-3", "-2", "-1", "0"}));
  const auto one_point = axis_ticks(5, 5);
  EXPECT_LE(one_point.lo, 5);
  EXPECT_GE(one_point.hi, 5);
  EXPECT_LT(one_point.lo, one_point.hi);

  // Ranges from 1e-6 to 1e9, either sign: a 1-2-5 step, the data covered, at most 6 intervals (at least 2 ticks),
  // distinct labels with one number of decimals each, never exponent form.
  for (double base : {1e-6, 3.7e-4, 0.02, 0.999, 1.0, 42.0, 7777.0, 1.3e6, 9.9e8})
    for (double width : {0.01, 0.3, 1.0, 7.0, 120.0})
      for (double sign : {1.0, -1.0}) {
        const double lo = sign * base, hi = lo + width * base;
        const auto t = axis_ticks(lo, hi);
        const std::string what = std::to_string(lo) + ".." + std::to_string(hi);
        const double mantissa = t.step / std::pow(10.0, std::floor(std::log10(t.step) + 1e-9));
        EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 || std::fabs(mantissa - 5) < 1e-6)
            << what << " step " << t.step;
        EXPECT_LE(t.lo, lo + 1e-9 * std::fabs(t.step)) << what;
        EXPECT_GE(t.hi, hi - 1e-9 * std::fabs(t.step)) << what;
        EXPECT_GE(t.values.size(), 2u) << what;
        EXPECT_LE(t.values.size(), 7u) << what;
        ASSERT_EQ(t.values.size(), t.labels.size());
        std::set<std::string> distinct(t.labels.begin(), t.labels.end());
        EXPECT_EQ(distinct.size(), t.labels.size()) << what << ": " << t.labels.front() << " .. " << t.labels.back();
        size_t decimals = std::string::npos;
        for (const std::string& label : t.labels) {
          EXPECT_EQ(label.find('e'), std::string::npos) << what << ": " << label;
          if (label == "0") continue;
          const size_t dot = label.find('.');
          const std::string digits = label.substr(0, label.find_first_of("kMGT"));
          const size_t d = dot == std::string::npos ? 0 : digits.size() - dot - 1;
          if (decimals == std::string::npos) decimals = d;
          EXPECT_EQ(d, decimals) << what << ": " << label;
        }
      }
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
  EXPECT_EQ(quantity(12345.6, "USD"), "USD 12,346");
  for (double v : {1e-7, 3e-4, 0.02, 7.0, 5e4})
    for (const char* unit : {"h", "kWh", "USD", "seq/s"}) {
      const std::string q = quantity(v, unit);
      EXPECT_EQ(q.find("m h"), std::string::npos) << q;
      EXPECT_TRUE(q.find("e+") == std::string::npos && q.find("e-") == std::string::npos) << q;  // no exponent form
    }
}

// summary.json's keys (and `joule summary --json`'s) and emissions.csv's header are what scripts read: a key may be
// added or renamed with a new schema_version, never removed (tests/fixtures/summary_schema.txt).
TEST(Report, SummaryKeysAndTheCsvHeaderStayStable) {
  std::ifstream in(std::string(JOULE_TEST_FIXTURES) + "/summary_schema.txt");
  std::map<std::string, std::string> golden;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') golden[line.substr(0, line.find(' '))] = line.substr(line.find(' ') + 1);
  const nlohmann::json j = joule::cost::RunSummary{}.to_json();
  EXPECT_EQ(j["schema_version"].get<int64_t>(), std::stoll(golden["schema_version"]));
  std::istringstream keys(golden["keys"]);
  for (std::string key; keys >> key;) EXPECT_TRUE(j.contains(key)) << "summary.json lost the key " << key;
  EXPECT_EQ(std::string(joule::cost::kEmissionsCsvHeader), golden["csv"]);
}

// eval.target_mlm_accuracy's outcome round-trips through summary.json, in the words the summary and report print.
TEST(Report, TargetAccuracyRoundTripsAndIsPrinted) {
  joule::cost::RunSummary written;
  written.status = "finished (reached the target accuracy)";
  written.target_accuracy = joule::cost::TargetAccuracy{0.7, 0.7124, true, 800, 50093, 41.3};
  const auto read = joule::cost::RunSummary::from_json(written.to_json(), "run/summary.json");
  ASSERT_TRUE(read.target_accuracy.has_value());
  EXPECT_TRUE(read.target_accuracy->reached);
  EXPECT_EQ(read.target_accuracy->step, 800);
  EXPECT_EQ(read.target_accuracy->sequences, 50093);
  EXPECT_DOUBLE_EQ(read.target_accuracy->wall_s, 41.3);
  EXPECT_EQ(read.target_accuracy->text(),
            "reached: 0.7124 >= 0.7000 held-out masked-LM accuracy at 50,093 sequences (step 800, 41.3 s of training)");
  written.target_accuracy->reached = false;
  EXPECT_EQ(written.target_accuracy->text().rfind("not reached (aborted): 0.7124 < 0.7000", 0), 0u);
  written.target_accuracy.reset();
  EXPECT_FALSE(joule::cost::RunSummary::from_json(written.to_json(), "x").target_accuracy.has_value());
}

// Schema 4 renamed projection.card_450M to projection.full_pretraining_450M: a summary written before it still reads.
TEST(Report, SummaryOfSchema3ReadsTheOldProjectionKey) {
  joule::cost::RunSummary written;
  written.status = "finished";
  written.full_pretraining = {450000000, 7.1e6, 1e4, 700, 5e3};
  nlohmann::json j = written.to_json();
  ASSERT_TRUE(j["projection"].contains("full_pretraining_450M"));
  j["schema_version"] = 3;
  j["projection"]["card_450M"] = j["projection"]["full_pretraining_450M"];
  j["projection"].erase("full_pretraining_450M");
  const auto read = joule::cost::RunSummary::from_json(j, "old/summary.json");
  EXPECT_EQ(read.full_pretraining.sequences, 450000000);
  EXPECT_DOUBLE_EQ(read.full_pretraining.wall_s, 7.1e6);
  j["projection"].erase("card_450M");
  try {
    joule::cost::RunSummary::from_json(j, "old/summary.json");
    ADD_FAILURE() << "a summary without either key was read";
  } catch (const joule::Error& e) {
    EXPECT_NE(std::string(e.what()).find("old/summary.json"), std::string::npos) << e.what();
  }
}
