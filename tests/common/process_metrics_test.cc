#include "weir/common/process_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace weir::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A /proc/self/stat line of a real process, its command name made awkward:
// spaces and a ')' inside the parentheses.
constexpr std::string_view kSelfStat =
    "4242 (weir (x) y) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 130 0 0 20 0 3 0 123456 "
    "104857600 2560 18446744073709551615 1 1 0 0 0 0 0 4096 17640 0 0 0 17 1 0 0 0 0 0\n";
constexpr std::string_view kProcStat =
    "cpu  1 2 3 4 5 6 7 0 0 0\nintr 1234\nctxt 99\nbtime 1700000000\nprocesses 5\n";

TEST(ProcSelfStatTest, ReadsTheFieldsAfterTheLastParenthesis) {
  auto s = ParseProcSelfStat(kSelfStat);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->utime_ticks, 250u);
  EXPECT_EQ(s->stime_ticks, 130u);
  EXPECT_EQ(s->starttime_ticks, 123456u);
  EXPECT_EQ(s->vsize_bytes, 104857600u);
  EXPECT_EQ(s->rss_pages, 2560u);
}

TEST(ProcSelfStatTest, ShortOrBadTextIsAnError) {
  EXPECT_FALSE(ParseProcSelfStat("").ok());
  EXPECT_FALSE(ParseProcSelfStat("4242 weir S 1 2 3").ok());  // no parentheses
  EXPECT_FALSE(ParseProcSelfStat("4242 (weir) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 130").ok());
  EXPECT_FALSE(ParseProcSelfStat("4242 (weir) S").ok());
  // A field that should be a number is not.
  std::string bad(kSelfStat);
  bad.replace(bad.find(" 250 "), 5, " 2x0 ");
  EXPECT_FALSE(ParseProcSelfStat(bad).ok());
  // Truncated in the middle of the memory fields.
  EXPECT_FALSE(ParseProcSelfStat(kSelfStat.substr(0, kSelfStat.find("104857600") + 4)).ok());
}

TEST(ProcBootTimeTest, FindsTheBtimeLine) {
  auto b = ParseProcBootTime(kProcStat);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 1700000000u);
  EXPECT_FALSE(ParseProcBootTime("cpu 1 2 3\n").ok());
  EXPECT_FALSE(ParseProcBootTime("btime soon\n").ok());
  EXPECT_FALSE(ParseProcBootTime("").ok());
  EXPECT_FALSE(ParseProcBootTime("xbtime 5\n").ok());
}

TEST(ProcessSampleTest, ComputesSecondsAndBytes) {
  const ProcessSample s = ProcessSampleFrom(kSelfStat, kProcStat, 100, 4096);
  ASSERT_TRUE(s.cpu_seconds && s.resident_bytes && s.virtual_bytes && s.start_time_seconds);
  EXPECT_DOUBLE_EQ(*s.cpu_seconds, 3.8);
  EXPECT_EQ(*s.resident_bytes, 2560u * 4096u);
  EXPECT_EQ(*s.virtual_bytes, 104857600u);
  EXPECT_DOUBLE_EQ(*s.start_time_seconds, 1700000000.0 + 1234.56);
}

TEST(ProcessSampleTest, BadTextLeavesItsFamiliesOut) {
  // A bad /proc/stat loses the start time only.
  ProcessSample s = ProcessSampleFrom(kSelfStat, "garbage", 100, 4096);
  EXPECT_TRUE(s.cpu_seconds.has_value());
  EXPECT_FALSE(s.start_time_seconds.has_value());
  // A bad /proc/self/stat loses everything read from it.
  s = ProcessSampleFrom("4242 (weir) S 1", kProcStat, 100, 4096);
  EXPECT_FALSE(s.cpu_seconds || s.resident_bytes || s.virtual_bytes || s.start_time_seconds);
  PrometheusWriter w;
  AddProcessMetrics(w, s);
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "");
}

TEST(ProcessMetricsTest, ThisProcessHasEveryFamily) {
  PrometheusWriter w;
  AddProcessMetrics(w);
  AddBuildInfo(w, "weir-test");
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  for (const char* family :
       {"# TYPE process_cpu_seconds_total counter\n", "# TYPE process_resident_memory_bytes gauge\n",
        "# TYPE process_virtual_memory_bytes gauge\n", "# TYPE process_open_fds gauge\n",
        "# TYPE process_max_fds gauge\n", "# TYPE process_start_time_seconds gauge\n",
        "# TYPE weir_build_info gauge\n"}) {
    EXPECT_THAT(*text, HasSubstr(family));
  }
  EXPECT_THAT(*text, HasSubstr("weir_build_info{daemon=\"weir-test\",version=\""));
  EXPECT_THAT(*text, Not(HasSubstr("version=\"\"")));
  EXPECT_THAT(*text, Not(HasSubstr("commit=\"\"")));
  EXPECT_FALSE(BuildVersion().empty());
  EXPECT_FALSE(BuildCommit().empty());
}

}  // namespace
}  // namespace weir::common
