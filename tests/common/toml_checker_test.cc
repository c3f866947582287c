#include "weir/common/toml_checker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/config_file.h"

namespace weir::common {
namespace {

// The parsed table, kept where it was parsed: a copy of a toml++ table
// loses the source positions.
struct Parsed {
  explicit Parsed(std::string_view text) : table(ParseToml(text, "t.toml")) { EXPECT_TRUE(table.ok()); }
  absl::StatusOr<toml::table> table;
};

TEST(TomlChecker, EveryErrorInFileOrder) {
  const Parsed parsed("[a]\nn = \"x\"\nb = 3\nzz = 1\n[c]\nlist = [\"1\", \"no\", 2, \"4\"]\n");
  const toml::table& root = *parsed.table;
  TomlChecker c("t.toml");
  // Checked out of file order on purpose: the report is in file order.
  const toml::table& a = *root.get("a")->as_table();
  std::vector<int> list;
  auto digit = [](const std::string& s) -> absl::StatusOr<int> {
    if (s.size() != 1 || s[0] < '0' || s[0] > '9')
      return absl::InvalidArgumentError("'" + s + "' is no digit");
    return s[0] - '0';
  };
  EXPECT_FALSE(c.List(*root.get("c")->as_table(), "list", &list, digit));
  bool b = false;
  EXPECT_FALSE(c.Bool(a, "b", &b));
  int n = 7;
  EXPECT_FALSE(c.Int(a, "n", &n, 0, 10));
  EXPECT_EQ(n, 7);  // a failed value leaves the default
  EXPECT_TRUE(c.Int(a, "absent", &n, 0, 10));
  c.OnlyKeys(a, "a", {"n", "b"});
  c.FailWhole("a rule of several keys");
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.error_count(), 6u);
  EXPECT_EQ(c.errors(), (std::vector<std::string>{
                            "t.toml:1:1: a rule of several keys",
                            "t.toml:2:5: 'n' must be an integer",
                            "t.toml:3:5: 'b' must be true or false",
                            "t.toml:4:1: unknown key 'zz' in [a]",
                            "t.toml:6:14: 'no' is no digit",
                            "t.toml:6:20: 'list' entries must be strings",
                        }));
  EXPECT_EQ(list, (std::vector<int>{1, 4}));  // the good entries
  EXPECT_EQ(c.error().find('\n'), c.errors()[0].size());
}

TEST(TomlChecker, TheSameErrorIsReportedOnce) {
  const Parsed parsed("[a]\nn = \"x\"\n");
  const toml::table& root = *parsed.table;
  TomlChecker c("t.toml");
  int n = 0;
  c.Int(*root.get("a")->as_table(), "n", &n, 0, 10);
  c.Int(*root.get("a")->as_table(), "n", &n, 0, 10);
  EXPECT_EQ(c.errors(), std::vector<std::string>{"t.toml:2:5: 'n' must be an integer"});
}

TEST(TomlChecker, LinesOfOtherFilesComeAfterTheConfigs) {
  const Parsed parsed("[a]\nn = \"x\"\n");
  const toml::table& root = *parsed.table;
  TomlChecker c("t.toml");
  c.AddLine("map.csv:3: bad");
  int n = 0;
  c.Int(*root.get("a")->as_table(), "n", &n, 0, 10);
  EXPECT_EQ(c.errors(), (std::vector<std::string>{"t.toml:2:5: 'n' must be an integer", "map.csv:3: bad"}));
  EXPECT_EQ(ErrorLines(c.error()), c.errors());
}

}  // namespace
}  // namespace weir::common
