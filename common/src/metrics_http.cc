#include "weir/common/metrics_http.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "weir/common/log.h"
#include "weir/common/prometheus.h"
#include "weir/common/text.h"

namespace weir::common {

struct MetricsHttpServer::Impl {
  Render render;
  Options options;
  std::map<std::string, Route, std::less<>> routes;
  MHD_Daemon* daemon = nullptr;

  // libmicrohttpd's messages: kept while Start() runs (the reason of a
  // failed start), written to stderr afterwards.
  std::mutex log_mu;
  bool starting = false;
  std::string start_log;

  static void Log(void* cls, const char* fmt, va_list ap);
  static MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url, const char* method,
                           const char* version, const char* upload_data, size_t* upload_data_size,
                           void** request_state);
};

namespace {

MHD_Result Queue(MHD_Connection* connection, unsigned status, std::string_view body,
                 std::string_view content_type, const char* allow = nullptr) {
  MHD_Response* r =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;  // out of memory: libmicrohttpd closes the connection
  const std::string type(content_type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type.c_str());
  if (allow != nullptr) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  const MHD_Result ret = MHD_queue_response(connection, status, r);
  MHD_destroy_response(r);
  return ret;
}

MHD_Result CollectArg(void* cls, MHD_ValueKind, const char* key, const char* value) {
  (*static_cast<HttpQueryArgs*>(cls))[key] = value != nullptr ? value : "";
  return MHD_YES;
}

}  // namespace

void MetricsHttpServer::Impl::Log(void* cls, const char* fmt, va_list ap) {
  auto* self = static_cast<Impl*>(cls);
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string_view msg(buf);
  while (!msg.empty() && msg.back() == '\n') msg.remove_suffix(1);
  {
    std::lock_guard<std::mutex> l(self->log_mu);
    if (self->starting) {
      if (!self->start_log.empty()) self->start_log += "; ";
      self->start_log += msg;
      return;
    }
  }
  // libmicrohttpd reports accept and connection failures here, as often as
  // clients cause them.
  static RateLimitedLog repeats({.component = "metrics"});
  repeats("metrics http: ", msg);
}

MHD_Result MetricsHttpServer::Impl::Handle(void* cls, MHD_Connection* connection, const char* url,
                                           const char* method, const char*, const char*,
                                           size_t* upload_data_size, void**) {
  auto* self = static_cast<Impl*>(cls);
  // The answer is queued on the first call, before any body; a body that
  // still arrives (a GET with one) is read and ignored.
  if (*upload_data_size != 0) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  constexpr std::string_view kText = "text/plain; charset=utf-8";
  const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
  const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (!get && !head) {
    return Queue(connection, MHD_HTTP_METHOD_NOT_ALLOWED, Cat(method, " not allowed: GET or HEAD\n"), kText,
                 "GET, HEAD");
  }
  // For HEAD the body is rendered too: libmicrohttpd sends its Content-Length
  // and leaves the body out.
  const std::string_view path(url);
  if (path == "/metrics") {
    absl::StatusOr<std::string> body = self->render();
    if (!body.ok() && body.status().code() == absl::StatusCode::kUnavailable) {
      return Queue(connection, MHD_HTTP_SERVICE_UNAVAILABLE,
                   Cat("metrics unavailable: ", body.status().message(), "\n"), kText);
    }
    if (!body.ok()) {
      return Queue(connection, MHD_HTTP_INTERNAL_SERVER_ERROR,
                   Cat("rendering the metrics failed: ", body.status().message(), "\n"), kText);
    }
    return Queue(connection, MHD_HTTP_OK, *body, kPrometheusContentType);
  }
  if (auto it = self->routes.find(path); it != self->routes.end()) {
    HttpQueryArgs args;
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, CollectArg, &args);
    const HttpReply reply = it->second(args);
    return Queue(connection, reply.status, reply.body, kText);
  }
  return Queue(connection, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n", kText);
}

MetricsHttpServer::MetricsHttpServer(Render render, Options options) : impl_(std::make_unique<Impl>()) {
  impl_->render = std::move(render);
  impl_->options = options;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::AddRoute(std::string path, Route route) {
  impl_->routes[std::move(path)] = std::move(route);
}

absl::Status MetricsHttpServer::Start(int listen_fd) {
  Impl& s = *impl_;
  if (s.daemon != nullptr) return absl::FailedPreconditionError("metrics http server already started");
  // libmicrohttpd closes its listen socket when it stops; it gets a
  // duplicate so the caller's descriptor stays the caller's.
  const int fd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return absl::InternalError(Cat("metrics http: dup of the listen socket: ", std::strerror(errno)));
  // Non-blocking (it is one open file with the caller's descriptor): every
  // polling thread is woken for a new connection and only one accepts it.
  if (const int fl = fcntl(fd, F_GETFL); fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(Cat("metrics http: the listen socket: ", std::strerror(err)));
  }
  {
    std::lock_guard<std::mutex> l(s.log_mu);
    s.starting = true;
    s.start_log.clear();
  }
  // Internal polling threads on epoll: every connection, idle or not, is
  // one descriptor in a thread's epoll set, never a thread of its own.
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  s.daemon =
      MHD_start_daemon(flags, 0, nullptr, nullptr, &Impl::Handle, &s, MHD_OPTION_LISTEN_SOCKET,
                       static_cast<MHD_socket>(fd), MHD_OPTION_EXTERNAL_LOGGER, &Impl::Log, &s,
                       MHD_OPTION_THREAD_POOL_SIZE, s.options.threads, MHD_OPTION_CONNECTION_TIMEOUT,
                       s.options.idle_timeout_seconds, MHD_OPTION_CONNECTION_LIMIT, s.options.max_connections,
                       MHD_OPTION_PER_IP_CONNECTION_LIMIT, s.options.max_connections_per_ip, MHD_OPTION_END);
  std::string reason;
  {
    std::lock_guard<std::mutex> l(s.log_mu);
    s.starting = false;
    reason = std::move(s.start_log);
  }
  if (s.daemon == nullptr) {
    // Whether libmicrohttpd closed the duplicate on this path is not
    // documented; at worst one descriptor leaks on a failed start.
    return absl::InternalError(
        Cat("metrics http: libmicrohttpd did not start: ", reason.empty() ? "no reason given" : reason));
  }
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (impl_->daemon == nullptr) return;
  MHD_stop_daemon(impl_->daemon);  // joins its threads, closes the connections and its listen socket
  impl_->daemon = nullptr;
}

}  // namespace weir::common
