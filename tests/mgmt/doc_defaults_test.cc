// The default paths the documentation states are the ones the code uses: the
// config references (docs/*-config.md), the operator guide and the shipped
// example configs are read from the checkout and compared with what the
// config parser gives when a key is left out. The control sockets are the
// only paths with a default; every other path a config names is required.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "weir/common/toml_checker.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/server.h"

namespace weir::mgmt {
namespace {

std::string ReadCheckoutFile(const std::string& relative) {
  std::ifstream f(std::string(WEIR_TEST_DATA_DIR) + "/../" + relative);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The default column of the table row of `key` ("| `key` | ..."): the third
// in the config references (key, values, default, meaning), the second in
// docs/mgmt.md (key, default, meaning).
std::string DocumentedDefault(const std::string& doc, const std::string& key, size_t column = 2) {
  std::istringstream lines(doc);
  const std::string start = "| `" + key + "` |";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(start, 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() <= column) return "";
    std::string d = cells[column];
    const size_t a = d.find_first_not_of(" `\"");
    const size_t b = d.find_last_not_of(" `\"");
    return a == std::string::npos ? "" : d.substr(a, b - a + 1);
  }
  return "";
}

// The value of the commented-out `# socket = "..."` line of the example's
// `# [control]` table ("" when the example has none).
std::string ExampleControlSocket(const std::string& example) {
  const size_t table = example.find("# [control]\n");
  if (table == std::string::npos) return "";
  const std::string key = "# socket = \"";
  const size_t at = example.find(key, table);
  if (at == std::string::npos) return "";
  const size_t end = example.find('"', at + key.size());
  return example.substr(at + key.size(), end - at - key.size());
}

std::string CodeDefaultControlSocket(std::string_view kind) {
  ControlConfig cfg;
  common::TomlChecker c("test.toml");
  ParseControlTable(c, toml::table{}, kind, &cfg);
  EXPECT_TRUE(c.ok());
  EXPECT_TRUE(cfg.socket_is_default);
  return cfg.socket_path;
}

TEST(DocumentedDefaults, ControlSocketOfEachNodeKind) {
  const std::string guide = ReadCheckoutFile("docs/operator-guide.md");
  ASSERT_FALSE(guide.empty()) << "docs/operator-guide.md not found from " << WEIR_TEST_DATA_DIR;
  for (const std::string kind : {"fastpath", "recursor"}) {
    SCOPED_TRACE(kind);
    const std::string code = CodeDefaultControlSocket(kind);
    EXPECT_EQ(code, DefaultControlSocket(kind)) << "weirctl -C " << kind << " asks another socket";
    const std::string doc = ReadCheckoutFile("docs/" + kind + "-config.md");
    ASSERT_FALSE(doc.empty());
    EXPECT_EQ(DocumentedDefault(doc, "control.socket"), code) << "docs/" << kind << "-config.md";
    EXPECT_NE(guide.find("`" + code + "`"), std::string::npos) << "docs/operator-guide.md";
    const std::string example = ReadCheckoutFile("examples/" + kind + "/" + kind + ".toml");
    ASSERT_FALSE(example.empty());
    const std::string shown = ExampleControlSocket(example);
    if (!shown.empty()) {
      EXPECT_EQ(shown, code) << "examples/" << kind << "/" << kind << ".toml";
    }
  }
}

// Every integer key of weir-mgmt's table in docs/mgmt.md is accepted, and
// its documented default is the one the parser gives when it is left out.
TEST(DocumentedDefaults, EveryNumericMgmtKey) {
  const std::string doc = ReadCheckoutFile("docs/mgmt.md");
  ASSERT_FALSE(doc.empty());
  const std::string base = "[mgmt]\ndatabase = \"mgmt.db\"\ntoken_file = \"mgmt.token\"\n";
  auto defaults = ParseMgmtConfig(base, "mgmt.toml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  const std::pair<std::string, int MgmtConfig::*> keys[] = {
      {"max_connections", &MgmtConfig::max_connections},
      {"push_batch", &MgmtConfig::push_batch},
      {"push_batch_interval_ms", &MgmtConfig::push_batch_interval_ms},
      {"zone_check_ms", &MgmtConfig::zone_check_ms},
  };
  for (const auto& [key, field] : keys) {
    SCOPED_TRACE(key);
    const std::string documented = DocumentedDefault(doc, key, 1);
    ASSERT_FALSE(documented.empty()) << "docs/mgmt.md has no row for " << key;
    EXPECT_EQ(documented, std::to_string((*defaults).*field));
    auto set = ParseMgmtConfig(base + key + " = " + documented + "\n", "mgmt.toml");
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ((*set).*field, (*defaults).*field);
  }
}

}  // namespace
}  // namespace weir::mgmt
