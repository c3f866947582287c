// The control channel every node daemon (weir-fastpath, weir-recursor) serves
// to weirctl (docs/operator-guide.md#cache-control): cache flush and dump,
// statistics, reload, upstreams, partitions. One request per connection, in
// the mgmt frame format (protocol.h): REQUEST {protocol, token, actor, verb,
// key=value args...} -> REPLY {"ok" | "error", text, json}.
//
// Transports: a local unix socket (on by default; the file's permissions are
// the authentication, the token field is ignored) and, when configured, TCP,
// where the token must be the one in `token_file` (as for weir-mgmt). The
// same commands reach a node through weir-mgmt's stream (NodeClient), so
// `weirctl --all` fans out to every node.
//
// Threading: a ControlServer serves on one net::EventLoop, its own thread's
// (StartThread) or the owner's (Attach, then the owner runs the loop); the
// handler runs on that thread. Bind/Stop on the owner's thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <toml++/toml.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/common/log.h"
#include "weir/common/socket_address.h"
#include "weir/common/toml_checker.h"
#include "weir/dns/message.h"

namespace weir::net {
class EventLoop;
}

namespace weir::mgmt {

struct ControlRequest {
  std::string actor;              // who asked, for the log ("user@host", "weir-mgmt: user@host")
  std::string verb;               // "cache-flush", "cache-dump", "stats", ...
  std::vector<std::string> args;  // key=value
};

// A reply as the wire carries it. A handler builds its reply as one
// StructuredReply (structured_reply.h) and renders both texts from it;
// an error is its message alone.
struct ControlReply {
  bool ok = true;
  std::string text;  // what weirctl prints
  std::string json;  // what weirctl --json prints
  static ControlReply Error(std::string why) { return {false, std::move(why), ""}; }
};

using ControlHandler = std::function<ControlReply(const ControlRequest&)>;

// weir-mgmt's own request to its recursor nodes after a tag change adds
// suffixes: does each name's zone exist (docs/mgmt.md#zone-check)?
// Arguments name=NAME (at most kMaxZoneCheckNames) and timeout_ms=N.
inline constexpr std::string_view kZoneCheckVerb = "zone-check";
inline constexpr size_t kMaxZoneCheckNames = 100;

// A reply's text and JSON together at most (a frame is at most 64 MiB, and
// weirctl --all gathers several replies in one): a bigger one is answered
// with an error asking to narrow the command.
inline constexpr size_t kMaxControlReplyBytes = size_t{24} << 20;

// Connections served at once per transport (unix socket, TCP), so TCP peers
// that never authenticate cannot keep weirctl off the local socket; the
// daemons count them in their open-file need.
inline constexpr size_t kMaxControlConnections = 32;

// `reply`, or the error that replaces it when it is too big.
ControlReply BoundedReply(ControlReply reply);

// The key=value arguments of a request, checked against what the verb takes.
class ControlArgs {
 public:
  // An error names the first argument that is not key=value or whose key is
  // not in `known`, or a key given twice.
  static absl::StatusOr<ControlArgs> Parse(const std::vector<std::string>& args,
                                           std::initializer_list<std::string_view> known);
  bool Has(std::string_view key) const { return values_.contains(std::string(key)); }
  // The value, `fallback` when absent.
  std::string Get(std::string_view key, std::string fallback = "") const;
  // A decimal in [lo, hi]; `fallback` when absent.
  absl::StatusOr<uint64_t> Number(std::string_view key, uint64_t fallback, uint64_t lo, uint64_t hi) const;
  // "1", "true", "yes" -> true; absent -> false.
  bool Flag(std::string_view key) const;

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

// The NAME [--suffix] and --type of a flush or a dump (arguments name,
// suffix, type), as every node reads them.
struct NameSelection {
  bool has_name = false;
  dns::NameKey name;
  bool suffix = false;
  uint16_t qtype = 0;  // 0: any

  static absl::StatusOr<NameSelection> Parse(const ControlArgs& args);
  // Whether `key` (a canonical name key) is selected: any name without a
  // NAME; NAME itself; with --suffix, NAME or a name under it.
  bool NameMatches(std::span<const uint8_t> key) const;
  bool TypeMatches(uint16_t type) const { return qtype == 0 || type == qtype; }
};

// Whether `name` (a canonical key) is `suffix` or a name under it.
bool UnderSuffix(std::span<const uint8_t> name, std::span<const uint8_t> suffix);

// An IPv4 (4 bytes) or IPv6 (16) address in text.
std::string AddressText(const uint8_t* bytes, size_t len);

struct ControlConfig {
  // The unix socket; empty: none. Created mode 0660 in a directory the daemon
  // can write (created 0755 when missing).
  std::string socket_path;
  // The path was not configured: a socket that cannot be bound (another
  // daemon of the same kind runs on the host, /run not writable) is a warning.
  bool socket_is_default = true;
  bool tcp_enabled = false;
  common::SocketAddress tcp_listen;
  std::string token_file;  // required with tcp
};

// The default unix socket of a node kind: /run/weir-<kind>/control.sock (the
// RuntimeDirectory of its systemd unit).
std::string DefaultControlSocket(std::string_view kind);

// Reads root["control"] (socket, listen, token_file) into `out`; without the
// table the default socket of `kind`. Relative paths are left as written.
void ParseControlTable(common::TomlChecker& c, const toml::table& root, std::string_view kind,
                       ControlConfig* out);

class ControlServer {
 public:
  ControlServer(ControlConfig config, ControlHandler handler);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Reads the token, binds the socket(s); before privileges are dropped.
  absl::Status Bind();
  // Serves on `loop`, which the caller runs (on that loop's thread, or
  // before it runs).
  void Attach(net::EventLoop& loop);
  // Serves on a thread of its own.
  absl::Status StartThread();
  // Closes every socket (on the loop's thread, or once it has stopped) and
  // removes the socket file this server created.
  void Stop();

  // "control unix PATH\n", "control tcp ADDRESS\n" for what is bound.
  std::string Describe() const;
  // The bound TCP address (the port when 0 was configured).
  common::SocketAddress tcp_bound() const { return tcp_bound_; }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  struct Conn;
  void Accept(int listen_fd, bool tcp);
  void OnEvents(int fd, uint32_t events);
  void Serve(Conn& c);
  void Close(int fd);

  ControlConfig config_;
  ControlHandler handler_;
  std::string token_;
  int unix_fd_ = -1;
  bool created_socket_file_ = false;
  int tcp_fd_ = -1;
  common::SocketAddress tcp_bound_;
  net::EventLoop* loop_ = nullptr;
  std::unique_ptr<net::EventLoop> own_loop_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::map<int, std::unique_ptr<Conn>> conns_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> refused_{0};
  common::RateLimitedLog log_{{.component = "control"}};
};

}  // namespace weir::mgmt
