#include "doh_client.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "weir/common/text.h"

namespace weir::bench {

// One request in flight: its body (POST) and the response being read.
struct Http2Client::Stream {
  std::vector<uint8_t> request;
  size_t request_sent = 0;
  Response response;
};

// nghttp2's callbacks, with access to the client.
struct Http2Callbacks {
  static Http2Client::Stream* StreamOf(nghttp2_session* session, int32_t stream_id) {
    return static_cast<Http2Client::Stream*>(nghttp2_session_get_stream_user_data(session, stream_id));
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t /*flags*/,
                      void* /*user*/) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_RESPONSE) return 0;
    Http2Client::Stream* s = StreamOf(session, frame->hd.stream_id);
    if (s == nullptr) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":status") {
      int status = 0;
      for (char ch : v) status = ch >= '0' && ch <= '9' && status < 1000 ? status * 10 + (ch - '0') : 1000;
      s->response.status = status;
    } else if (n == "content-type") {
      s->response.content_type.assign(v);
    }
    return 0;
  }

  static int OnData(nghttp2_session* session, uint8_t /*flags*/, int32_t stream_id, const uint8_t* data,
                    size_t len, void* /*user*/) {
    Http2Client::Stream* s = StreamOf(session, stream_id);
    if (s == nullptr || s->response.too_large) return 0;
    if (s->response.body.size() + len > Http2Client::kMaxBody) {
      s->response.too_large = true;
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
      return 0;
    }
    s->response.body.insert(s->response.body.end(), data, data + len);
    return 0;
  }

  static int OnClose(nghttp2_session* /*session*/, int32_t stream_id, uint32_t error_code, void* user) {
    auto* client = static_cast<Http2Client*>(user);
    auto it = client->streams_.find(stream_id);
    if (it == client->streams_.end()) return 0;
    Http2Client::Response& r = it->second->response;
    r.stream_id = stream_id;
    r.error_code = error_code;
    client->responses_.push_back(std::move(r));
    client->streams_.erase(it);
    return 0;
  }

  static int OnFrame(nghttp2_session* /*session*/, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_GOAWAY) static_cast<Http2Client*>(user)->goaway_ = true;
    return 0;
  }

  // Connection errors: nghttp2 then sends GOAWAY and ends the session.
  static int OnError(nghttp2_session* /*session*/, int /*lib_error_code*/, const char* msg, size_t len,
                     void* user) {
    auto* client = static_cast<Http2Client*>(user);
    if (client->error_.empty()) client->error_ = common::Cat("HTTP/2: ", std::string_view(msg, len));
    return 0;
  }

  static ssize_t ReadBody(nghttp2_session* /*session*/, int32_t /*stream_id*/, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source* source, void* /*user*/) {
    auto* s = static_cast<Http2Client::Stream*>(source->ptr);
    const size_t n = std::min(length, s->request.size() - s->request_sent);
    std::memcpy(buf, s->request.data() + s->request_sent, n);
    s->request_sent += n;
    if (s->request_sent == s->request.size()) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
};

absl::StatusOr<std::unique_ptr<Http2Client>> Http2Client::Create(std::string authority) {
  std::unique_ptr<Http2Client> c(new Http2Client());
  c->authority_ = std::move(authority);
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return absl::ResourceExhaustedError("nghttp2: out of memory");
  nghttp2_session_callbacks_set_on_header_callback(cbs, &Http2Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &Http2Callbacks::OnData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &Http2Callbacks::OnClose);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &Http2Callbacks::OnFrame);
  nghttp2_session_callbacks_set_error_callback2(cbs, &Http2Callbacks::OnError);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // Until the server's SETTINGS say otherwise, assume RFC 9113's
  // recommended minimum of concurrent streams.
  nghttp2_option_set_peer_max_concurrent_streams(opt, 100);
  const int rv = nghttp2_session_client_new2(&c->session_, cbs, c.get(), opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) return absl::InternalError(common::Cat("nghttp2_session_client_new: ", nghttp2_strerror(rv)));
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
  nghttp2_submit_settings(c->session_, NGHTTP2_FLAG_NONE, settings, 1);
  return c;
}

Http2Client::~Http2Client() {
  if (session_ != nullptr) nghttp2_session_del(session_);
}

int32_t Http2Client::Submit(const std::string& method, std::string_view target, std::string_view accept,
                            std::string_view content_type, std::span<const uint8_t> body) {
  auto nv = [](std::string_view name, std::string_view value) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                      NGHTTP2_NV_FLAG_NONE};
  };
  const std::string length = std::to_string(body.size());
  nghttp2_nv headers[7] = {nv(":method", method),        nv(":scheme", "https"),
                           nv(":authority", authority_), nv(":path", target),
                           nv("accept", accept),         nv("content-type", content_type),
                           nv("content-length", length)};
  const size_t count = method == "POST" ? 7 : 5;
  auto stream = std::make_unique<Stream>();
  nghttp2_data_provider provider{};
  nghttp2_data_provider* data = nullptr;
  if (method == "POST") {
    stream->request.assign(body.begin(), body.end());
    provider.source.ptr = stream.get();
    provider.read_callback = &Http2Callbacks::ReadBody;
    data = &provider;
  }
  const int32_t id = nghttp2_submit_request(session_, nullptr, headers, count, data, stream.get());
  if (id > 0) streams_.emplace(id, std::move(stream));
  return id;
}

int32_t Http2Client::Get(std::string_view target, std::string_view accept) {
  return Submit("GET", target, accept, "", {});
}

int32_t Http2Client::Post(std::string_view path, std::string_view content_type,
                          std::span<const uint8_t> body) {
  return Submit("POST", path, content_type, content_type, body);
}

void Http2Client::Cancel(int32_t stream_id) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
}

void Http2Client::Shutdown() {
  shutdown_ = true;
  nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
}

bool Http2Client::Receive(std::span<const uint8_t> data) {
  const ssize_t r = nghttp2_session_mem_recv(session_, data.data(), data.size());
  if (r < 0) {
    error_ = common::Cat("HTTP/2: ", nghttp2_strerror(static_cast<int>(r)));
    return false;
  }
  // A connection error ends the session (nghttp2 queues a GOAWAY): the
  // connection is done. The server's own GOAWAY lets the open streams end.
  return !Ended();
}

bool Http2Client::Ended() {
  if (nghttp2_session_want_read(session_) != 0 || goaway_ || shutdown_) return false;
  if (error_.empty()) error_ = "HTTP/2: the session ended on a protocol error";
  return true;
}

bool Http2Client::Send(std::vector<uint8_t>* out) {
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      error_ = common::Cat("HTTP/2: ", nghttp2_strerror(static_cast<int>(n)));
      return false;
    }
    if (n == 0) return !Ended();
    out->insert(out->end(), data, data + n);
  }
}

uint32_t Http2Client::remote_max_streams() const {
  return nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

bool Http2Client::finished() const {
  return nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0;
}

// ------------------------------------------------------------ targets

std::string DohGetTarget(std::string_view path, std::span<const uint8_t> query) {
  std::string target(path);
  target += "?dns=";
  target +=
      absl::WebSafeBase64Escape(absl::string_view(reinterpret_cast<const char*>(query.data()), query.size()));
  return target;
}

namespace {

// RFC 3986 percent-encoding of everything but the unreserved characters.
void AppendPercentEncoded(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '-' || b == '.' ||
        b == '_' || b == '~') {
      out->push_back(ch);
    } else {
      out->push_back('%');
      out->push_back(kHex[b >> 4]);
      out->push_back(kHex[b & 15]);
    }
  }
}

}  // namespace

std::string DohJsonTarget(std::string_view path, const dns::NameKey& qname, uint16_t qtype,
                          const dns::ClientSubnet* ecs) {
  std::string target(path);
  target += "?name=";
  AppendPercentEncoded(dns::NameKeyToText(qname.span()), &target);
  target += "&type=";
  target += std::to_string(qtype);
  if (ecs != nullptr && (ecs->family == dns::kEcsFamilyIpv4 || ecs->family == dns::kEcsFamilyIpv6)) {
    common::IpAddress a;
    a.family = ecs->family == dns::kEcsFamilyIpv4 ? 4 : 6;
    std::memcpy(a.bytes.data(), ecs->address.data(), std::min<size_t>(ecs->AddressBytes(), 16));
    target += "&edns_client_subnet=";
    AppendPercentEncoded(common::Cat(common::IpToString(a), "/", ecs->source_prefix), &target);
  }
  return target;
}

// ------------------------------------------------------------ JSON answers

absl::StatusOr<JsonAnswer> ParseDnsJson(std::string_view body) {
  using Json = nlohmann::json;
  const Json doc = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("the body is not JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("the JSON answer is not an object");
  JsonAnswer a;
  auto status = doc.find("Status");
  if (status == doc.end() || !status->is_number_unsigned() || status->get<uint64_t>() > 4095)
    return absl::InvalidArgumentError("the JSON answer has no \"Status\" of 0 to 4095");
  a.rcode = static_cast<uint16_t>(status->get<uint64_t>());
  if (auto tc = doc.find("TC"); tc != doc.end() && tc->is_boolean()) a.tc = tc->get<bool>();
  if (auto q = doc.find("Question"); q != doc.end()) {
    if (!q->is_array()) return absl::InvalidArgumentError("\"Question\" is not an array");
    if (!q->empty()) {
      const Json& first = (*q)[0];
      auto name = first.is_object() ? first.find("name") : first.end();
      auto type = first.is_object() ? first.find("type") : first.end();
      if (!first.is_object() || name == first.end() || !name->is_string() || type == first.end() ||
          !type->is_number_unsigned() || type->get<uint64_t>() > 65535) {
        return absl::InvalidArgumentError("\"Question\" has no \"name\" string and \"type\" number");
      }
      if (!dns::NameKeyFromText(name->get_ref<const std::string&>(), &a.qname))
        return absl::InvalidArgumentError(
            common::Cat("question name '", name->get_ref<const std::string&>(), "' is not a domain name"));
      a.qtype = static_cast<uint16_t>(type->get<uint64_t>());
      a.has_question = true;
    }
  }
  if (auto answer = doc.find("Answer"); answer != doc.end()) {
    if (!answer->is_array()) return absl::InvalidArgumentError("\"Answer\" is not an array");
    for (const Json& rr : *answer) {
      if (!rr.is_object()) return absl::InvalidArgumentError("an \"Answer\" record is not an object");
      auto type = rr.find("type");
      auto data = rr.find("data");
      if (type == rr.end() || !type->is_number_unsigned()) continue;
      const uint64_t t = type->get<uint64_t>();
      if (t != 1 && t != 28) continue;
      common::IpAddress ip;
      if (data == rr.end() || !data->is_string() ||
          !common::ParseIp(data->get_ref<const std::string&>(), &ip) || ip.family != (t == 1 ? 4 : 6)) {
        return absl::InvalidArgumentError(
            common::Cat("an \"Answer\" record of type ", t, " has no address data"));
      }
      a.addresses.push_back(ip);
    }
  }
  return a;
}

}  // namespace weir::bench
