// weirctl: the operator's command line for weir-mgmt (docs/behaviour.md#management) and
// for a node's control channel (mgmt/include/weir/mgmt/control.h).
// Exit status: 0 done, 1 mgmt or the node refused the request (the reason on
// stderr) or, with --all, some node failed, 2 usage, file or connection error,
// 3 a conflict (another weir-mgmt instance committed first: nothing changed).
// dist/man/weirctl.exit says the same in weirctl(1).
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/process_metrics.h"
#include "weir/common/socket_address.h"
#include "weir/mgmt/commands.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/node_client.h"
#include "weir/mgmt/protocol.h"
#include "weir/mgmt/structured_reply.h"
#include "weir/net/socket.h"
#include "weir/net/tls.h"

namespace {

using weir::mgmt::Message;
using weir::mgmt::MsgType;

// --json: errors are a JSON object on stdout too, so a script reads one
// stream: {"error": "...", "exit_code": N}.
bool g_json = false;

// The error object --json prints.
std::string ErrorJson(const std::string& msg, int code) {
  return weir::mgmt::StructuredReply::DumpJson(weir::mgmt::Json{{"error", msg}, {"exit_code", code}});
}

// Reports a failure (on stderr, and as JSON on stdout with --json) and
// returns its exit code.
int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "weirctl: %s\n", msg.c_str());
  if (g_json) std::printf("%s\n", ErrorJson(msg, code).c_str());
  return code;
}

// A usage, file or connection error: exit 2.
int Die(const std::string& msg) { return Fail(2, msg); }

// --server: an address ("192.0.2.1:8054", "[2001:db8::1]:8054") or a host
// name with an optional port ("mgmt.example.net:8054"), every address the
// name has, in the resolver's order.
absl::StatusOr<std::vector<weir::common::SocketAddress>> ResolveOne(const std::string& text) {
  auto literal = weir::common::SocketAddress::Parse(text, 8054);
  if (literal.ok()) return std::vector<weir::common::SocketAddress>{*literal};
  std::string host = text, port = "8054";
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos && text.find(':') == colon) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      port.size() > 5 || std::stoi(port) == 0 || std::stoi(port) > 65535) {
    return absl::InvalidArgumentError("'" + text + "' is not ADDRESS[:PORT] or HOST[:PORT]");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return absl::NotFoundError("cannot resolve '" + host + "': " + gai_strerror(rc));
  std::vector<weir::common::SocketAddress> out;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) {
      out.push_back(weir::common::SocketAddress::FromSockaddr(a->ai_addr, a->ai_addrlen));
    }
  }
  freeaddrinfo(res);
  if (out.empty()) return absl::NotFoundError("'" + host + "' has no IPv4 or IPv6 address");
  return out;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// A comma-separated list of weir-mgmt instances (several share one etcd
// store): every address of each, tried in the order given.
absl::StatusOr<std::vector<weir::common::SocketAddress>> ResolveServer(const std::string& text) {
  std::vector<weir::common::SocketAddress> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    auto one = ResolveOne(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!one.ok()) return one.status();
    out.insert(out.end(), one->begin(), one->end());
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

int g_timeout_ms = 10000;

// A connected stream to the first of `servers` that accepts, or an error.
absl::StatusOr<int> ConnectTcp(const std::vector<weir::common::SocketAddress>& servers) {
  std::string why;
  for (const weir::common::SocketAddress& server : servers) {
    const int fd = socket(server.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
    errno = weir::net::ConnectWithin(fd, server.sa(), server.len, g_timeout_ms);
    if (errno == 0) return fd;
    why += (why.empty() ? "" : "; ") + server.ToString() + ": " + std::strerror(errno);
    close(fd);
  }
  return absl::UnavailableError(why);
}

absl::StatusOr<int> ConnectUnix(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) return absl::InvalidArgumentError(path + ": path too long");
  std::memcpy(sa.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
  if (const int err =
          weir::net::ConnectWithin(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa), g_timeout_ms);
      err != 0) {
    const std::string why = path + ": " + std::strerror(err);
    close(fd);
    return absl::UnavailableError(why);
  }
  return fd;
}

// Sends one request on `fd` (connected to `peer`), waits for the reply
// (timeout_ms overall). A "partial" reply (weirctl --all: some nodes failed)
// is printed like a success and exits 1.
constexpr int kConflictExit = 3;

// --tls-cert/--tls-key/--tls-ca: weir-mgmt is spoken to over TLS with this
// client certificate (docs/mgmt.md#tls); null: plain TCP.
std::unique_ptr<weir::net::TlsClientContext> g_tls;
SSL* g_ssl = nullptr;  // the connection of Call, when TLS

// The TLS handshake on a connected, blocking `fd`, bounded by the timeout.
absl::Status StartTls(int fd) {
  timeval tv{g_timeout_ms / 1000, (g_timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  g_ssl = g_tls->NewConnection(fd);
  if (g_ssl == nullptr) return absl::InternalError("TLS: " + weir::net::TlsErrors());
  ERR_clear_error();
  if (SSL_connect(g_ssl) != 1) return absl::UnavailableError(weir::net::TlsHandshakeError(g_ssl));
  return absl::OkStatus();
}

void CloseCall(int fd) {
  if (g_ssl != nullptr) {
    SSL_free(g_ssl);
    g_ssl = nullptr;
  }
  close(fd);
}

int Call(int fd, const std::string& peer, const Message& req, bool json, int timeout_ms) {
  std::string out = weir::mgmt::Encode(req);
  size_t off = 0;
  auto close = [](int fd) { CloseCall(fd); };
  if (g_tls != nullptr) {
    if (absl::Status st = StartTls(fd); !st.ok()) {
      close(fd);
      return Die("TLS handshake with " + peer + " failed: " + std::string(st.message()));
    }
  }
  // What OpenSSL said when a TLS read or write failed ("" otherwise).
  std::string tls_error;
  auto transfer = [&](bool write, void* buf, size_t len) -> ssize_t {
    if (g_ssl == nullptr) return write ? send(fd, buf, len, MSG_NOSIGNAL) : recv(fd, buf, len, 0);
    ERR_clear_error();
    size_t n = 0;
    const int ret = write ? SSL_write_ex(g_ssl, buf, len, &n) : SSL_read_ex(g_ssl, buf, len, &n);
    if (ret == 1) return static_cast<ssize_t>(n);
    if (SSL_get_error(g_ssl, ret) == SSL_ERROR_ZERO_RETURN) return 0;
    tls_error = weir::net::TlsHandshakeError(g_ssl);
    return -1;
  };
  while (off < out.size()) {
    ssize_t n = transfer(true, out.data() + off, out.size() - off);
    if (n < 0 && errno == EINTR && tls_error.empty()) continue;
    if (n <= 0) {
      close(fd);
      return Die(tls_error.empty() ? std::string("send: ") + std::strerror(errno) : "TLS: " + tls_error);
    }
    off += static_cast<size_t>(n);
  }
  weir::mgmt::FrameReader reader;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const bool buffered = g_ssl != nullptr && SSL_has_pending(g_ssl) == 1;
    if (!buffered && poll(&p, 1, timeout_ms) <= 0) {
      close(fd);
      return Die("no reply from " + peer + " within " + std::to_string(timeout_ms) + " ms");
    }
    ssize_t n = transfer(false, buf, sizeof(buf));
    if (n < 0 && errno == EINTR && tls_error.empty()) continue;
    if (n <= 0) {
      close(fd);
      if (!tls_error.empty()) return Die(peer + " refused the TLS session: " + tls_error);
      return Die(peer + " closed the connection without a reply");
    }
    reader.Feed(std::string_view(buf, static_cast<size_t>(n)));
    auto m = reader.Next();
    if (!m.ok()) {
      close(fd);
      return Die("bad reply from " + peer + ": " + std::string(m.status().message()));
    }
    if (!m->has_value()) continue;
    close(fd);
    const Message& r = **m;
    // weir-mgmt refused the request itself (a bad token, a certificate that
    // may not ask): exit 1, as for a refused change (docs/mgmt.md#weirctl).
    if (r.type == MsgType::kError)
      return Fail(1, peer + " refused: " + (r.fields.empty() ? "" : r.fields[0]));
    if (r.type != MsgType::kReply || r.fields.size() != 3) return Die("unexpected reply from " + peer);
    // Another weir-mgmt instance committed first: nothing changed; the same
    // command again is computed against the newer version (--retries).
    if (r.fields[0] == "conflict") return Fail(kConflictExit, r.fields[1]);
    if (r.fields[0] != "ok" && r.fields[0] != "partial") return Fail(1, r.fields[1]);
    std::fputs(json ? (r.fields[2] + "\n").c_str() : r.fields[1].c_str(), stdout);
    // A change that was made but deserves a look (a new tag whose zone no
    // recursor finds): on stderr, the exit status stays 0. --json has them
    // in the document's "warnings".
    if (!json) {
      const weir::mgmt::Json doc = weir::mgmt::ParseNodeJson(r.fields[2]);
      if (doc.is_object() && doc.contains("warnings") && doc["warnings"].is_array()) {
        for (const weir::mgmt::Json& w : doc["warnings"]) {
          if (w.is_string()) std::fprintf(stderr, "weirctl: warning: %s\n", w.get<std::string>().c_str());
        }
      }
    }
    return r.fields[0] == "ok" ? 0 : 1;
  }
}

// --help-all, which weirctl(1) is made of: every command by its full name
// ("nodes rm"), with its arguments and options, the nested ones too (CLI11's
// own lists a command's subcommands one line each).
class EveryCommandFormatter : public CLI::Formatter {
 public:
  std::string make_expanded(const CLI::App* sub) const override {
    std::string path = sub->get_name();
    for (const CLI::App* p = sub->get_parent(); p != nullptr && p->get_parent() != nullptr;
         p = p->get_parent())
      path = p->get_name() + " " + path;
    std::string body =
        make_description(sub) + make_positionals(sub) + make_groups(sub, CLI::AppFormatMode::Sub);
    body = CLI::detail::find_and_replace(body, "\n\n", "\n");
    std::string out = "\n" + path + "\n  " + CLI::detail::find_and_replace(body, "\n", "\n  ");
    out.erase(out.find_last_not_of(' ') + 1);
    for (const CLI::App* nested : sub->get_subcommands({})) out += make_expanded(nested);
    return out;
  }
};

std::string DefaultActor() {
  const char* user = std::getenv("USER");
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  return std::string(user != nullptr ? user : "uid" + std::to_string(getuid())) + "@" + host;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "weirctl: manage weir's domain tags, city map and HTTPDNS accounts through weir-mgmt, and control a "
      "node's cache "
      "(docs/operator-guide.md)"};
  app.formatter(std::make_shared<EveryCommandFormatter>());  // before the subcommands, which inherit it
  app.require_subcommand(1);
  app.fallthrough();  // global options (--json, --control ...) may follow the command too
  app.set_version_flag("--version", weir::common::VersionLine("weirctl"),
                       "print the version, commit and build, and exit");
  // Every subcommand with its options, as weirctl(1) lists them.
  app.set_help_all_flag("--help-all", "print the help of every command and exit");
  std::string server_text = std::getenv("WEIR_MGMT") != nullptr ? std::getenv("WEIR_MGMT") : "127.0.0.1:8054";
  std::string token_file =
      std::getenv("WEIR_MGMT_TOKEN_FILE") != nullptr ? std::getenv("WEIR_MGMT_TOKEN_FILE") : "";
  std::string actor;  // default: DefaultActor(), of the caller, once parsed
  bool json = false;
  int timeout_ms = 10000;
  auto env = [](const char* name) {
    return std::string(std::getenv(name) != nullptr ? std::getenv(name) : "");
  };
  std::string tls_cert = env("WEIR_MGMT_TLS_CERT"), tls_key = env("WEIR_MGMT_TLS_KEY"),
              tls_ca = env("WEIR_MGMT_TLS_CA");
  app.add_option(
      "--tls-cert", tls_cert,
      "weir-mgmt over TLS: this client certificate, PEM, OU=weir-operator (env WEIR_MGMT_TLS_CERT)");
  app.add_option("--tls-key", tls_key, "the client certificate's key (env WEIR_MGMT_TLS_KEY)");
  app.add_option("--tls-ca", tls_ca, "the CA that signs weir-mgmt's certificate (env WEIR_MGMT_TLS_CA)");
  app.add_option("-s,--server", server_text,
                 "weir-mgmt: ADDRESS[:PORT] or HOST[:PORT], or several separated by commas, tried in turn "
                 "(env WEIR_MGMT)")
      ->capture_default_str();
  app.add_option("-t,--token-file", token_file, "file holding the mgmt token (env WEIR_MGMT_TOKEN_FILE)");
  app.add_option("--actor", actor, "name recorded in the audit log (default: user@host of the caller)");
  app.add_flag("--json", json, "print the reply as JSON");
  app.add_option("--timeout-ms", timeout_ms, "reply timeout")->check(CLI::Range(100, 600000));
  int retries = 0;
  app.add_option(
         "--retries", retries,
         "a change refused as a conflict (another weir-mgmt instance committed first, exit 3) is sent "
         "again up to this many times")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  std::string control_text =
      std::getenv("WEIR_CONTROL") != nullptr ? std::getenv("WEIR_CONTROL") : "fastpath";
  bool all = false;
  std::string all_kind;
  app.add_option(
         "-C,--control", control_text,
         "node commands: the node to ask: 'fastpath' or 'recursor' (their default sockets "
         "/run/weir-KIND/control.sock), a unix socket PATH, or ADDRESS:PORT (TCP, needs --token-file) "
         "(env WEIR_CONTROL)")
      ->capture_default_str();
  app.add_flag("--all", all,
               "node commands: ask every node through weir-mgmt (--server), one result per node");
  app.add_option("--kind", all_kind, "with --all: only the nodes of this kind")
      ->check(CLI::IsMember({"fastpath", "recursor"}));

  std::vector<std::string> args;
  std::string verb;
  std::vector<std::string> words;
  std::string file;
  bool replace = false;
  int limit = 50;

  // weir-mgmt's requests: one subcommand per row of the command table.
  CLI::App* tag = app.add_subcommand("tag", "domain tags (docs/behaviour.md#domain-tags)");
  tag->require_subcommand(1);
  CLI::App* cm = app.add_subcommand("citymap", "the city map (CIDR -> city)");
  cm->require_subcommand(1);
  CLI::App* account = app.add_subcommand("account", "HTTPDNS accounts (docs/mgmt.md#httpdns-accounts)");
  account->require_subcommand(1);
  CLI::App* traffic =
      app.add_subcommand("traffic", "traffic feedback for the weight calibration (docs/calibration.md)");
  traffic->require_subcommand(1);
  CLI::App* calibration = app.add_subcommand("calibration", "the weight calibration (docs/calibration.md)");
  calibration->require_subcommand(1);
  std::array<CLI::App*, weir::mgmt::kCommands.size()> sub{};
  for (const weir::mgmt::CommandSpec& spec : weir::mgmt::kCommands) {
    if (spec.weirctl.empty()) continue;
    const std::string words(spec.weirctl);
    const size_t space = words.find(' ');
    CLI::App* parent = space == std::string::npos ? &app : app.get_subcommand(words.substr(0, space));
    sub[static_cast<size_t>(spec.id)] = parent->add_subcommand(
        space == std::string::npos ? words : words.substr(space + 1), std::string(spec.help));
  }
  auto of = [&](weir::mgmt::Command id) { return sub[static_cast<size_t>(id)]; };
  using weir::mgmt::Command;
  of(Command::kTagAdd)->add_option("line", words, "the tag, in the tags file format")->required();
  of(Command::kTagAdd)->add_flag("--replace", replace, "replace the suffix's existing tag");
  of(Command::kTagRm)->add_option("suffix", file, "domain suffix")->required();
  std::string edit_suffix;
  std::vector<std::string> edits;
  of(Command::kTagEdit)->add_option("suffix", edit_suffix, "domain suffix that has a tag")->required();
  of(Command::kTagEdit)->add_option("changes", edits, "key=value: replaces that key, or adds it")->required();
  of(Command::kTagImport)->add_option("file", file, "tags file")->required();
  of(Command::kCitymapImport)->add_option("file", file, "CSV: cidr,city,ecs_address/prefix")->required();
  of(Command::kTrafficImport)
      ->add_option("file", file,
                   "CSV: window_start,window_end,name,partition,address,weight,traffic; or the JSON document")
      ->required();
  std::string cal_name;
  of(Command::kCalibrationLs)->add_option("name", cal_name, "only this name");
  std::string cm_cidr, cm_city, cm_ecs;
  bool cm_replace = false;
  CLI::App* cm_add = of(Command::kCitymapAdd);
  cm_add->add_option("cidr", cm_cidr, "subscriber prefix, e.g. 10.1.0.0/16")->required();
  cm_add->add_option("city", cm_city, "city partition")->required();
  cm_add->add_option("ecs", cm_ecs, "ECS address sent upstream for the city (default: none on this line)");
  cm_add->add_flag("--replace", cm_replace, "replace the prefix's existing line");
  std::string cm_rm_cidr;
  of(Command::kCitymapRm)->add_option("cidr", cm_rm_cidr, "the prefix as mapped")->required();
  std::string rm_node;
  of(Command::kNodeRm)->add_option("node", rm_node, "its node_id")->required();
  of(Command::kAudit)->add_option("--limit", limit, "entries")->check(CLI::Range(1, 100000));
  // HTTPDNS accounts. Each option is sent only when given (set changes only those).
  std::string acc_name, acc_unsigned, acc_md5, acc_rps, acc_secret_file;
  for (Command id : {Command::kAccountAdd, Command::kAccountRotate, Command::kAccountRetire,
                     Command::kAccountSet, Command::kAccountRm}) {
    of(id)->add_option("name", acc_name, "the account: 1..64 of A-Z a-z 0-9 _ . -")->required();
  }
  for (Command id : {Command::kAccountAdd, Command::kAccountSet}) {
    of(id)
        ->add_option("--unsigned", acc_unsigned, "serve requests without a signature (default off)")
        ->check(CLI::IsMember({"on", "off"}));
    of(id)
        ->add_option("--legacy-md5", acc_md5, "accept the legacy md5(host-secret-t) signature (default off)")
        ->check(CLI::IsMember({"on", "off"}));
    of(id)
        ->add_option("--rps", acc_rps,
                     "requests per second for the account on each node (0, the default: no limit)")
        ->check(CLI::Range(uint64_t{0}, uint64_t{UINT32_MAX}));
  }
  for (Command id : {Command::kAccountAdd, Command::kAccountRotate}) {
    of(id)->add_option(
        "--secret-file", acc_secret_file,
        "take the secret from FILE (16..128 printable characters, no spaces; a trailing newline "
        "is dropped) instead of a new random one");
  }

  // Node commands: answered by a node's control channel (--control), or by
  // every node through weir-mgmt (--all).
  CLI::App* cache = app.add_subcommand("cache", "a node's answer cache");
  cache->require_subcommand(1);
  CLI::App* flush = cache->add_subcommand(
      "flush",
      "remove cached answers of NAME (and, with --suffix, of every name under it), or of --partition");
  std::string f_name, f_partition, f_type;
  bool f_suffix = false;
  flush->add_option("name", f_name, "the name; '.' with --suffix is every name");
  flush->add_flag("--suffix", f_suffix, "NAME and every name under it");
  flush->add_option("--partition", f_partition,
                    "only this partition: a city, 'common', 'subnet' (every subnet partition), or an address "
                    "(the subnet partition it falls in)");
  flush->add_option("--type", f_type, "only this type (A, AAAA, MX, TYPE65, ...)");
  CLI::App* dump = cache->add_subcommand("dump", "list cached answers with TTL left, weights and SWRR state");
  std::string d_name, d_partition, d_type;
  bool d_suffix = false;
  int d_limit = 1000;
  dump->add_option("--name", d_name, "only this name");
  dump->add_flag("--suffix", d_suffix, "with --name: the name and every name under it");
  dump->add_option("--partition", d_partition, "only this partition (as for flush)");
  dump->add_option("--type", d_type, "only this type (as for flush)");
  dump->add_option("--limit", d_limit, "at most this many entries")->check(CLI::Range(1, 100000));
  CLI::App* cache_stats =
      cache->add_subcommand("stats", "entries, bytes, inserts and evictions, per partition");
  CLI::App* node_stats = app.add_subcommand("stats", "a node's metrics, as a table (or --json)");
  CLI::App* reload = app.add_subcommand("reload", "a node re-reads its files (city map, tags), as on SIGHUP");
  CLI::App* upstreams = app.add_subcommand("upstreams", "a node's upstreams: health, latency, ring share");
  CLI::App* partitions =
      app.add_subcommand("partitions", "a node's city map as applied and each partition's hits");
  CLI::App* segments =
      app.add_subcommand("segments", "a node's learned subscriber segments (level=adaptive)");
  segments->require_subcommand(1);
  CLI::App* seg_ls = segments->add_subcommand("ls", "the segments learned for NAME, with their answers");
  std::string s_name, s_type = "A";
  int s_limit = 1000;
  seg_ls->add_option("name", s_name, "the name")->required();
  seg_ls->add_option("--type", s_type, "the type (default A)");
  seg_ls->add_option("--limit", s_limit, "at most this many segments")->check(CLI::Range(1, 65534));
  CLI::App* seg_diff = segments->add_subcommand(
      "diff",
      "the learned segments against the city map: cities the GSLB splits, cities it answers as one; "
      "--proposal prints a city map that follows the GSLB");
  std::string sd_names;
  int sd_max = 100;
  bool sd_proposal = false;
  seg_diff->add_option("--name", sd_names,
                       "compare these names (comma-separated; default: the names with most segments)");
  seg_diff->add_option("--max-names", sd_max, "without --name: this many names (default 100)")
      ->check(CLI::Range(1, 100000));
  seg_diff->add_flag("--proposal", sd_proposal,
                     "print the proposed city map (CSV) instead of the comparison");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    if (rc == 0) return 0;
    // Usage errors: 2, as every weir program; with --json as an object too.
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--json") g_json = true;
    }
    if (g_json) std::printf("%s\n", ErrorJson(e.what(), 2).c_str());
    return 2;
  }

  g_json = json;
  g_timeout_ms = timeout_ms;
  if (actor.empty()) actor = DefaultActor();
  const bool node_command = *cache || *node_stats || *reload || *upstreams || *partitions || *segments;
  if (!all_kind.empty() && !all) return Die("--kind applies with --all");
  if (all && *reload) {
    return Die(
        "--all reload: the nodes weir-mgmt reaches take their tags and city map from it, not from files; "
        "change them with weirctl tag/citymap");
  }
  const int tls_given = !tls_cert.empty() + !tls_key.empty() + !tls_ca.empty();
  if (tls_given != 0 && tls_given != 3) return Die("--tls-cert, --tls-key and --tls-ca go together");
  // The TLS context is for weir-mgmt (not a node's control channel).
  auto load_tls = [&]() -> absl::Status {
    if (tls_given == 0) return absl::OkStatus();
    auto ctx = weir::net::TlsClientContext::Create(
        {.certificate = {tls_cert, tls_key}, .ca = tls_ca, .server_name = ""});
    if (!ctx.ok()) return ctx.status();
    g_tls = *std::move(ctx);
    return absl::OkStatus();
  };
  if (node_command) {
    std::vector<std::string> cargs;
    auto arg = [&](const char* key, const std::string& v) {
      if (!v.empty()) cargs.push_back(std::string(key) + "=" + v);
    };
    if (*flush) {
      verb = "cache-flush";
      arg("name", f_name);
      arg("suffix", f_suffix ? "1" : "");
      arg("partition", f_partition);
      arg("type", f_type);
    } else if (*dump) {
      verb = "cache-dump";
      arg("name", d_name);
      arg("suffix", d_suffix ? "1" : "");
      arg("partition", d_partition);
      arg("type", d_type);
      arg("limit", std::to_string(d_limit));
    } else if (*cache_stats) {
      verb = "cache-stats";
    } else if (*node_stats) {
      verb = "stats";
    } else if (*reload) {
      verb = "reload";
    } else if (*upstreams) {
      verb = "upstreams";
    } else if (*seg_ls) {
      verb = "segments-ls";
      arg("name", s_name);
      arg("type", s_type);
      arg("limit", std::to_string(s_limit));
    } else if (*seg_diff) {
      verb = "segments-diff";
      arg("name", sd_names);
      arg("max_names", std::to_string(sd_max));
      arg("proposal", sd_proposal ? "1" : "");
    } else {
      verb = "partitions";
    }
    if (all) {
      auto server = ResolveServer(server_text);
      if (!server.ok()) return Die("--server: " + std::string(server.status().message()));
      if (absl::Status st = load_tls(); !st.ok()) return Die("TLS: " + std::string(st.message()));
      if (token_file.empty() && g_tls == nullptr)
        return Die("--all needs the mgmt token: pass --token-file or set WEIR_MGMT_TOKEN_FILE");
      absl::StatusOr<std::string> token = std::string();
      if (!token_file.empty()) token = weir::mgmt::ReadTokenFile(token_file);
      if (!token.ok()) return Die(std::string(token.status().message()));
      // mgmt waits for its nodes a second less than we wait for mgmt.
      const int node_timeout = std::clamp(timeout_ms - 1000, 100, 25000);
      Message req{MsgType::kRequest,
                  {std::string(weir::mgmt::kProtocol), *token, actor, "node-control", all_kind,
                   std::to_string(node_timeout), verb}};
      for (std::string& a : cargs) req.fields.push_back(std::move(a));
      auto fd = ConnectTcp(*server);
      if (!fd.ok()) return Die("cannot reach weir-mgmt (" + std::string(fd.status().message()) + ")");
      return Call(*fd, "weir-mgmt", req, json, timeout_ms);
    }
    std::string token;
    absl::StatusOr<int> fd = absl::UnknownError("");
    std::string peer = control_text;
    if (control_text == "fastpath" || control_text == "recursor") {
      peer = weir::mgmt::DefaultControlSocket(control_text);
      fd = ConnectUnix(peer);
    } else if (control_text.find('/') != std::string::npos) {
      fd = ConnectUnix(control_text);
    } else {
      auto addrs = ResolveServer(control_text);
      if (!addrs.ok()) return Die("--control: " + std::string(addrs.status().message()));
      if (token_file.empty()) return Die("a TCP control channel needs the token: pass --token-file");
      auto t = weir::mgmt::ReadTokenFile(token_file);
      if (!t.ok()) return Die(std::string(t.status().message()));
      token = *t;
      fd = ConnectTcp(*addrs);
    }
    if (!fd.ok())
      return Die("cannot reach the node's control channel (" + std::string(fd.status().message()) + ")");
    Message req{MsgType::kRequest, {std::string(weir::mgmt::kProtocol), token, actor, verb}};
    for (std::string& a : cargs) req.fields.push_back(std::move(a));
    return Call(*fd, peer, req, json, timeout_ms);
  }
  if (all) return Die("--all applies to node commands (cache, stats, reload, upstreams, partitions)");
  auto server = ResolveServer(server_text);
  if (!server.ok()) return Die("--server: " + std::string(server.status().message()));
  if (absl::Status st = load_tls(); !st.ok()) return Die("TLS: " + std::string(st.message()));
  if (token_file.empty() && g_tls == nullptr)
    return Die("no token: pass --token-file or set WEIR_MGMT_TOKEN_FILE (or the --tls-* files)");
  absl::StatusOr<std::string> token = std::string();
  if (!token_file.empty()) token = weir::mgmt::ReadTokenFile(token_file);
  if (!token.ok()) return Die(std::string(token.status().message()));

  // The parsed request: the deepest subcommand given ("nodes rm" over "nodes").
  const weir::mgmt::CommandSpec* spec = nullptr;
  for (const weir::mgmt::CommandSpec& c : weir::mgmt::kCommands) {
    CLI::App* s = sub[static_cast<size_t>(c.id)];
    if (s == nullptr || !*s) continue;
    if (spec == nullptr || c.weirctl.size() > spec->weirctl.size()) spec = &c;
  }
  if (spec == nullptr) return Die("no command given (see --help)");
  verb = std::string(spec->verb);
  switch (spec->id) {
    case Command::kTagAdd: {
      std::string line;
      for (const std::string& w : words) line += (line.empty() ? "" : " ") + w;
      args = {line};
      if (replace) args.push_back("replace");
      break;
    }
    case Command::kTagRm:
      args = {file};
      break;
    case Command::kTagEdit:
      args = {edit_suffix};
      args.insert(args.end(), edits.begin(), edits.end());
      break;
    case Command::kCitymapAdd:
      args = {cm_cidr + "," + cm_city + "," + cm_ecs};
      if (cm_replace) args.push_back("replace");
      break;
    case Command::kCitymapRm:
      args = {cm_rm_cidr};
      break;
    case Command::kTagImport:
    case Command::kCitymapImport:
    case Command::kTrafficImport: {
      std::string body;
      if (!ReadFile(file, &body)) return Die("cannot read " + file);
      args = {body, file};  // the file names the bad lines weir-mgmt reports
      break;
    }
    case Command::kNodeRm:
      args = {rm_node};
      break;
    case Command::kAudit:
      args = {std::to_string(limit)};
      break;
    case Command::kCalibrationLs:
      if (!cal_name.empty()) args = {cal_name};
      break;
    case Command::kAccountAdd:
    case Command::kAccountRotate:
    case Command::kAccountRetire:
    case Command::kAccountSet:
    case Command::kAccountRm: {
      args = {acc_name};
      if (!acc_unsigned.empty()) args.push_back("unsigned=" + acc_unsigned);
      if (!acc_md5.empty()) args.push_back("legacy_md5=" + acc_md5);
      if (!acc_rps.empty()) args.push_back("rps=" + acc_rps);
      if (!acc_secret_file.empty()) {
        std::string secret;
        if (!ReadFile(acc_secret_file, &secret)) return Die("cannot read " + acc_secret_file);
        if (!secret.empty() && secret.back() == '\n') secret.pop_back();
        if (!secret.empty() && secret.back() == '\r') secret.pop_back();
        if (secret.empty()) return Die(acc_secret_file + " holds no secret");
        args.push_back("secret=" + secret);  // weir-mgmt checks it (errors never show it)
      }
      if (spec->id == Command::kAccountSet && args.size() == 1)
        return Die("account set: give --unsigned, --legacy-md5 or --rps");
      break;
    }
    case Command::kAccountLs:
    case Command::kTagLs:
    case Command::kCitymapLs:
    case Command::kNodes:
    case Command::kStatus:
    case Command::kNodeControl:
      break;
  }
  Message req{MsgType::kRequest, {std::string(weir::mgmt::kProtocol), *token, actor, verb}};
  for (std::string& a : args) req.fields.push_back(std::move(a));
  for (int attempt = 0;; ++attempt) {
    auto fd = ConnectTcp(*server);
    if (!fd.ok()) return Die("cannot reach weir-mgmt (" + std::string(fd.status().message()) + ")");
    const int rc = Call(*fd, "weir-mgmt", req, json, timeout_ms);
    if (rc != kConflictExit || attempt >= retries) return rc;
    std::fprintf(stderr, "weirctl: retrying (%d of %d)\n", attempt + 1, retries);
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * (attempt + 1)));
  }
}
