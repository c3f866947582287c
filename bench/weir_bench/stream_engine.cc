#include "stream_engine.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "doh_client.h"
#include "tls_client.h"
#include "weir/common/text.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"

namespace weir::bench {
namespace {

// In-flight queries per connection that the default --connections assumes
// (RFC 9113's recommended minimum of concurrent streams; unbound's and
// dnsdist's default limit).
constexpr uint32_t kDepthPerConnection = 100;
// Open loop: what one connection may have in flight (DoT: its IDs).
constexpr uint32_t kOpenLoopDepth = 60000;
// Queries in flight in an exchange (preflight, probes, warm-up).
constexpr uint32_t kExchangeWindow = 256;
constexpr uint32_t kDefaultNewConnectionCap = 1000;
constexpr uint32_t kNoLane = UINT32_MAX;
// A lane whose connection failed waits this long before it connects again.
constexpr uint64_t kReconnectBackoffNs = 10'000'000;
constexpr size_t kReadChunk = 16 * 1024;

enum class Phase : uint8_t { kConnecting, kHandshaking, kOpen };

// One query awaiting its answer on a connection.
struct Pending {
  uint64_t sent_ns = 0;
  uint64_t miss = 0;      // a miss draw's sequence number
  uint64_t seq = 0;       // matches its deadline entry
  uint32_t question = 0;  // the draw's question, or the plan index in an exchange
  bool weight = false;
};

struct Conn {
  uint64_t serial = 0;
  uint32_t lane = kNoLane;
  uint32_t source = 0;
  uint32_t city = 0;
  int fd = -1;
  Phase phase = Phase::kConnecting;
  bool retiring = false;  // takes no more queries; closed once nothing is owed
  bool closed = false;
  bool dirty = false;  // in the flush list
  uint32_t watched = 0;
  uint64_t started_ns = 0;
  uint64_t queries = 0;
  std::unique_ptr<TlsStream> tls;
  std::unique_ptr<Http2Client> h2;  // DoH
  // DoT: by ID; DoH: by stream ID.
  absl::flat_hash_map<uint32_t, Pending> pending;
  uint16_t next_id = 0;
  std::vector<uint8_t> out;  // bytes for TLS: framed queries (DoT) or HTTP/2 frames
  size_t out_off = 0;
  net::DnsTcpReader reader;  // DoT
};

// A connection slot of the closed or open loop: one city's, holding its
// current connection (a retiring one closes on its own).
struct Lane {
  uint32_t city = 0;
  Conn* active = nullptr;
  uint64_t retry_ns = 0;
};

struct Deadline {
  uint64_t at = 0;
  uint64_t serial = 0;
  uint32_t key = 0;
  uint64_t seq = 0;
};

class StreamSender final : public Sender {
 public:
  absl::Status Open() override {
    // Many connections at once in new-connection mode: the soft descriptor
    // limit (1024) is too low, the hard one is what the machine allows.
    rlimit nofile{};
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
      nofile.rlim_cur = nofile.rlim_max;
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
    transport_ = o->transport;
    json_ = transport_ == Transport::kDohJson;
    timeout_ns_ = uint64_t{o->timeout_ms} * 1000000u;
    TlsSettings ts;
    ts.ca_file = o->tls_ca;
    ts.name = o->tls_name;
    const std::string server = o->server.ToString();
    ts.server_ip = o->server.family() == AF_INET6 ? server.substr(1, server.rfind(']') - 1)
                                                  : server.substr(0, server.rfind(':'));
    ts.insecure = o->tls_insecure;
    ts.alpn = transport_ == Transport::kDot ? "dot" : "h2";
    ts.alpn_required = transport_ != Transport::kDot;
    ts.resume = o->tls_resume;
    auto ctx = TlsClientContext::Create(ts);
    if (!ctx.ok()) return ctx.status();
    tls_ = std::move(*ctx);
    authority_ = o->tls_name.empty() ? server : o->tls_name;
    if (absl::Status st = loop_.Init(); !st.ok()) return st;
    const size_t cities = sources->cities().size();
    city_owed_.assign(cities, 0.0);
    source_rr_.assign(cities, 0);
    if (!o->new_connections_per_second) SetUpLanes();
    return absl::OkStatus();
  }

  void Loop(uint64_t start, uint64_t end, const std::atomic<bool>& stop) override {
    std::unique_lock<std::mutex> lock(shares.mutex());
    // The reporter takes the mutex once a second: it is free while the loop
    // waits for events.
    loop_.SetWaitHooks([&lock] { lock.unlock(); }, [&lock] { lock.lock(); });
    const bool closed_loop = !o->rate && !o->new_connections_per_second;
    bool sending = true;
    uint64_t drain_deadline = 0;
    uint64_t last_expire = start;
    for (;;) {
      uint64_t now = NowNs();
      if (sending && (stop.load(std::memory_order_relaxed) || now >= end ||
                      (count_limit != 0 && c.sent >= count_limit))) {
        sending = false;
        send_end_ns = now;
        drain_deadline = now + timeout_ns_;
      }
      if (sending) {
        if (o->new_connections_per_second) {
          OpenDueConnections(start, now);
        } else {
          SendDue(start, now);
        }
      } else if (inflight_ == 0 || now >= drain_deadline) {
        break;
      }
      FlushDirty();
      // Closed loop: spin while queries are out, as the UDP sender does.
      loop_.RunOnce(std::chrono::milliseconds(closed_loop && sending && inflight_ > 0 ? 0 : 1));
      closed_.clear();
      FlushDirty();
      now = NowNs();
      if (now - last_expire >= 1000000) {
        Expire(now);
        last_expire = now;
      }
    }
    CloseAll();
    if (send_end_ns == 0) send_end_ns = NowNs();
    loop_.SetWaitHooks(nullptr, nullptr);
    lock.unlock();
    done.store(true, std::memory_order_release);
  }

  // StreamExchange: see stream_engine.h.
  absl::StatusOr<std::vector<std::vector<uint8_t>>> Exchange(uint32_t source,
                                                             const std::vector<Planned>& plan, int tries,
                                                             bool json) {
    plan_ = &plan;
    json_ = json;
    std::vector<std::vector<uint8_t>> answers(plan.size());
    answers_ = &answers;
    const uint32_t city = sources->sources()[source].city;
    for (int attempt = 0; attempt < tries; ++attempt) {
      std::vector<uint32_t> todo;
      for (uint32_t i = 0; i < plan.size(); ++i) {
        if (answers[i].empty()) todo.push_back(i);
      }
      if (todo.empty()) break;
      uint64_t now = NowNs();
      Conn* conn = OpenConn(city, kNoLane, source, now);
      if (conn == nullptr) continue;
      const uint64_t serial = conn->serial;
      size_t next = 0;
      for (;;) {
        auto it = conns_.find(serial);
        if (it == conns_.end()) break;  // failed
        while (next < todo.size() && inflight_ < kExchangeWindow) {
          Pending p;
          p.sent_ns = now;
          p.question = todo[next++];
          if (!Submit(*it->second, p, nullptr, &plan[p.question])) break;
        }
        if (next == todo.size() && inflight_ == 0) break;
        FlushDirty();
        loop_.RunOnce(std::chrono::milliseconds(1));
        closed_.clear();
        FlushDirty();
        now = NowNs();
        Expire(now);
      }
      CloseAll();
    }
    answers_ = nullptr;
    plan_ = nullptr;
    bool any = false;
    for (const auto& a : answers) any = any || !a.empty();
    if (!any && c.handshakes_full + c.handshakes_resumed == 0 && !first_error.empty()) {
      return absl::UnavailableError(first_error);
    }
    return answers;
  }

 private:
  // ------------------------------------------------------------ lanes

  // The connections of the closed or open loop, spread over the cities in
  // proportion to their shares (largest remainder, one each at least), and
  // how many queries each may have in flight.
  void SetUpLanes() {
    const auto& cities = sources->cities();
    const uint32_t total = std::max<uint32_t>(StreamConnectionsPerThread(*o, *sources), cities.size());
    std::vector<uint32_t> count(cities.size(), 1);
    uint32_t given = static_cast<uint32_t>(cities.size());
    std::vector<std::pair<double, uint32_t>> remainders;
    for (uint32_t i = 0; i < cities.size(); ++i) {
      const double want = cities[i].share * total;
      const auto whole = static_cast<uint32_t>(want);
      if (whole > 1) {
        count[i] = whole;
        given += whole - 1;
      }
      remainders.emplace_back(want - std::floor(want), i);
    }
    std::sort(remainders.begin(), remainders.end(), std::greater<>());
    for (size_t k = 0; given < total; k = (k + 1) % remainders.size(), ++given) ++count[remainders[k].second];
    lanes_of_city_.assign(cities.size(), {});
    lane_rr_.assign(cities.size(), 0);
    depth_of_city_.assign(cities.size(), kOpenLoopDepth);
    for (uint32_t i = 0; i < cities.size(); ++i) {
      for (uint32_t k = 0; k < count[i]; ++k) {
        lanes_of_city_[i].push_back(static_cast<uint32_t>(lanes_.size()));
        lanes_.push_back(Lane{i, nullptr, 0});
      }
      if (!o->rate) {
        // Closed loop: the city's share of the outstanding queries, over its lanes.
        const double depth = std::ceil(o->outstanding * cities[i].share / count[i]);
        depth_of_city_[i] = std::clamp<uint32_t>(static_cast<uint32_t>(depth), 1, kOpenLoopDepth);
      }
    }
  }

  uint32_t Depth(const Conn& conn) const {
    uint32_t depth = plan_ != nullptr ? kExchangeWindow : depth_of_city_[conn.city];
    if (conn.h2 && conn.phase == Phase::kOpen) depth = std::min(depth, conn.h2->remote_max_streams());
    return depth;
  }

  bool Accepts(const Conn& conn) const {
    return !conn.retiring && conn.pending.size() < Depth(conn) &&
           (o->queries_per_connection == 0 || conn.queries < o->queries_per_connection);
  }

  // A connection of `city` that takes a query now, opening one in a lane
  // that has none; null when every lane is full or waiting to reconnect.
  Conn* ConnFor(uint32_t city, uint64_t now) {
    const std::vector<uint32_t>& lanes = lanes_of_city_[city];
    for (size_t k = 0; k < lanes.size(); ++k) {
      const uint32_t li = lanes[(lane_rr_[city] + k) % lanes.size()];
      Lane& lane = lanes_[li];
      if (lane.active == nullptr) {
        if (now < lane.retry_ns) continue;
        lane.active = OpenConn(city, li, NextSource(city), now);
        if (lane.active == nullptr) {
          lane.retry_ns = now + kReconnectBackoffNs;
          continue;
        }
      }
      if (Accepts(*lane.active)) {
        lane_rr_[city] = static_cast<uint32_t>((lane_rr_[city] + k + 1) % lanes.size());
        return lane.active;
      }
    }
    return nullptr;
  }

  uint32_t NextSource(uint32_t city) {
    const std::vector<uint32_t>& list = sources->cities()[city].sources;
    return list[source_rr_[city]++ % list.size()];
  }

  // The city owed the most queries (or connections): the same smooth
  // weighted round-robin as the UDP sender's.
  uint32_t PickCity() const {
    uint32_t city = 0;
    for (uint32_t i = 1; i < city_owed_.size(); ++i) {
      if (city_owed_[i] > city_owed_[city]) city = i;
    }
    return city;
  }
  void ChargeCity(uint32_t city) {
    if (city_owed_.size() < 2) return;
    for (uint32_t i = 0; i < city_owed_.size(); ++i) city_owed_[i] += sources->cities()[i].share;
    city_owed_[city] -= 1;
  }

  // ------------------------------------------------------------ sending

  double Allowed(uint64_t start, uint64_t now, double total_rate) const {
    const double t = static_cast<double>(now - start) / 1e9;
    const double r = total_rate / o->threads;
    if (o->ramp_s > 0 && t < o->ramp_s) return r * t * t / (2 * o->ramp_s);
    return r * (t - o->ramp_s / 2);
  }

  void SendDue(uint64_t start, uint64_t now) {
    uint64_t budget;
    if (o->rate) {
      const double allowed = Allowed(start, now, *o->rate);
      budget = allowed > static_cast<double>(c.sent) ? static_cast<uint64_t>(allowed - c.sent) : 0;
    } else {
      budget = inflight_ < o->outstanding ? o->outstanding - inflight_ : 0;
    }
    if (count_limit != 0) budget = std::min(budget, count_limit - c.sent);
    for (uint64_t i = 0; i < budget; ++i) {
      const uint32_t city = PickCity();
      Conn* conn = ConnFor(city, now);
      if (conn == nullptr) return;  // the city's connections are full: wait for answers
      if (!SendDraw(*conn, now)) return;
      ChargeCity(city);
    }
  }

  bool SendDraw(Conn& conn, uint64_t now) {
    const Draw d = mix->Next(rng, &cursor);
    Pending p;
    p.sent_ns = now;
    p.question = d.question;
    p.weight = d.weight;
    p.miss = d.question == kMiss ? miss_seq++ : 0;
    if (!Submit(conn, p, &d, nullptr)) {
      ++c.send_errors;
      return false;
    }
    ++c.sent;
    return true;
  }

  // New-connection mode: the connections due by `now`, each with its
  // queries queued at once (they go out when its handshake is done).
  void OpenDueConnections(uint64_t start, uint64_t now) {
    const double allowed = Allowed(start, now, *o->new_connections_per_second);
    const uint32_t cap = StreamConnectionsPerThread(*o, *sources);
    while (static_cast<double>(connections_due_) < allowed) {
      if (count_limit != 0 && c.sent >= count_limit) return;
      ++connections_due_;
      if (conns_.size() >= cap) {
        ++c.connections_skipped;
        continue;
      }
      const uint32_t city = PickCity();
      ChargeCity(city);
      Conn* conn = OpenConn(city, kNoLane, NextSource(city), now);
      if (conn == nullptr) continue;
      for (uint32_t q = 0; q < o->queries_per_connection; ++q) {
        if (count_limit != 0 && c.sent >= count_limit) break;
        if (!SendDraw(*conn, now)) break;
      }
      Retire(*conn);
    }
  }

  Conn* OpenConn(uint32_t city, uint32_t lane, uint32_t source, uint64_t now) {
    const Source& src = sources->sources()[source];
    auto fd = ConnectedSocket(src, o->server, SOCK_STREAM, true);
    if (!fd.ok()) {
      ++c.connect_failures;
      NoteError(std::string(fd.status().message()));
      return nullptr;
    }
    const int one = 1;
    setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto conn = std::make_unique<Conn>();
    conn->serial = next_serial_++;
    conn->lane = lane;
    conn->source = source;
    conn->city = city;
    conn->fd = *fd;
    conn->started_ns = now;
    conn->next_id = static_cast<uint16_t>(rng());
    conn->tls = std::make_unique<TlsStream>(tls_.get());
    if (transport_ != Transport::kDot) {
      auto h2 = Http2Client::Create(authority_);
      if (!h2.ok()) {
        close(*fd);
        ++c.connect_failures;
        NoteError(std::string(h2.status().message()));
        return nullptr;
      }
      conn->h2 = std::move(*h2);
    }
    ++c.connections_opened;
    Conn* raw = conn.get();
    raw->watched = EPOLLOUT;
    loop_.Watch(raw->fd, EPOLLOUT, [this, raw](uint32_t events) { OnEvent(*raw, events); });
    handshake_deadlines_.push_back({now + timeout_ns_, raw->serial, 0, 0});
    conns_.emplace(raw->serial, std::move(conn));
    return raw;
  }

  // Queues one query on `conn`: a draw of the run, or an exchange's planned
  // question. False when it could not be written or submitted.
  bool Submit(Conn& conn, Pending p, const Draw* d, const Planned* planned) {
    uint8_t buf[kQueryCap];
    uint32_t key = 0;
    auto write = [&](uint16_t id) -> size_t {
      return d != nullptr
                 ? WriteDraw(id, *d, conn.source, p.miss, buf)
                 : WriteQuery(id, planned->qname.span(), planned->qtype, planned->qo, buf, kQueryCap);
    };
    if (transport_ == Transport::kDot) {
      uint16_t id = conn.next_id++;
      while (conn.pending.contains(id)) id = conn.next_id++;
      const size_t len = write(id);
      if (len == 0) return false;
      net::AppendFramed({buf, len}, &conn.out);
      key = id;
    } else {
      int32_t stream;
      if (json_) {
        dns::NameKey qname;
        uint16_t qtype;
        const dns::ClientSubnet* ecs = nullptr;
        if (d != nullptr) {
          AskedQuestion(d->question, p.miss, &qname, &qtype);
          if (d->ecs) ecs = &sources->sources()[conn.source].ecs;
        } else {
          qname = planned->qname;
          qtype = planned->qtype;
        }
        stream = conn.h2->Get(DohJsonTarget(o->doh_json_path, qname, qtype, ecs), kDnsJsonType);
      } else {
        // RFC 8484 4.1: ID 0, so that equal queries are equal requests.
        const size_t len = write(0);
        if (len == 0) return false;
        stream = o->doh_method == DohMethod::kGet
                     ? conn.h2->Get(DohGetTarget(o->doh_path, {buf, len}), kDnsMessageType)
                     : conn.h2->Post(o->doh_path, kDnsMessageType, {buf, len});
      }
      if (stream <= 0) return false;
      key = static_cast<uint32_t>(stream);
    }
    p.seq = next_seq_++;
    conn.pending.emplace(key, p);
    ++conn.queries;
    ++inflight_;
    query_deadlines_.push_back({p.sent_ns + timeout_ns_, conn.serial, key, p.seq});
    if (conn.lane != kNoLane && o->queries_per_connection != 0 && conn.queries >= o->queries_per_connection)
      Retire(conn);
    MarkDirty(conn);
    return true;
  }

  void MarkDirty(Conn& conn) {
    if (conn.dirty || conn.closed) return;
    conn.dirty = true;
    dirty_.push_back(conn.serial);
  }

  void FlushDirty() {
    for (size_t i = 0; i < dirty_.size(); ++i) {
      auto it = conns_.find(dirty_[i]);
      if (it == conns_.end()) continue;
      Conn& conn = *it->second;
      conn.dirty = false;
      if (conn.phase == Phase::kOpen) Flush(conn);
    }
    dirty_.clear();
  }

  // Writes what is queued (and, for DoH, what nghttp2 has to send).
  void Flush(Conn& conn) {
    if (conn.h2 && !conn.h2->Send(&conn.out)) {
      ++c.connection_errors;
      Fail(conn, conn.h2->error());
      return;
    }
    while (conn.out_off < conn.out.size()) {
      size_t n = 0;
      const TlsIo r = conn.tls->Write(conn.out.data() + conn.out_off, conn.out.size() - conn.out_off, &n);
      if (r == TlsIo::kDone) {
        conn.out_off += n;
        continue;
      }
      if (r == TlsIo::kWantWrite || r == TlsIo::kWantRead) break;
      ++c.connection_errors;
      Fail(conn, conn.tls->error());
      return;
    }
    if (conn.out_off == conn.out.size()) {
      conn.out.clear();
      conn.out_off = 0;
    }
    Watch(conn, EPOLLIN | (conn.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT)));
  }

  void Watch(Conn& conn, uint32_t events) {
    if (conn.watched == events) return;
    conn.watched = events;
    loop_.Modify(conn.fd, events);
  }

  // ------------------------------------------------------------ events

  void OnEvent(Conn& conn, uint32_t events) {
    if (conn.closed) return;
    if (conn.phase == Phase::kConnecting) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(conn.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0 && !(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
        ++c.connect_failures;
        Fail(conn, common::Cat("connect to ", o->server.ToString(), " from ", SourceText(conn), ": ",
                               std::strerror(err != 0 ? err : ECONNREFUSED)));
        return;
      }
      if (absl::Status st = conn.tls->Start(conn.fd); !st.ok()) {
        ++c.handshake_failures;
        Fail(conn, std::string(st.message()));
        return;
      }
      conn.phase = Phase::kHandshaking;
    }
    if (conn.phase == Phase::kHandshaking) {
      DoHandshake(conn);
      return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
      ReadAll(conn);
      if (conn.closed) return;
    }
    if (events & EPOLLOUT) Flush(conn);
  }

  std::string SourceText(const Conn& conn) const { return sources->sources()[conn.source].text; }

  void DoHandshake(Conn& conn) {
    const TlsIo r = conn.tls->Handshake();
    if (r == TlsIo::kWantRead || r == TlsIo::kWantWrite) {
      Watch(conn, r == TlsIo::kWantRead ? EPOLLIN : EPOLLOUT);
      return;
    }
    if (r != TlsIo::kDone) {
      ++c.handshake_failures;
      Fail(conn, common::Cat("TLS handshake with ", o->server.ToString(), " from ", SourceText(conn),
                             " failed: ", conn.tls->error()));
      return;
    }
    conn.phase = Phase::kOpen;
    const uint64_t now = NowNs();
    handshake.Record(now > conn.started_ns ? now - conn.started_ns : 0);
    if (conn.tls->resumed()) {
      ++c.handshakes_resumed;
    } else {
      ++c.handshakes_full;
    }
    Flush(conn);
    if (!conn.closed) ReadAll(conn);  // the handshake's last read may have brought data
  }

  void ReadAll(Conn& conn) {
    for (;;) {
      size_t n = 0;
      const TlsIo r = conn.tls->Read(read_buf_, sizeof read_buf_, &n);
      if (r == TlsIo::kDone) {
        Consume(conn, read_buf_, n);
        if (conn.closed) return;
        continue;
      }
      if (r == TlsIo::kWantRead || r == TlsIo::kWantWrite) break;
      if (r == TlsIo::kClosed) {
        PeerClosed(conn);
      } else {
        ++c.connection_errors;
        Fail(conn, common::Cat("TLS connection to ", o->server.ToString(), " from ", SourceText(conn), ": ",
                               conn.tls->error()));
      }
      return;
    }
    if (conn.h2) MarkDirty(conn);  // SETTINGS and PING acknowledgements, WINDOW_UPDATE
    if (conn.retiring && conn.pending.empty()) Close(conn);
  }

  void PeerClosed(Conn& conn) {
    if (conn.pending.empty()) {
      ++c.server_closes;
      Close(conn);
      return;
    }
    ++c.connection_errors;
    Fail(conn, common::Cat(o->server.ToString(), " closed the connection from ", SourceText(conn), " with ",
                           conn.pending.size(), " answers owed"));
  }

  void Consume(Conn& conn, const uint8_t* data, size_t n) {
    if (transport_ == Transport::kDot) {
      size_t off = 0;
      while (off < n) {
        const size_t take = std::min(conn.reader.Want(), n - off);
        conn.reader.Append({data + off, take});
        off += take;
        if (conn.reader.Complete()) {
          OnDotAnswer(conn, conn.reader.Message());
          conn.reader.Clear();
        }
      }
      return;
    }
    if (!conn.h2->Receive({data, n})) {
      ++c.connection_errors;
      Fail(conn, conn.h2->error());
      return;
    }
    std::vector<Http2Client::Response>& responses = conn.h2->responses();
    for (Http2Client::Response& r : responses) OnDohResponse(conn, r);
    responses.clear();
    if (conn.h2->goaway() && !conn.retiring) {
      // The server will take no new streams: a new connection takes over.
      Retire(conn);
    }
  }

  // ------------------------------------------------------------ answers

  void OnDotAnswer(Conn& conn, std::span<const uint8_t> msg) {
    if (msg.size() < dns::kHeaderSize) {
      ++c.mismatched;
      return;
    }
    auto it = conn.pending.find(dns::Load16(msg.data()));
    if (it == conn.pending.end()) {
      ++c.mismatched;  // late (timed out), duplicated or forged
      return;
    }
    dns::Message m;
    if (m.Parse(msg, popts) != dns::ParseError::kOk || !(m.flags() & dns::flag::kQr) ||
        !Asked(m.qname(), m.qtype(), it->second)) {
      ++c.mismatched;
      return;
    }
    const Pending p = it->second;
    conn.pending.erase(it);
    --inflight_;
    Answered(conn, p, msg, &m, nullptr);
  }

  void OnDohResponse(Conn& conn, Http2Client::Response& r) {
    auto it = conn.pending.find(static_cast<uint32_t>(r.stream_id));
    if (it == conn.pending.end()) return;  // a stream cancelled at its timeout
    const Pending p = it->second;
    conn.pending.erase(it);
    --inflight_;
    if (r.status > 0) ++c.http_status[r.status < 600 ? r.status : 0];
    if (r.error_code != 0 && !r.too_large) {
      ++c.stream_resets;
      return;
    }
    if (r.too_large || r.status != 200) {
      ++c.http_errors;
      if (r.status != 200)
        NoteError(common::Cat("HTTP status ", r.status, " from ", o->server.ToString(), " (",
                              std::string_view(reinterpret_cast<const char*>(r.body.data()),
                                               std::min<size_t>(r.body.size(), 200)),
                              ")"));
      return;
    }
    if (json_) {
      auto a = ParseDnsJson({reinterpret_cast<const char*>(r.body.data()), r.body.size()});
      if (!a.ok()) {
        ++c.http_errors;
        NoteError(common::Cat("JSON answer from ", o->server.ToString(), ": ", a.status().message()));
        return;
      }
      if (!a->has_question || !Asked(a->qname, a->qtype, p)) {
        ++c.mismatched;
        return;
      }
      Answered(conn, p, r.body, nullptr, &*a);
      return;
    }
    dns::Message m;
    if (m.Parse(r.body, popts) != dns::ParseError::kOk) {
      ++c.http_errors;
      NoteError(common::Cat("a DoH answer from ", o->server.ToString(), " is not a DNS message"));
      return;
    }
    if (!(m.flags() & dns::flag::kQr) || !Asked(m.qname(), m.qtype(), p)) {
      ++c.mismatched;
      return;
    }
    Answered(conn, p, r.body, &m, nullptr);
  }

  bool Asked(const dns::NameKey& qname, uint16_t qtype, const Pending& p) const {
    if (plan_ != nullptr) {
      const Planned& q = (*plan_)[p.question];
      return qname == q.qname && qtype == q.qtype;
    }
    return SameQuestion(qname, qtype, p.question, p.miss);
  }

  // An answer that answers its query: kept (exchange) or counted (run).
  void Answered(Conn& conn, const Pending& p, std::span<const uint8_t> body, const dns::Message* m,
                const JsonAnswer* json) {
    if (plan_ != nullptr) {
      (*answers_)[p.question].assign(body.begin(), body.end());
    } else {
      const uint64_t now = NowNs();
      const uint64_t lat = now > p.sent_ns ? now - p.sent_ns : 0;
      if (m != nullptr) {
        CountAnswer(m->rcode(), (m->flags() & dns::flag::kTc) != 0, lat, p.question, p.weight, conn.city,
                    [m](common::IpAddress* a) { return FirstAddress(*m, a); });
      } else {
        CountAnswer(json->rcode, json->tc, lat, p.question, p.weight, conn.city,
                    [json](common::IpAddress* a) {
                      if (json->addresses.empty()) return false;
                      *a = json->addresses[0];
                      return true;
                    });
      }
    }
    if (conn.retiring && conn.pending.empty()) Close(conn);
  }

  // ------------------------------------------------------------ ends

  // No more queries on `conn`; it closes once its answers are in.
  void Retire(Conn& conn) {
    conn.retiring = true;
    if (conn.lane != kNoLane && lanes_[conn.lane].active == &conn) lanes_[conn.lane].active = nullptr;
    if (conn.pending.empty() && conn.out.empty()) Close(conn);
  }

  // A failure: its reason noted, its queries lost, the connection closed
  // (the caller counted the failure by kind).
  void Fail(Conn& conn, const std::string& why) {
    NoteError(why);
    Shut(conn, false);
    if (conn.lane != kNoLane) lanes_[conn.lane].retry_ns = NowNs() + kReconnectBackoffNs;
  }

  // Closes a connection that owes nothing, politely (GOAWAY, close_notify).
  void Close(Conn& conn) { Shut(conn, true); }

  void Shut(Conn& conn, bool graceful) {
    if (conn.closed) return;
    conn.closed = true;
    if (plan_ == nullptr) c.timeouts += conn.pending.size();  // lost with the connection
    inflight_ -= static_cast<uint32_t>(conn.pending.size());
    conn.pending.clear();
    if (graceful && conn.phase == Phase::kOpen) {
      if (conn.h2) {
        conn.h2->Shutdown();
        conn.h2->Send(&conn.out);
      }
      while (conn.out_off < conn.out.size()) {
        size_t n = 0;
        if (conn.tls->Write(conn.out.data() + conn.out_off, conn.out.size() - conn.out_off, &n) !=
            TlsIo::kDone)
          break;
        conn.out_off += n;
      }
      conn.tls->Shutdown();
    }
    loop_.Unwatch(conn.fd);
    close(conn.fd);
    conn.fd = -1;
    if (conn.lane != kNoLane && lanes_[conn.lane].active == &conn) lanes_[conn.lane].active = nullptr;
    auto it = conns_.find(conn.serial);
    if (it != conns_.end()) {
      closed_.push_back(std::move(it->second));  // destroyed after the dispatch that may be running on it
      conns_.erase(it);
    }
  }

  void CloseAll() {
    std::vector<Conn*> all;
    for (auto& [serial, conn] : conns_) all.push_back(conn.get());
    for (Conn* conn : all) Close(*conn);
    closed_.clear();
    query_deadlines_.clear();
    handshake_deadlines_.clear();
  }

  void Expire(uint64_t now) {
    while (!query_deadlines_.empty() && query_deadlines_.front().at <= now) {
      const Deadline d = query_deadlines_.front();
      query_deadlines_.pop_front();
      auto ci = conns_.find(d.serial);
      if (ci == conns_.end()) continue;
      Conn& conn = *ci->second;
      auto it = conn.pending.find(d.key);
      if (it == conn.pending.end() || it->second.seq != d.seq) continue;
      conn.pending.erase(it);
      --inflight_;
      if (plan_ == nullptr) ++c.timeouts;
      if (conn.h2) {
        conn.h2->Cancel(static_cast<int32_t>(d.key));
        MarkDirty(conn);
      }
      if (conn.retiring && conn.pending.empty()) Close(conn);
    }
    while (!handshake_deadlines_.empty() && handshake_deadlines_.front().at <= now) {
      const Deadline d = handshake_deadlines_.front();
      handshake_deadlines_.pop_front();
      auto ci = conns_.find(d.serial);
      if (ci == conns_.end() || ci->second->phase == Phase::kOpen) continue;
      Conn& conn = *ci->second;
      if (conn.phase == Phase::kConnecting) {
        ++c.connect_failures;
        Fail(conn, common::Cat("connect to ", o->server.ToString(), " from ", SourceText(conn),
                               ": not connected within ", o->timeout_ms, " ms"));
      } else {
        ++c.handshake_failures;
        Fail(conn, common::Cat("TLS handshake with ", o->server.ToString(), " from ", SourceText(conn),
                               " not done within ", o->timeout_ms,
                               " ms (is the server speaking TLS on that port?)"));
      }
    }
  }

  Transport transport_ = Transport::kDot;
  bool json_ = false;
  uint64_t timeout_ns_ = 0;
  std::string authority_;
  std::unique_ptr<TlsClientContext> tls_;
  net::EventLoop loop_;
  std::vector<Lane> lanes_;
  std::vector<std::vector<uint32_t>> lanes_of_city_;
  std::vector<uint32_t> lane_rr_, source_rr_, depth_of_city_;
  std::vector<double> city_owed_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> closed_;
  std::vector<uint64_t> dirty_;
  std::deque<Deadline> query_deadlines_, handshake_deadlines_;
  uint64_t next_serial_ = 1, next_seq_ = 1;
  uint32_t inflight_ = 0;
  uint64_t connections_due_ = 0;
  // An exchange's plan and answers (null in a run).
  const std::vector<Planned>* plan_ = nullptr;
  std::vector<std::vector<uint8_t>>* answers_ = nullptr;
  uint8_t read_buf_[kReadChunk];
};

}  // namespace

std::unique_ptr<Sender> MakeStreamSender() { return std::make_unique<StreamSender>(); }

uint32_t StreamConnectionsPerThread(const Options& o, const Sources& sources) {
  if (o.new_connections_per_second) return o.connections != 0 ? o.connections : kDefaultNewConnectionCap;
  const auto cities = static_cast<uint32_t>(sources.cities().size());
  if (o.connections != 0) return std::max(o.connections, cities);
  const uint32_t for_outstanding =
      o.rate ? 1 : (o.outstanding + kDepthPerConnection - 1) / kDepthPerConnection;
  return std::max(for_outstanding, cities);
}

absl::StatusOr<std::vector<std::vector<uint8_t>>> StreamExchange(const Options& o, const QueryMix& mix,
                                                                 const Sources& sources, uint32_t source,
                                                                 const std::vector<Planned>& plan, int tries,
                                                                 bool json) {
  StreamSender s;
  s.o = &o;
  s.mix = &mix;
  s.sources = &sources;
  s.index = 0xffff;
  s.popts.weight_option_code = o.weight_option_code;
  s.rng.seed(o.seed);
  if (absl::Status st = s.Open(); !st.ok()) return st;
  return s.Exchange(source, plan, tries, json);
}

}  // namespace weir::bench
