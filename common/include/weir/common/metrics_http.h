// The HTTP side of a daemon's Prometheus endpoint, on libmicrohttpd.
//
// GET and HEAD /metrics answer the render callback's body with the text
// format's Content-Type (500 with the reason when it fails, 503 when it fails
// with absl::StatusCode::kUnavailable: the daemon is too busy to answer, a
// scrape may try again); extra GET routes (tests' clock control) answer what
// their handler returns, and so do POST routes (weir-mgmt's feedback upload),
// given the whole body; other paths get 404, and a method a path has no route
// for 405 with the Allow header. libmicrohttpd's polling threads multiplex
// every connection over epoll, so idle keep-alive connections (or ones that
// send half a request) cost a descriptor, never a thread: they cannot delay a
// scrape. Idle connections are closed after `idle_timeout_seconds`; the
// number of connections, in all and per client address, is bounded.
//
// Threading: Start() and Stop() from one control thread. The render callback
// and the routes, GET and POST, run on the server's threads (Options::threads
// of them), one request at a time per thread, possibly concurrently on
// several: they must be thread-safe. The server knows nothing of what they
// read (a daemon whose metrics read RCU data makes its callback an RCU reader
// itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::common {

struct HttpReply {
  unsigned status = 200;  // 200, 400, 404, ...
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
  // Extra response headers ("WWW-Authenticate" with a 401). A header
  // libmicrohttpd refuses (an empty value, a line break, Content-Length)
  // turns the reply into a 500 that names it. (Initialised so that replies
  // written {status, body} stay clear of -Wmissing-field-initializers.)
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// The query arguments of a request, decoded ("seconds" -> "5").
using HttpQueryArgs = std::map<std::string, std::string, std::less<>>;

// A POST request, body and all.
struct HttpRequest {
  std::string method;  // "POST"
  std::string path;    // without the query
  HttpQueryArgs args;
  // Names lower-cased; a header sent several times has its values joined
  // with ", ", as RFC 9110 combines them.
  std::map<std::string, std::string, std::less<>> headers;
  std::string body;  // whole, de-chunked
  // The client's address as text ("127.0.0.1", "::1"; an IPv4 client of a
  // dual-stack listener as "10.0.0.1", not "::ffff:10.0.0.1").
  std::string peer;
};

class MetricsHttpServer {
 public:
  using Render = std::function<absl::StatusOr<std::string>()>;
  using Route = std::function<HttpReply(const HttpQueryArgs&)>;
  using PostRoute = std::function<HttpReply(const HttpRequest&)>;
  // Asked with the request's head (no body yet) before the body is read: a
  // reply refuses it there (an unauthenticated client never gets a body
  // buffered), nullopt lets it in.
  using Admit = std::function<std::optional<HttpReply>(const HttpRequest& head)>;

  struct Options {
    unsigned threads = 2;  // polling threads; each serves many connections
    unsigned idle_timeout_seconds = 30;
    // A scrape endpoint: a few Prometheus servers and operators' curl;
    // every connection allowed is a descriptor the daemon must have.
    unsigned max_connections = 128;
    unsigned max_connections_per_ip = 64;
    // The largest body a POST route is given: the body is held in memory
    // whole, once per connection uploading.
    size_t max_body_bytes = 1 << 20;
    // Descriptors the endpoint may hold: its listener, every connection
    // allowed, and each polling thread's epoll and wake descriptors.
    uint64_t descriptors() const { return uint64_t{max_connections} + 1 + 2 * uint64_t{threads}; }
  };

  explicit MetricsHttpServer(Render render) : MetricsHttpServer(std::move(render), Options{}) {}
  MetricsHttpServer(Render render, Options options);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // A GET route besides /metrics (path without the query). Before Start().
  void AddRoute(std::string path, Route route);

  // A POST route (path without the query). Before Start(). The body is read
  // whole before the handler runs, plain or chunked. A body over
  // Options::max_body_bytes gets 413 and the handler never runs: at once when
  // Content-Length declares it (before the body is read, the connection
  // closed after the answer), else once the chunked body ends, its excess
  // read and dropped, never held. A path may have a GET route and a POST
  // route both. `admit`, when given, runs first on the head (see Admit).
  void AddPostRoute(std::string path, PostRoute route, Admit admit = nullptr);

  // Serves on `listen_fd`, a bound, listening TCP socket, which is made
  // non-blocking. The caller keeps ownership of it (libmicrohttpd gets a
  // duplicate: `listen_fd` is not closed by Stop(), nor when Start fails).
  // On failure, the status carries libmicrohttpd's reason.
  absl::Status Start(int listen_fd);

  // Stops accepting, closes every connection, joins the threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::common
