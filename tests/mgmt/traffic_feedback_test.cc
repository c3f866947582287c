#include "weir/mgmt/traffic_feedback.h"

#include <gtest/gtest.h>

#include <string>

namespace weir::mgmt {
namespace {

std::vector<std::string> Errors(const common::LineErrors& e) { return e.Render("traffic.csv"); }

TEST(TrafficFeedback, CsvLinesOfOneWindowMakeOneSample) {
  common::LineErrors errors;
  auto s = ParseTrafficCsv(
      "# window_start, window_end, name, partition, address, weight, traffic\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, CDN.Example.net, beijing, 192.0.2.1, 1, 1520000\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net., beijing, 2001:DB8::0:1, 3, 2.5e6\n"
      "\n"
      "1796464800, 1796468400, cdn.example.net, shanghai, 192.0.2.1, 1, 0\n",
      &errors);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  const TrafficSample& a = (*s)[0];
  EXPECT_EQ(a.key.name, "cdn.example.net.");
  EXPECT_EQ(a.key.partition, "beijing");
  EXPECT_EQ(a.window_start, 1796464800u);  // 2026-12-05T10:00:00Z
  EXPECT_EQ(a.window_end, 1796468400u);
  ASSERT_EQ(a.addresses.size(), 2u);
  EXPECT_EQ(a.addresses[1].address, "2001:db8::1");
  EXPECT_EQ(a.addresses[1].weight, 3u);
  EXPECT_DOUBLE_EQ(a.addresses[1].traffic, 2.5e6);
  EXPECT_EQ((*s)[1].key.partition, "shanghai");
  EXPECT_DOUBLE_EQ((*s)[1].addresses[0].traffic, 0);
}

TEST(TrafficFeedback, EveryBadCsvLineIsNamed) {
  common::LineErrors errors;
  auto s = ParseTrafficCsv(
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.1, 1, 10\n"
      "yesterday, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.2, 1, 10\n"
      "2026-12-05T11:00:00Z, 2026-12-05T10:00:00Z, cdn.example.net, beijing, 192.0.2.2, 1, 10\n"
      "2026-12-05T10:00:00Z, 2026-12-07T10:00:00Z, cdn.example.net, beijing, 192.0.2.2, 1, 10\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, bad..name, beijing, 192.0.2.2, 1, 10\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, bei jing, 192.0.2.2, 1, 10\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.300, 1, 10\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.2, 0, 10\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.2, 1, -1\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.2, 1, nan\n"
      "2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.1, 2, 10\n"
      "only,three,fields\n",
      &errors);
  ASSERT_FALSE(s.ok());
  const std::vector<std::string> e = Errors(errors);
  ASSERT_EQ(e.size(), 11u) << ::testing::PrintToString(e);
  EXPECT_EQ(e[0], "traffic.csv:2: window_start 'yesterday' is not RFC 3339 or Unix seconds");
  EXPECT_EQ(e[1], "traffic.csv:3: the window must end after it starts, within a day");
  EXPECT_EQ(e[2], "traffic.csv:4: the window must end after it starts, within a day");
  EXPECT_EQ(e[3], "traffic.csv:5: bad name 'bad..name'");
  EXPECT_EQ(e[4], "traffic.csv:6: bad partition 'bei jing'");
  EXPECT_EQ(e[5], "traffic.csv:7: bad address '192.0.2.300'");
  EXPECT_EQ(e[6], "traffic.csv:8: weight '0' must be 1..65535");
  EXPECT_EQ(e[7], "traffic.csv:9: traffic must be a number >= 0");
  EXPECT_EQ(e[8], "traffic.csv:10: traffic must be a number >= 0");
  EXPECT_EQ(e[9], "traffic.csv:11: address 192.0.2.1 listed twice in one sample (first at line 1)");
  EXPECT_EQ(e[10],
            "traffic.csv:12: expected 7 fields "
            "'window_start,window_end,name,partition,address,weight,traffic', got 3");
}

TEST(TrafficFeedback, JsonIsTheSameSamples) {
  common::LineErrors errors;
  auto s = ParseTrafficJson(R"({"samples": [{"window_start": "2026-12-05T10:00:00Z", "window_end": 1796468400,
      "name": "cdn.example.net", "partition": "beijing",
      "addresses": [{"address": "192.0.2.1", "weight": 1, "traffic": 1520000},
                    {"address": "2001:db8::1", "weight": "3", "traffic": 2.5e6}]}]})",
                            &errors);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ((*s)[0].window_start, 1796464800u);
  EXPECT_EQ((*s)[0].addresses[1].weight, 3u);
}

TEST(TrafficFeedback, EveryBadJsonElementIsNamed) {
  common::LineErrors errors;
  auto s = ParseTrafficJson(R"({"samples": [
      {"window_start": 1796464800, "window_end": 1796468400, "name": "cdn.example.net", "partition": "beijing",
       "addresses": [{"address": "192.0.2.1", "weight": 1, "traffic": 1},
                     {"address": "192.0.2.1", "weight": 1, "traffic": 1},
                     {"address": "192.0.2.2", "weight": 70000, "traffic": 1},
                     {"address": "192.0.2.3", "traffic": 1}]},
      {"window_start": 1796464800, "name": "x"},
      7]})",
                            &errors);
  ASSERT_FALSE(s.ok());
  const std::vector<std::string> e = Errors(errors);
  ASSERT_EQ(e.size(), 5u) << ::testing::PrintToString(e);
  EXPECT_EQ(e[0],
            "traffic.csv: samples[0].addresses[1]: address 192.0.2.1 listed twice in one sample (first at "
            "samples[0].addresses[0])");
  EXPECT_EQ(e[1], "traffic.csv: samples[0].addresses[2]: weight '70000' must be 1..65535");
  EXPECT_EQ(e[2], "traffic.csv: samples[0].addresses[3]: expected address, weight and traffic");
  EXPECT_NE(e[3].find("samples[1]: expected"), std::string::npos);
  EXPECT_NE(e[4].find("samples[2]: expected"), std::string::npos);
  for (const char* bad : {"", "[]", "{\"samples\": 1}", "{\"samples\": [", "null"}) {
    common::LineErrors again;
    EXPECT_FALSE(ParseTrafficJson(bad, &again).ok()) << bad;
    EXPECT_FALSE(again.empty());
  }
}

TEST(TrafficFeedback, AcceptedSamplesFeedTheCalibrator) {
  common::LineErrors errors;
  auto s = ParseTrafficCsv(
      "1796464800,1796468400,cdn.example.net,beijing,192.0.2.1,1,1000000\n"
      "1796464800,1796468400,cdn.example.net,beijing,192.0.2.2,3,2000000\n",
      &errors);
  ASSERT_TRUE(s.ok());
  Calibrator c({});
  for (const TrafficSample& x : *s)
    ASSERT_TRUE(c.Observe(x.key, x.addresses, x.window_end, x.window_end).ok());
  c.Step(1796468400);
  // B carried 2/3 of the traffic where 3/4 was wanted: its factor goes up.
  EXPECT_GT(c.Factor({"cdn.example.net.", "beijing"}, "192.0.2.2"), 1.0);
  EXPECT_LT(c.Factor({"cdn.example.net.", "beijing"}, "192.0.2.1"), 1.0);
}

}  // namespace
}  // namespace weir::mgmt
