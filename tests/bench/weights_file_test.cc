#include "weights_file.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace weir::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

common::IpAddress Ip(const char* text) {
  common::IpAddress a;
  EXPECT_TRUE(common::ParseIp(text, &a)) << text;
  return a;
}

TEST(ParseWeightsFileTest, ValidFileWithCommentsAndSpaces) {
  auto w = ParseWeightsFile(
      "# name,city,address,weight\n"
      "\n"
      "x.cdn.example., berlin , 192.0.2.1 , 3\n"
      "  x.cdn.example\t,berlin,2001:db8::1,1   # the IPv6 node\r\n"
      "   # indented comment\n"
      "Y.CDN.Example.,munich,192.0.2.1,1000000\n"
      "x.cdn.example.,munich,192.0.2.1,1",  // no final newline
      "w.csv");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 4u);
  dns::NameKey x, y;
  ASSERT_TRUE(dns::NameKeyFromText("x.cdn.example.", &x));
  ASSERT_TRUE(dns::NameKeyFromText("y.cdn.example.", &y));
  EXPECT_EQ((*w)[0].name, x);
  EXPECT_EQ((*w)[0].city, "berlin");
  EXPECT_EQ((*w)[0].address, Ip("192.0.2.1"));
  EXPECT_EQ((*w)[0].weight, 3u);
  EXPECT_EQ((*w)[1].name, x);
  EXPECT_EQ((*w)[1].city, "berlin");
  EXPECT_EQ((*w)[1].address.family, 6);
  EXPECT_EQ((*w)[1].address, Ip("2001:db8::1"));
  EXPECT_EQ((*w)[1].weight, 1u);
  EXPECT_EQ((*w)[2].name, y);  // names are canonical (lower case)
  EXPECT_EQ((*w)[2].city, "munich");
  EXPECT_EQ((*w)[2].weight, 1000000u);
  EXPECT_EQ((*w)[3].city, "munich");
}

TEST(ParseWeightsFileTest, CityNamesKeepTheirInnerSpacesAndCase) {
  auto w = ParseWeightsFile("x.example,  Sao Paulo ,192.0.2.1,2\n", "w.csv");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)[0].city, "Sao Paulo");
}

struct BadCase {
  const char* text;
  const char* prefix;  // "FILE:LINE: "
  const char* reason;
};

TEST(ParseWeightsFileTest, BadLinesNameTheFileAndLine) {
  const BadCase cases[] = {
      {"x.example,berlin,192.0.2.1\n", "w.csv:1: ", "expected 4 fields"},
      {"# c\nx.example,berlin,192.0.2.1,1,5\n", "w.csv:2: ", "expected 4 fields"},
      {"x.example\n", "w.csv:1: ", "expected 4 fields"},
      {"x.example,berlin,192.0.2.1,1,\n", "w.csv:1: ", "expected 4 fields"},
      {"\n\nx..example,berlin,192.0.2.1,1\n", "w.csv:3: ", "invalid name 'x..example'"},
      {",berlin,192.0.2.1,1\n", "w.csv:1: ", "empty name"},
      {" \t,berlin,192.0.2.1,1\n", "w.csv:1: ", "empty name"},
      {"x.example,,192.0.2.1,1\n", "w.csv:1: ", "empty city"},
      {"x.example,  ,192.0.2.1,1\n", "w.csv:1: ", "empty city"},
      {"x.example,berlin,192.0.2.256,1\n", "w.csv:1: ", "invalid address '192.0.2.256'"},
      {"x.example,berlin,192.0.2.0/24,1\n", "w.csv:1: ", "invalid address"},
      {"x.example,berlin,,1\n", "w.csv:1: ", "invalid address"},
      {"x.example,berlin,2001:db8::g,1\n", "w.csv:1: ", "invalid address"},
      {"x.example,berlin,192.0.2.1,0\n", "w.csv:1: ", "weight '0' is not 1..1000000"},
      {"x.example,berlin,192.0.2.1,1000001\n", "w.csv:1: ", "weight '1000001' is not 1..1000000"},
      {"x.example,berlin,192.0.2.1,99999999999999999999999\n", "w.csv:1: ", "is not 1..1000000"},
      {"x.example,berlin,192.0.2.1,abc\n", "w.csv:1: ", "weight 'abc' is not 1..1000000"},
      {"x.example,berlin,192.0.2.1,\n", "w.csv:1: ", "is not 1..1000000"},
      {"x.example,berlin,192.0.2.1,-1\n", "w.csv:1: ", "is not 1..1000000"},
      {"x.example,berlin,192.0.2.1,1.5\n", "w.csv:1: ", "is not 1..1000000"},
      {"x.example,berlin,192.0.2.1,1 2\n", "w.csv:1: ", "is not 1..1000000"},
  };
  for (const BadCase& c : cases) {
    auto w = ParseWeightsFile(c.text, "w.csv");
    ASSERT_FALSE(w.ok()) << c.text;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(Message(w.status()), StartsWith(c.prefix)) << c.text;
    EXPECT_THAT(Message(w.status()), HasSubstr(c.reason)) << c.text;
  }
}

TEST(ParseWeightsFileTest, AnAddressTwiceForOneNameAndCityIsRejected) {
  auto w = ParseWeightsFile(
      "x.example,berlin,192.0.2.1,1\n"
      "X.Example.,berlin,192.0.2.1,2\n",
      "w.csv");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(Message(w.status()), StartsWith("w.csv:2: "));
  EXPECT_THAT(Message(w.status()), HasSubstr("given twice"));
  // The same IPv6 address written another way is the same address.
  w = ParseWeightsFile(
      "x.example,berlin,2001:db8::1,1\n"
      "x.example,berlin,2001:DB8:0:0::1,2\n",
      "w.csv");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(Message(w.status()), StartsWith("w.csv:2: "));
}

TEST(ParseWeightsFileTest, TheSameAddressInAnotherCityOrNameIsFine) {
  auto w = ParseWeightsFile(
      "x.example,berlin,192.0.2.1,1\n"
      "x.example,munich,192.0.2.1,1\n"
      "y.example,berlin,192.0.2.1,1\n"
      "x.example,Berlin,192.0.2.1,1\n",  // cities are case-sensitive names
      "w.csv");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->size(), 4u);
}

TEST(ParseWeightsFileTest, TheRootIsWrittenAsADot) {
  auto w = ParseWeightsFile(".,berlin,192.0.2.1,1\n", "w.csv");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)[0].name.len, 1);
}

TEST(ParseWeightsFileTest, EmptyFileIsAnError) {
  for (const char* text : {"", "\n", "# only comments\n  \n\r\n"}) {
    auto w = ParseWeightsFile(text, "w.csv");
    ASSERT_FALSE(w.ok()) << text;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(w.status()), StartsWith("w.csv: "));
    EXPECT_THAT(Message(w.status()), HasSubstr("no weights"));
  }
}

}  // namespace
}  // namespace weir::bench
