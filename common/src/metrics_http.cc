#include "weir/common/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
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
  struct PostEntry {
    PostRoute route;
    Admit admit;
  };
  std::map<std::string, PostEntry, std::less<>> post_routes;
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
  MHD_Result Post(MHD_Connection* connection, const char* url, const PostEntry& route,
                  const char* upload_data, size_t* upload_data_size, void** request_state);
};

namespace {

constexpr std::string_view kText = "text/plain; charset=utf-8";

MHD_Result Queue(MHD_Connection* connection, unsigned status, std::string_view body,
                 std::string_view content_type, const char* allow = nullptr,
                 const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  MHD_Response* r =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;  // out of memory: libmicrohttpd closes the connection
  const std::string type(content_type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type.c_str());
  if (allow != nullptr) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  for (const auto& [name, value] : headers) {
    if (MHD_add_response_header(r, name.c_str(), value.c_str()) == MHD_NO) {
      // A handler's mistake: the client learns it, rather than getting the
      // reply without a header it may depend on (a 401's challenge).
      MHD_destroy_response(r);
      return Queue(connection, MHD_HTTP_INTERNAL_SERVER_ERROR,
                   Cat("the handler's reply header ", name, " was refused\n"), kText);
    }
  }
  const MHD_Result ret = MHD_queue_response(connection, status, r);
  MHD_destroy_response(r);
  return ret;
}

MHD_Result QueueReply(MHD_Connection* connection, const HttpReply& reply) {
  return Queue(connection, reply.status, reply.body, reply.content_type, nullptr, reply.headers);
}

MHD_Result CollectArg(void* cls, MHD_ValueKind, const char* key, const char* value) {
  (*static_cast<HttpQueryArgs*>(cls))[key] = value != nullptr ? value : "";
  return MHD_YES;
}

MHD_Result CollectHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto& headers = *static_cast<std::map<std::string, std::string, std::less<>>*>(cls);
  std::string name(key);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto [it, added] = headers.try_emplace(std::move(name), value != nullptr ? value : "");
  if (!added) CatTo(it->second, ", ", value != nullptr ? value : "");
  return MHD_YES;
}

// The client's address as inet_ntop writes it, an IPv4-mapped IPv6 address
// as the IPv4 one: the same client reads the same on either kind of listener.
std::string PeerAddress(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr) return "";
  char buf[INET6_ADDRSTRLEN] = "";
  if (info->client_addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(info->client_addr)->sin_addr, buf, sizeof(buf));
  } else if (info->client_addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(info->client_addr)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a, buf, sizeof(buf));
    }
  }
  return buf;
}

// A POST route's request while its body arrives: libmicrohttpd's per-request
// pointer, freed by FreeUpload however the request ends (answered, or the
// client gone mid-body).
struct Upload {
  std::string body;
  bool too_large = false;  // the excess is dropped as it arrives
};

void FreeUpload(void*, MHD_Connection*, void** request_state, MHD_RequestTerminationCode) {
  delete static_cast<Upload*>(*request_state);
  *request_state = nullptr;
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
                                           const char* method, const char*, const char* upload_data,
                                           size_t* upload_data_size, void** request_state) {
  auto* self = static_cast<Impl*>(cls);
  const std::string_view path(url);
  if (std::strcmp(method, MHD_HTTP_METHOD_POST) == 0) {
    if (auto it = self->post_routes.find(path); it != self->post_routes.end()) {
      return self->Post(connection, url, it->second, upload_data, upload_data_size, request_state);
    }
  }
  // Any other answer is queued on the first call, before any body; a body
  // that still arrives (a GET with one) is read and ignored.
  if (*upload_data_size != 0) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  const bool get_path = path == "/metrics" || self->routes.contains(path);
  const bool post_path = self->post_routes.contains(path);
  if (!get_path && !post_path) {
    return Queue(connection, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n", kText);
  }
  const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
  const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (!get_path || (!get && !head)) {
    const char* allow = !get_path ? "POST" : post_path ? "GET, HEAD, POST" : "GET, HEAD";
    return Queue(connection, MHD_HTTP_METHOD_NOT_ALLOWED, Cat(method, " not allowed: ", allow, "\n"), kText,
                 allow);
  }
  // For HEAD the body is rendered too: libmicrohttpd sends its Content-Length
  // and leaves the body out.
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
    return QueueReply(connection, it->second(args));
  }
  return Queue(connection, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n", kText);
}

// libmicrohttpd calls a request's handler first with its headers, then with
// each piece of the body (de-chunked), then once more with none; it takes an
// answer only on the first call and the last.
MHD_Result MetricsHttpServer::Impl::Post(MHD_Connection* connection, const char* url, const PostEntry& route,
                                         const char* upload_data, size_t* upload_data_size,
                                         void** request_state) {
  auto head = [&] {
    HttpRequest request;
    request.method = MHD_HTTP_METHOD_POST;
    request.path = url;
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, CollectArg, &request.args);
    MHD_get_connection_values(connection, MHD_HEADER_KIND, CollectHeader, &request.headers);
    request.peer = PeerAddress(connection);
    return request;
  };
  const size_t max = options.max_body_bytes;
  auto* upload = static_cast<Upload*>(*request_state);
  if (upload == nullptr) {
    // A declared length over the limit is refused before the body is read,
    // and before a client that sent "Expect: 100-continue" sends it.
    // libmicrohttpd has checked the header's syntax already.
    if (const char* length =
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
      const std::string_view text(length);
      uint64_t n = 0;
      if (std::from_chars(text.data(), text.data() + text.size(), n).ec == std::errc() && n > max) {
        return Queue(connection, MHD_HTTP_CONTENT_TOO_LARGE, Cat("the body is over ", max, " bytes\n"),
                     kText);
      }
    }
    if (route.admit) {
      if (std::optional<HttpReply> refused = route.admit(head())) return QueueReply(connection, *refused);
    }
    *request_state = new Upload;
    return MHD_YES;
  }
  if (*upload_data_size != 0) {
    // No answer can be queued while the body arrives: a chunked body over
    // the limit is read to its end, its excess dropped.
    if (!upload->too_large && *upload_data_size > max - upload->body.size()) {
      upload->too_large = true;
      std::string().swap(upload->body);
    }
    if (!upload->too_large) upload->body.append(upload_data, *upload_data_size);
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (upload->too_large) {
    return Queue(connection, MHD_HTTP_CONTENT_TOO_LARGE, Cat("the body is over ", max, " bytes\n"), kText);
  }
  HttpRequest request = head();
  request.body = std::move(upload->body);
  return QueueReply(connection, route.route(request));
}

MetricsHttpServer::MetricsHttpServer(Render render, Options options) : impl_(std::make_unique<Impl>()) {
  impl_->render = std::move(render);
  impl_->options = options;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::AddRoute(std::string path, Route route) {
  impl_->routes[std::move(path)] = std::move(route);
}

void MetricsHttpServer::AddPostRoute(std::string path, PostRoute route, Admit admit) {
  impl_->post_routes[std::move(path)] = Impl::PostEntry{std::move(route), std::move(admit)};
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
  s.daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Impl::Handle, &s, MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(fd),
      MHD_OPTION_EXTERNAL_LOGGER, &Impl::Log, &s, MHD_OPTION_THREAD_POOL_SIZE, s.options.threads,
      MHD_OPTION_CONNECTION_TIMEOUT, s.options.idle_timeout_seconds, MHD_OPTION_CONNECTION_LIMIT,
      s.options.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, s.options.max_connections_per_ip,
      MHD_OPTION_NOTIFY_COMPLETED, &FreeUpload, nullptr, MHD_OPTION_END);
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
