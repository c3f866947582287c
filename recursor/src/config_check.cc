// The whole check of a weir-recursor config, shared by --check and the
// start: the file itself (config.cc), then what Server::Start reads and
// hands to libunbound. libunbound reads root hints and trust anchors only
// when it resolves the first name, and then fails every query; they are
// checked here, before anything starts.
#include <arpa/inet.h>

#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "front_cookies.h"
#include "weir/common/config_file.h"
#include "weir/common/line_errors.h"
#include "weir/common/text.h"
#include "weir/mgmt/node_config.h"
#include "weir/recursor/config.h"

namespace weir::recursor {

namespace {

using common::Cat;

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

// The records of a zone file (master file format, RFC 1035 5), read only as
// far as this check needs: each record's type, its first rdata word and
// its line. Comments, directives and parentheses are understood;
// everything else of the format is left to libunbound.
struct ZoneRecord {
  int line;
  std::string type;  // upper case
  std::string rdata;
};

std::vector<ZoneRecord> ScanZone(std::string_view text, common::LineErrors* errors) {
  std::vector<ZoneRecord> out;
  std::vector<std::string_view> words;
  int depth = 0, record_line = 0;
  bool owner_given = false;
  int line_no = 0;
  auto finish = [&] {
    if (words.empty()) return;
    size_t i = owner_given ? 1 : 0;
    // TTL and class, in either order, before the type.
    for (int k = 0; k < 2 && i < words.size(); ++k) {
      const std::string w = Upper(words[i]);
      const bool ttl = std::isdigit(static_cast<unsigned char>(w[0])) != 0;
      if (ttl || w == "IN" || w == "CH" || w == "HS" || w == "CS") ++i;
    }
    if (i + 1 >= words.size()) {
      errors->Add(record_line, "not a resource record (owner, TTL, class, type and data)");
    } else {
      out.push_back({record_line, Upper(words[i]), std::string(words[i + 1])});
    }
    words.clear();
  };
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (const size_t semi = line.find(';'); semi != std::string_view::npos) line = line.substr(0, semi);
    if (depth == 0) {
      if (common::Trim(line).empty()) continue;
      if (line.front() == '$') continue;  // $ORIGIN, $TTL, $INCLUDE
      owner_given = line.front() != ' ' && line.front() != '\t';
      record_line = line_no;
    }
    size_t at = 0;
    while (at < line.size()) {
      const char ch = line[at];
      if (ch == ' ' || ch == '\t' || ch == '\r') {
        ++at;
      } else if (ch == '(' || ch == ')') {
        depth += ch == '(' ? 1 : -1;
        ++at;
      } else {
        const size_t end = line.find_first_of(" \t\r()", at);
        words.push_back(line.substr(at, end - at));
        at = end == std::string_view::npos ? line.size() : end;
      }
    }
    if (depth < 0) {
      errors->Add(line_no, "')' without '('");
      depth = 0;
    }
    if (depth == 0) finish();
  }
  if (depth > 0) errors->Add(record_line, "'(' is never closed");
  finish();
  return out;
}

// libunbound's root-hints: the root's name servers and their addresses.
void CheckRootHints(common::TomlChecker& c, const common::NamedFile& file) {
  std::optional<std::string> text = common::ReadNamedFile(c, file);
  if (!text) return;
  common::LineErrors errors;
  bool ns = false, address = false;
  for (const ZoneRecord& r : ScanZone(*text, &errors)) {
    if (r.type == "NS") ns = true;
    if (r.type == "A" || r.type == "AAAA") {
      unsigned char buf[16];
      if (inet_pton(r.type == "A" ? AF_INET : AF_INET6, r.rdata.c_str(), buf) != 1) {
        errors.Add(r.line, Cat("'", r.rdata, "' is not an IPv", r.type == "A" ? "4" : "6", " address"));
      } else {
        address = true;
      }
    }
  }
  if (!ns) errors.Add(0, "no NS record: root hints name the root's name servers");
  if (!address) errors.Add(0, "no address (A or AAAA) record for the root's name servers");
  for (const std::string& l : errors.Render(file.path)) c.AddLine(l);
}

// ub_ctx_add_ta_file: DS or DNSKEY records of the trust anchors.
void CheckTrustAnchor(common::TomlChecker& c, const common::NamedFile& file) {
  std::optional<std::string> text = common::ReadNamedFile(c, file);
  if (!text) return;
  common::LineErrors errors;
  bool anchor = false;
  for (const ZoneRecord& r : ScanZone(*text, &errors))
    anchor = anchor || r.type == "DS" || r.type == "DNSKEY";
  if (!anchor) errors.Add(0, "no DS or DNSKEY record: a trust anchor file holds the anchors' records");
  for (const std::string& l : errors.Render(file.path)) c.AddLine(l);
}

}  // namespace

absl::StatusOr<RecursorConfig> LoadAndCheckConfig(const std::string& path) {
  auto cfg = LoadConfig(path);
  absl::Status all =
      common::CheckNamedFiles(path, cfg.status(), [&](common::TomlChecker& c, const toml::table& root) {
        // With [mgmt] and a stored snapshot the tags come from the snapshot:
        // the tag file is not read then.
        const bool from_snapshot = mgmt::CheckNodeMgmtFiles(c, root, path);
        if (auto file = common::FindNamedFile(root, "tags.file", path); file && !from_snapshot)
          mgmt::CheckTagFile(c, *file);
        if (auto file = common::FindNamedFile(root, "resolver.root_hints", path)) CheckRootHints(c, *file);
        if (auto file = common::FindNamedFile(root, "resolver.trust_anchor", path))
          CheckTrustAnchor(c, *file);
        if (auto file = common::FindNamedFile(root, "server.cookie_secret_file", path)) {
          if (std::optional<std::string> text = common::ReadNamedFile(c, *file)) {
            auto secrets = ParseCookieSecrets(*text, file->path);
            if (!secrets.ok()) c.AddLine(std::string(secrets.status().message()));
          }
        }
      });
  if (!all.ok()) return all;
  return cfg;
}

}  // namespace weir::recursor
