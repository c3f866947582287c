// The weir-mgmt requests, in one table: weir-mgmt dispatches on it and
// checks argument counts with it, labels `weir_mgmt_requests_total` with its
// verbs (every series exported from the start), and weirctl builds its
// subcommands and their help from it (docs/mgmt.md, docs/metrics.md).
// Adding a request means adding a row here; nothing else lists them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace weir::mgmt {

enum class Command : uint8_t {
  kTagAdd,
  kTagRm,
  kTagEdit,
  kTagImport,
  kTagLs,
  kCitymapImport,
  kCitymapAdd,
  kCitymapRm,
  kCitymapLs,
  kStatus,
  kNodes,
  kNodeRm,
  kAudit,
  kNodeControl,
  kAccountAdd,
  kAccountRotate,
  kAccountRetire,
  kAccountSet,
  kAccountRm,
  kAccountLs,
  kTrafficImport,
  kCalibrationLs,
};

struct CommandSpec {
  Command id;
  // On the wire (the request's verb) and the metric's `command` label.
  std::string_view verb;
  // The weirctl words ("tag add"); empty for a request weirctl sends on
  // behalf of other commands (node-control: `--all`).
  std::string_view weirctl;
  // weirctl's one-line help.
  std::string_view help;
  // Arguments the request carries after the verb.
  uint8_t min_args;
  uint8_t max_args;
};

inline constexpr uint8_t kAnyArgs = 255;

inline constexpr std::array<CommandSpec, 22> kCommands = {{
    {Command::kTagAdd, "tag-add", "tag add", "add a tag: SUFFIX [weight=on] [ecs=on] [policy=...] ...", 1, 2},
    {Command::kTagRm, "tag-rm", "tag rm", "remove the tag of a suffix", 1, 1},
    {Command::kTagEdit, "tag-edit", "tag set", "change keys of a suffix's tag in place: SUFFIX key=value ...",
     2, kAnyArgs},
    {Command::kTagImport, "tag-import", "tag import", "replace every tag with a tags file", 1, 2},
    {Command::kTagLs, "tag-ls", "tag ls", "list the tags", 0, 0},
    {Command::kCitymapImport, "citymap-import", "citymap import", "replace the city map with a CSV file", 1,
     2},
    {Command::kCitymapAdd, "citymap-add", "citymap add", "map one prefix: CIDR CITY [ECS_ADDRESS[/PREFIX]]",
     1, 2},
    {Command::kCitymapRm, "citymap-rm", "citymap rm", "remove the line that maps a prefix: CIDR", 1, 1},
    {Command::kCitymapLs, "citymap-ls", "citymap ls", "print the city map", 0, 0},
    {Command::kStatus, "status", "status", "current version and sizes", 0, 0},
    {Command::kNodes, "nodes", "nodes", "which snapshot version each node runs", 0, 0},
    {Command::kNodeRm, "node-rm", "nodes rm", "forget a retired node (one that is not connected)", 1, 1},
    {Command::kAudit, "audit", "audit", "recent changes", 0, 1},
    {Command::kNodeControl, "node-control", "",
     "a node command (cache, stats, upstreams, partitions) sent to every node (weirctl --all)", 3, kAnyArgs},
    // HTTPDNS accounts: NAME, then key=value (unsigned=on|off, legacy_md5=on|off,
    // rps=N, secret=S). A secret travels only in add/rotate: in the request
    // when the operator gives one, else in the reply (once).
    {Command::kAccountAdd, "account-add", "account add",
     "add an HTTPDNS account: NAME [--unsigned on|off] [--legacy-md5 on|off] [--rps N] [--secret-file FILE]; "
     "prints its secret once",
     1, 5},
    {Command::kAccountRotate, "account-rotate", "account rotate",
     "a new secret for an account (the old one stays live until retire): NAME [--secret-file FILE]", 1, 2},
    {Command::kAccountRetire, "account-retire", "account retire",
     "drop an account's previous secret (the end of a rotation): NAME", 1, 1},
    {Command::kAccountSet, "account-set", "account set",
     "change an account: NAME [--unsigned on|off] [--legacy-md5 on|off] [--rps N]", 2, 4},
    {Command::kAccountRm, "account-rm", "account rm", "remove an HTTPDNS account: NAME", 1, 1},
    {Command::kAccountLs, "account-ls", "account ls",
     "list the HTTPDNS accounts: settings and secret fingerprints (never a secret)", 0, 0},
    // Traffic-share calibration (docs/calibration.md): the feedback file's
    // text and its name.
    {Command::kTrafficImport, "traffic-import", "traffic import",
     "feed the CDN's observed traffic to the weight calibration: a CSV or JSON file", 1, 2},
    {Command::kCalibrationLs, "calibration-ls", "calibration ls",
     "the calibration's factors per name, partition and address: [NAME]", 0, 1},
}};

// The `command` label of a verb no row has, and of a request too short to
// carry one.
inline constexpr std::string_view kUnknownCommand = "unknown";
inline constexpr std::string_view kInvalidCommand = "invalid";

// The row of `verb`, or nullptr.
constexpr const CommandSpec* FindCommand(std::string_view verb) {
  for (const CommandSpec& c : kCommands) {
    if (c.verb == verb) return &c;
  }
  return nullptr;
}

constexpr const CommandSpec& SpecOf(Command id) { return kCommands[static_cast<size_t>(id)]; }

// Every row at the index of its id, every verb once.
consteval bool CommandTableIsConsistent() {
  for (size_t i = 0; i < kCommands.size(); ++i) {
    if (static_cast<size_t>(kCommands[i].id) != i || kCommands[i].verb.empty()) return false;
    if (kCommands[i].min_args > kCommands[i].max_args) return false;
    for (size_t j = 0; j < i; ++j) {
      if (kCommands[j].verb == kCommands[i].verb) return false;
      if (!kCommands[i].weirctl.empty() && kCommands[j].weirctl == kCommands[i].weirctl) return false;
    }
  }
  return true;
}
static_assert(CommandTableIsConsistent());

}  // namespace weir::mgmt
