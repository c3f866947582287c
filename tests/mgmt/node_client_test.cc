// The push stream end to end in one process: MgmtServer, NodeClients with
// apply functions that accept or reject, the stored snapshot.
#include "weir/mgmt/node_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "weir/common/config_file.h"
#include "weir/common/prometheus.h"
#include "weir/mgmt/node_config.h"
#include "weir/mgmt/server.h"
#include "weir/mgmt/store.h"

namespace weir::mgmt {
namespace {

constexpr char kToken[] = "node-client-test-token";

bool WaitFor(const std::function<bool()>& cond, int ms = 5000) {
  for (int i = 0; i < ms / 5; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

class NodeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weir-node-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/token") << kToken << "\n";
    StartServer(0);
  }
  void TearDown() override {
    server_.reset();
    std::system(("rm -rf " + dir_).c_str());
  }
  void StartServer(uint16_t port) {
    server_ = NewServer(dir_ + "/mgmt.db", port);
    ASSERT_NE(server_, nullptr);
  }
  // A weir-mgmt of its own database (another origin), sharing nothing with server_.
  std::unique_ptr<MgmtServer> NewServer(const std::string& database, uint16_t port) {
    MgmtConfig c;
    c.listen = *common::SocketAddress::Parse("127.0.0.1", port);
    c.database = database;
    c.token_file = dir_ + "/token";
    auto s = std::make_unique<MgmtServer>(c);
    if (!s->Start().ok()) return nullptr;
    return s;
  }
  // One weirctl-style request; returns {status, text}.
  std::pair<std::string, std::string> Request(std::vector<std::string> args) {
    return RequestTo(server_->bound(), std::move(args));
  }
  std::pair<std::string, std::string> RequestTo(const common::SocketAddress& a,
                                                std::vector<std::string> args) {
    Message req{MsgType::kRequest, {std::string(kProtocol), kToken, "test"}};
    for (auto& x : args) req.fields.push_back(x);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(fd, a.sa(), a.len), 0);
    std::string out = Encode(req);
    EXPECT_EQ(send(fd, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
    FrameReader r;
    char buf[4096];
    for (;;) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      r.Feed(std::string_view(buf, static_cast<size_t>(n)));
      auto m = r.Next();
      if (m.ok() && m->has_value()) {
        close(fd);
        const Message& rep = **m;
        return {rep.fields.size() > 0 ? rep.fields[0] : "", rep.fields.size() > 1 ? rep.fields[1] : ""};
      }
    }
    close(fd);
    return {"", ""};
  }
  NodeClientOptions Options(const std::string& id, const std::string& state) {
    NodeClientOptions o;
    o.mgmt = {server_->bound()};
    o.token = kToken;
    o.node_id = id;
    o.kind = "fastpath";
    o.state_dir = state;
    o.reconnect_min_ms = 20;
    o.reconnect_max_ms = 100;
    return o;
  }
  NodeRecord Node(const std::string& id) { return NodeIn(dir_ + "/mgmt.db", id); }
  NodeRecord NodeIn(const std::string& database, const std::string& id) {
    auto s = Store::Open(database);
    EXPECT_TRUE(s.ok());
    auto nodes = (*s)->Nodes();
    EXPECT_TRUE(nodes.ok());
    if (!nodes.ok()) return {};
    for (const NodeRecord& r : *nodes) {
      if (r.node_id == id) return r;
    }
    return {};
  }

  std::string dir_;
  std::unique_ptr<MgmtServer> server_;
};

TEST_F(NodeClientTest, AppliesAcksAndStores) {
  ASSERT_EQ(mkdir((dir_ + "/fp").c_str(), 0700), 0);
  std::mutex mu;
  std::vector<uint64_t> applied;
  NodeClient client(Options("fp-1", dir_ + "/fp"), [&](const Snapshot& s, const SnapshotParts&) {
    std::lock_guard<std::mutex> l(mu);
    applied.push_back(s.version);
    return absl::OkStatus();
  });
  ASSERT_TRUE(client.Start(0, "").ok());
  // Version 0 is what it has: nothing to push yet.
  ASSERT_TRUE(WaitFor([&] { return Node("fp-1").node_id == "fp-1"; }));
  EXPECT_EQ(Request({"tag-add", "cdn.example weight=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return Node("fp-1").acked_version == 1; }));
  EXPECT_EQ(Request({"citymap-import", "10.0.0.0/8,bj,192.0.2.0/24\n"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return Node("fp-1").acked_version == 2; }));
  EXPECT_EQ(client.applied_version(), 2u);
  EXPECT_TRUE(client.connected());
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(applied, (std::vector<uint64_t>{1, 2}));
  }
  auto stored = LoadPersistedSnapshot(dir_ + "/fp");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->version, 2u);
  EXPECT_EQ(stored->citymap, "10.0.0.0/8,bj,192.0.2.0/24\n");
  EXPECT_EQ(stored->tags, "cdn.example. weight=on ecs=off policy=iterate answer=single level=global\n");
}

TEST_F(NodeClientTest, RejectionIsNackedAndTheLastGoodKept) {
  ASSERT_EQ(mkdir((dir_ + "/fp").c_str(), 0700), 0);
  std::atomic<bool> accept{true};
  NodeClient client(Options("fp-1", dir_ + "/fp"), [&](const Snapshot&, const SnapshotParts&) {
    return accept.load() ? absl::OkStatus() : absl::InvalidArgumentError("tags: too many for this node");
  });
  ASSERT_TRUE(client.Start(0, "").ok());
  EXPECT_EQ(Request({"tag-add", "a.example weight=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return Node("fp-1").acked_version == 1; }));
  accept = false;
  EXPECT_EQ(Request({"tag-add", "b.example weight=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return Node("fp-1").nack_version == 2; }));
  NodeRecord n = Node("fp-1");
  EXPECT_EQ(n.acked_version, 1u);
  EXPECT_EQ(n.nack_reason, "tags: too many for this node");
  EXPECT_EQ(client.applied_version(), 1u);
  EXPECT_EQ(client.rejected(), 1u);
  EXPECT_EQ(LoadPersistedSnapshot(dir_ + "/fp")->version, 1u);
  // The nodes listing says so.
  auto [st, text] = Request({"nodes"});
  EXPECT_EQ(st, "ok");
  EXPECT_NE(text.find("state=rejected 2: tags: too many for this node"), std::string::npos) << text;
}

TEST_F(NodeClientTest, ReconnectsWhenMgmtComesBack) {
  NodeClient client(Options("fp-1", ""),
                    [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  ASSERT_TRUE(client.Start(0, "").ok());
  EXPECT_EQ(Request({"tag-add", "a.example weight=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 1; }));
  const uint16_t port = server_->bound().port();
  server_.reset();
  ASSERT_TRUE(WaitFor([&] { return !client.connected(); }));
  // Changed while the node was away: it gets the newer version on reconnect.
  {
    auto s = Store::Open(dir_ + "/mgmt.db");
    ASSERT_TRUE((*s)->AddTag("b.example", false, "offline").ok());
  }
  StartServer(port);
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 2; }));
  EXPECT_TRUE(client.connected());
}

TEST_F(NodeClientTest, AnEmptyDatabaseNeverOverwritesANodeAndOriginsAreCompared) {
  // The node runs version 5 of another database; this one is new (version 0).
  std::atomic<int> applies{0};
  NodeClient client(Options("fp-1", ""), [&](const Snapshot&, const SnapshotParts&) {
    applies.fetch_add(1);
    return absl::OkStatus();
  });
  ASSERT_TRUE(client.Start(5, "0123abcd-old-database").ok());
  ASSERT_TRUE(WaitFor([&] { return Node("fp-1").node_id == "fp-1"; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(applies.load(), 0);
  EXPECT_EQ(client.applied_version(), 5u);
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(Node("fp-1").acked_version, 0u) << "a version of another database is not this one's";
  // Version 1 here is lower than 5 but of this database: it is pushed.
  EXPECT_EQ(Request({"tag-add", "a.example weight=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 1; }));
  EXPECT_EQ(applies.load(), 1);
}

TEST_F(NodeClientTest, TwoNodesWithOneIdAreTold) {
  NodeClient a(Options("twin", ""), [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  ASSERT_TRUE(a.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return Node("twin").node_id == "twin"; }));
  NodeClient b(Options("twin", ""), [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  ASSERT_TRUE(b.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] {
    return a.last_error().find("replaced by a newer connection with node_id twin") != std::string::npos;
  }));
}

TEST_F(NodeClientTest, BadTokenIsRefused) {
  NodeClientOptions o = Options("fp-x", "");
  o.token = "wrong-token-wrong-token";
  NodeClient client(o, [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  ASSERT_TRUE(client.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return client.last_error().find("bad token") != std::string::npos; }));
  EXPECT_EQ(Node("fp-x").node_id, "");
}

// A port nothing listens on: bound, so no other test takes it, and a
// connect to it is refused at once.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    address_ = *common::SocketAddress::Parse("127.0.0.1:0");
    EXPECT_EQ(bind(fd_, address_.sa(), address_.len), 0);
    socklen_t len = sizeof(address_.storage);
    getsockname(fd_, address_.sa(), &len);
  }
  ~RefusingPort() { close(fd_); }
  const common::SocketAddress& address() const { return address_; }

 protected:
  int fd_ = -1;
  common::SocketAddress address_;
};

// A scripted weir-mgmt: the test accepts its connections and reads and
// writes them frame by frame.
class FakeMgmt : public RefusingPort {
 public:
  struct Conn {
    int fd = -1;
    FrameReader reader;
    ~Conn() {
      if (fd >= 0) close(fd);
    }
    // The next message; nullopt on EOF, an error or after `ms`.
    std::optional<Message> Read(int ms = 5000) {
      for (;;) {
        auto m = reader.Next();
        if (!m.ok()) return std::nullopt;
        if (m->has_value()) return **m;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, ms) != 1) return std::nullopt;
        char buf[65536];
        const ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) return std::nullopt;
        reader.Feed(std::string_view(buf, static_cast<size_t>(n)));
      }
    }
    void Send(const Message& m) {
      const std::string out = Encode(m);
      EXPECT_EQ(send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
    }
  };

  explicit FakeMgmt(int backlog = 16) { EXPECT_EQ(listen(fd_, backlog), 0); }
  int fd() const { return fd_; }
  // The next connection (fd -1 when none came within `ms`).
  std::unique_ptr<Conn> Accept(int ms = 5000) {
    auto c = std::make_unique<Conn>();
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, ms) == 1) c->fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    return c;
  }
};

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string Metrics(const NodeClient& client) {
  common::PrometheusWriter w;
  client.RenderMetrics(w);
  auto text = w.Render();
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST_F(NodeClientTest, SkipsAnAddressThatRefuses) {
  RefusingPort dead;
  NodeClientOptions o = Options("fp-1", "");
  o.mgmt = {dead.address(), server_->bound()};
  o.reconnect_min_ms = 10000;  // a back-off would make the wait below fail
  o.reconnect_max_ms = 10000;
  NodeClient client(o, [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  ASSERT_TRUE(client.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return client.current_mgmt() == server_->bound().ToString(); }, 2000))
      << client.last_error();
  EXPECT_TRUE(client.connected());
  ASSERT_TRUE(WaitFor([&] { return Node("fp-1").node_id == "fp-1"; }));
  EXPECT_EQ(client.failovers(), 0u) << "no session was lost";
}

TEST_F(NodeClientTest, ABlackHoledAddressCostsOneConnectTimeout) {
  // A listener whose accept queue is full: the kernel drops further SYNs,
  // as a firewall that drops them (or a host that is gone) does.
  FakeMgmt hole(0);
  std::vector<int> fillers;
  for (int i = 0; i < 3; ++i) {
    const int f = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    connect(f, hole.address().sa(), hole.address().len);
    fillers.push_back(f);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the handshakes that complete
  NodeClientOptions o = Options("fp-1", "");
  o.mgmt = {hole.address(), server_->bound()};
  NodeClient client(o, [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(client.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return client.current_mgmt() == server_->bound().ToString(); }, 3000))
      << client.last_error();
  const int64_t ms = MsSince(t0);
  EXPECT_GE(ms, 900) << "the black hole was not one";
  EXPECT_LT(ms, 2000);
  EXPECT_NE(client.last_error().find("connect: timed out"), std::string::npos) << client.last_error();
  for (int f : fillers) close(f);
}

TEST_F(NodeClientTest, MovesToAnotherMgmtWithinTwoSecondsOfLosingOne) {
  // Two weir-mgmt that share nothing: the second's database is another one
  // (another origin) at a lower version, which the node takes all the same.
  std::unique_ptr<MgmtServer> second = NewServer(dir_ + "/second.db", 0);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(RequestTo(second->bound(), {"tag-add", "second.example weight=on"}).first, "ok");
  EXPECT_EQ(Request({"tag-add", "a.example weight=on"}).first, "ok");
  EXPECT_EQ(Request({"tag-add", "b.example weight=on"}).first, "ok");
  std::mutex mu;
  std::vector<Snapshot> applied;
  NodeClientOptions o = Options("fp-1", "");
  o.mgmt = {server_->bound(), second->bound()};
  o.reconnect_min_ms = 200;  // the defaults
  o.reconnect_max_ms = 5000;
  NodeClient client(o, [&](const Snapshot& s, const SnapshotParts&) {
    std::lock_guard<std::mutex> l(mu);
    applied.push_back(s);
    return absl::OkStatus();
  });
  ASSERT_TRUE(client.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 2; }));
  EXPECT_EQ(client.current_mgmt(), server_->bound().ToString());
  const std::string first_origin = applied.back().origin;

  const Clock::time_point t0 = Clock::now();
  server_.reset();
  ASSERT_TRUE(WaitFor(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return applied.back().origin != first_origin;
      },
      2000));
  const int64_t ms = MsSince(t0);
  std::printf("failover to the second mgmt and its snapshot applied in %lld ms\n",
              static_cast<long long>(ms));
  EXPECT_LT(ms, 2000);
  EXPECT_EQ(client.current_mgmt(), second->bound().ToString());
  EXPECT_EQ(client.applied_version(), 1u);
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(applied.back().tags,
              "second.example. weight=on ecs=off policy=iterate answer=single level=global\n");
  }
  ASSERT_TRUE(WaitFor([&] { return NodeIn(dir_ + "/second.db", "fp-1").acked_version == 1; }));
  EXPECT_EQ(client.failovers(), 1u);
  const std::string metrics = Metrics(client);
  EXPECT_NE(metrics.find("\nweir_mgmt_failovers_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nweir_mgmt_connected 1\n"), std::string::npos) << metrics;

  // The second goes too: nothing is left, the node says so and keeps what it runs.
  second.reset();
  ASSERT_TRUE(WaitFor([&] { return !client.connected(); }));
  EXPECT_EQ(client.current_mgmt(), "");
  EXPECT_EQ(client.applied_version(), 1u);
}

TEST_F(NodeClientTest, BacksOffOnlyAfterEveryAddressFailed) {
  // Two instances that accept and hang up: each attempt is seen, in order.
  FakeMgmt a;
  FakeMgmt b;
  NodeClientOptions o = Options("fp-1", "");
  o.mgmt = {a.address(), b.address()};
  o.reconnect_min_ms = 400;
  o.reconnect_max_ms = 800;
  NodeClient client(o, [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  ASSERT_TRUE(client.Start(0, "").ok());
  std::string order;
  std::vector<Clock::time_point> at;
  while (order.size() < 6) {
    pollfd p[2] = {{a.fd(), POLLIN, 0}, {b.fd(), POLLIN, 0}};
    ASSERT_GT(poll(p, 2, 5000), 0) << "attempts so far: " << order;
    for (int i = 0; i < 2; ++i) {
      if ((p[i].revents & POLLIN) == 0) continue;
      const int fd = accept4(p[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      at.push_back(Clock::now());
      order += static_cast<char>('a' + i);
      close(fd);
    }
  }
  EXPECT_EQ(order, "ababab");
  auto gap = [&](size_t i) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(at[i] - at[i - 1]).count();
  };
  EXPECT_LT(gap(1), 300) << "the next address at once";
  EXPECT_GE(gap(2), 390) << "a whole round failed: the back-off";
  EXPECT_LT(gap(3), 300);
  EXPECT_GE(gap(4), 790) << "doubled";
  EXPECT_LT(gap(5), 300);
}

constexpr char kFakeTags[] = "a.example weight=on\n";

TEST_F(NodeClientTest, AnOlderVersionOfTheSameDatabaseIsRefusedAndTheSessionKept) {
  FakeMgmt fake;
  std::atomic<int> applies{0};
  NodeClientOptions o = Options("fp-1", "");
  o.mgmt = {fake.address()};
  NodeClient client(o, [&](const Snapshot&, const SnapshotParts&) {
    applies.fetch_add(1);
    return absl::OkStatus();
  });
  ASSERT_TRUE(client.Start(5, "origin-A").ok());
  auto c = fake.Accept();
  ASSERT_GE(c->fd, 0);
  auto hello = c->Read();
  ASSERT_TRUE(hello.has_value());
  ASSERT_EQ(hello->type, MsgType::kHello);
  ASSERT_EQ(hello->fields.size(), 7u);
  EXPECT_EQ(hello->fields[4], "5");
  EXPECT_EQ(hello->fields[5], "origin-A");
  // Started from a version without its content: no deltas offered.
  EXPECT_EQ(hello->fields[6], "");

  c->Send(SnapshotMessage(Snapshot{3, kFakeTags, "", "origin-A"}));
  auto nack = c->Read();
  ASSERT_TRUE(nack.has_value());
  EXPECT_EQ(nack->type, MsgType::kNack);
  EXPECT_EQ(nack->fields, (std::vector<std::string>{"3", "older than version 5 this node runs"}));
  EXPECT_EQ(applies.load(), 0);
  EXPECT_EQ(client.applied_version(), 5u);
  EXPECT_EQ(client.rejected(), 1u);
  EXPECT_NE(client.last_error().find("older than version 5"), std::string::npos) << client.last_error();

  // The session stays, and a newer version on it is applied.
  c->Send(SnapshotMessage(Snapshot{6, kFakeTags, "", "origin-A"}));
  auto ack = c->Read();
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->type, MsgType::kAck);
  EXPECT_EQ(ack->fields, (std::vector<std::string>{"6"}));
  EXPECT_EQ(applies.load(), 1);
  EXPECT_EQ(client.applied_version(), 6u);
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(fake.Accept(100)->fd, -1) << "the node reconnected";
}

TEST_F(NodeClientTest, TheVersionTheNodeRunsIsAckedWithoutApplyingAgain) {
  FakeMgmt fake;
  std::atomic<int> applies{0};
  NodeClientOptions o = Options("fp-1", "");
  o.mgmt = {fake.address()};
  NodeClient client(o, [&](const Snapshot&, const SnapshotParts&) {
    applies.fetch_add(1);
    return absl::OkStatus();
  });
  ASSERT_TRUE(client.Start(5, "origin-A").ok());
  auto c = fake.Accept();
  ASSERT_GE(c->fd, 0);
  ASSERT_TRUE(c->Read().has_value());  // HELLO
  c->Send(SnapshotMessage(Snapshot{5, kFakeTags, "", "origin-A"}));
  auto ack = c->Read();
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->type, MsgType::kAck);
  EXPECT_EQ(ack->fields, (std::vector<std::string>{"5"}));
  EXPECT_EQ(applies.load(), 0);
  EXPECT_EQ(client.rejected(), 0u);
  // Another database's version is applied, lower or not.
  c->Send(SnapshotMessage(Snapshot{2, kFakeTags, "", "origin-B"}));
  ack = c->Read();
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->type, MsgType::kAck);
  EXPECT_EQ(ack->fields, (std::vector<std::string>{"2"}));
  EXPECT_EQ(applies.load(), 1);
  EXPECT_EQ(client.applied_version(), 2u);
}

// ParseNodeMgmt on "[mgmt]" + `address_line` + the required keys.
struct ParsedNodeMgmt {
  NodeMgmtConfig config;
  std::string errors;
};
ParsedNodeMgmt ParseMgmtTable(const std::string& address_line) {
  const std::string text =
      "[mgmt]\n" + address_line + "\nnode_id = \"n\"\ntoken_file = \"t\"\nstate_dir = \"s\"\n";
  ParsedNodeMgmt out;
  auto root = common::ParseToml(text, "n.toml");
  if (!root.ok()) {
    out.errors = std::string(root.status().message());
    return out;
  }
  common::TomlChecker c("n.toml");
  ParseNodeMgmt(c, *root, "fastpath", &out.config);
  out.errors = c.error();
  return out;
}

std::vector<std::string> Texts(const std::vector<common::SocketAddress>& addresses) {
  std::vector<std::string> out;
  for (const auto& a : addresses) out.push_back(a.ToString());
  return out;
}

TEST(NodeMgmtConfig, AddressIsOneOrAnArray) {
  auto p = ParseMgmtTable("");
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(Texts(p.config.addresses), (std::vector<std::string>{"127.0.0.1:8054"}));
  p = ParseMgmtTable("address = \"192.0.2.1:9000\"");
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(Texts(p.config.addresses), (std::vector<std::string>{"192.0.2.1:9000"}));
  p = ParseMgmtTable("address = [\"192.0.2.2:9000\", \"192.0.2.1\", \"[2001:db8::1]:8055\"]");
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(Texts(p.config.addresses),
            (std::vector<std::string>{"192.0.2.2:9000", "192.0.2.1:8054", "[2001:db8::1]:8055"}))
      << "in the order written, the default port added";
  std::string sixteen = "address = [";
  for (int i = 1; i <= 16; ++i) sixteen += (i > 1 ? ", \"192.0.2." : "\"192.0.2.") + std::to_string(i) + "\"";
  p = ParseMgmtTable(sixteen + "]");
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(p.config.addresses.size(), 16u);
}

TEST(NodeMgmtConfig, AddressErrorsNameTheirPosition) {
  auto p = ParseMgmtTable("address = []");
  EXPECT_EQ(p.errors, "n.toml:2:11: [mgmt] address: the array is empty (list 1 to 16 weir-mgmt addresses)");
  p = ParseMgmtTable("address = [\"192.0.2.1\", 8054]");
  EXPECT_EQ(p.errors, "n.toml:2:25: [mgmt] address: every entry must be a string (\"ip:port\")");
  p = ParseMgmtTable("address = [\"192.0.2.1\", \"nowhere\"]");
  EXPECT_NE(p.errors.find("n.toml:2:25: [mgmt] address: "), std::string::npos) << p.errors;
  p = ParseMgmtTable("address = [\"192.0.2.1:8054\", \"192.0.2.1\"]");
  EXPECT_EQ(p.errors, "n.toml:2:30: [mgmt] address: 192.0.2.1:8054 is listed twice");
  p = ParseMgmtTable("address = 8054");
  EXPECT_EQ(p.errors, "n.toml:2:11: [mgmt] address must be a string (\"ip:port\") or an array of them");
  p = ParseMgmtTable("address = \"nowhere\"");
  EXPECT_NE(p.errors.find("n.toml:2:11: [mgmt] address: "), std::string::npos) << p.errors;
  std::string seventeen = "address = [";
  for (int i = 1; i <= 17; ++i)
    seventeen += (i > 1 ? ", \"192.0.2." : "\"192.0.2.") + std::to_string(i) + "\"";
  p = ParseMgmtTable(seventeen + "]");
  EXPECT_EQ(p.errors, "n.toml:2:11: [mgmt] address: at most 16 weir-mgmt addresses, not 17");
  EXPECT_TRUE(p.config.addresses.empty());
}

TEST(PersistedSnapshot, DamageIsDetected) {
  char tmpl[] = "/tmp/weir-snap-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  EXPECT_EQ(LoadPersistedSnapshot(dir).status().code(), absl::StatusCode::kNotFound);
  Snapshot s{9, "a.example weight=on\n", "10.0.0.0/8,bj,192.0.2.0/24\n", "origin-1"};
  ASSERT_TRUE(PersistSnapshot(dir, s).ok());
  EXPECT_EQ(*LoadPersistedSnapshot(dir), s);
  std::string data;
  {
    std::ifstream f(dir + "/snapshot", std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (size_t cut : {size_t{0}, size_t{5}, data.size() / 2, data.size() - 1}) {
    std::ofstream(dir + "/snapshot", std::ios::binary | std::ios::trunc) << data.substr(0, cut);
    EXPECT_EQ(LoadPersistedSnapshot(dir).status().code(), absl::StatusCode::kDataLoss) << cut;
  }
  std::string flipped = data;
  flipped[flipped.size() - 2] ^= 1;
  std::ofstream(dir + "/snapshot", std::ios::binary | std::ios::trunc) << flipped;
  EXPECT_EQ(LoadPersistedSnapshot(dir).status().code(), absl::StatusCode::kDataLoss);
  std::system(("rm -rf " + dir).c_str());
}

// A node reads the file the previous release wrote (and the other way round
// after a downgrade): the bytes, checksum included, are a format. This file
// was written by the release before the checksum moved to common::Fnv1a64.
TEST(PersistedSnapshot, FileFormatIsStable) {
  char tmpl[] = "/tmp/weir-snap-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const Snapshot s{9, "a.example weight=on\n", "10.0.0.0/8,bj,192.0.2.0/24\n", "origin-1"};
  const std::string body(
      "\0\0\0I\x02\0\0\0\x01"
      "9\0\0\0\x14"
      "a.example weight=on\n\0\0\0\x1b"
      "10.0.0.0/8,bj,192.0.2.0/24\n\0\0\0\x08"
      "origin-1",
      77);
  const std::string file = "weir-snapshot/1\n8f1fb1b7490c4e4b\n" + body;
  EXPECT_EQ(PersistedSnapshotChecksum(body), "8f1fb1b7490c4e4b");
  ASSERT_TRUE(PersistSnapshot(dir, s).ok());
  {
    std::ifstream f(dir + "/snapshot", std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), file);
  }
  std::ofstream(dir + "/snapshot", std::ios::binary | std::ios::trunc) << file;
  auto loaded = LoadPersistedSnapshot(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, s);
  std::system(("rm -rf " + dir).c_str());
}

TEST(MgmtConfig, ErrorsNameTheLine) {
  auto c = ParseMgmtConfig("[mgmt]\nlisten = \"127.0.0.1:1\"\ndatabase = \"x.db\"\n", "m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("token_file"), std::string::npos);
  c = ParseMgmtConfig("[mgmt]\nlisten = \"nowhere\"\ndatabase = \"x.db\"\ntoken_file = \"t\"\n", "m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("m.toml:2:"), std::string::npos) << c.status();
  c = ParseMgmtConfig("[mgmt]\ndatabse = \"x.db\"\n", "m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("unknown key 'databse'"), std::string::npos);
  c = ParseMgmtConfig("[mgmt]\ndatabase = \"/var/x.db\"\ntoken_file = \"/etc/t\"\n", "/etc/weir/m.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen.ToString(), "127.0.0.1:8054");
  EXPECT_FALSE(c->metrics_enabled);
}

TEST(MgmtConfig, MetricsListen) {
  const std::string base = "[mgmt]\ndatabase = \"/var/x.db\"\ntoken_file = \"/etc/t\"\n";
  auto c = ParseMgmtConfig(base + "metrics_listen = \"127.0.0.1\"\n", "m.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->metrics_enabled);
  EXPECT_EQ(c->metrics_listen.ToString(), "127.0.0.1:9155");
  c = ParseMgmtConfig(base + "metrics_listen = \"[::1]:0\"\n", "m.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metrics_listen.port(), 0);
  c = ParseMgmtConfig(base + "metrics_listen = \"nowhere:x\"\n", "m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("m.toml:4:"), std::string::npos) << c.status();
}

// After the first snapshot a node gets deltas: each change carries the parts
// it changed, and the apply is told which (a tag change keeps the city map).
TEST_F(NodeClientTest, ChangesArriveAsDeltasNamingTheirParts) {
  ASSERT_EQ(mkdir((dir_ + "/fp").c_str(), 0700), 0);
  std::mutex mu;
  std::vector<std::pair<uint64_t, SnapshotParts>> applied;
  Snapshot runs;
  NodeClient client(Options("fp-1", dir_ + "/fp"), [&](const Snapshot& s, const SnapshotParts& p) {
    std::lock_guard<std::mutex> l(mu);
    applied.emplace_back(s.version, p);
    runs = s;
    return absl::OkStatus();
  });
  ASSERT_TRUE(client.Start(0, "").ok());
  EXPECT_EQ(Request({"citymap-import", "10.0.0.0/8,bj,192.0.2.0/24\n"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 1; }));
  EXPECT_EQ(Request({"tag-add", "cdn.example weight=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 2; }));
  EXPECT_EQ(Request({"tag-add", "a.example ecs=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 3; }));
  EXPECT_EQ(Request({"citymap-add", "11.0.0.0/8,sh,"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 4; }));
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(applied.size(), 4u);
  // The first is a whole snapshot; then tags, tags, the city map only.
  EXPECT_TRUE(applied[0].second.tags && applied[0].second.citymap);
  EXPECT_TRUE(applied[1].second.tags);
  EXPECT_FALSE(applied[1].second.citymap);
  EXPECT_TRUE(applied[2].second.tags);
  EXPECT_FALSE(applied[2].second.citymap);
  EXPECT_FALSE(applied[3].second.tags);
  EXPECT_TRUE(applied[3].second.citymap);
  // What the deltas made is what the store holds, byte for byte.
  auto store = Store::Open(dir_ + "/mgmt.db");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(runs, (*store)->snapshot());
  const std::string metrics = Metrics(client);
  EXPECT_NE(metrics.find("weir_mgmt_deltas_total{result=\"applied\"} 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("weir_mgmt_applied_parts_total{part=\"citymap\"} 2"), std::string::npos) << metrics;
}

// A node whose stored content differs from what mgmt thinks that version
// is (a damaged or hand-edited file) refuses the delta and gets the whole
// snapshot.
TEST_F(NodeClientTest, ADeltaThatDoesNotFitBringsTheWholeSnapshot) {
  EXPECT_EQ(Request({"tag-add", "cdn.example weight=on"}).first, "ok");
  auto status = Store::Open(dir_ + "/mgmt.db");
  ASSERT_TRUE(status.ok());
  Snapshot stored = (*status)->snapshot();
  status->reset();
  stored.tags = "other.example. ecs=on\n";  // same version, other content
  std::atomic<int> applies{0};
  Snapshot runs;
  std::mutex mu;
  NodeClient client(Options("fp-1", ""), [&](const Snapshot& s, const SnapshotParts&) {
    std::lock_guard<std::mutex> l(mu);
    runs = s;
    ++applies;
    return absl::OkStatus();
  });
  ASSERT_TRUE(client.Start(stored).ok());
  EXPECT_EQ(Request({"tag-add", "a.example ecs=on"}).first, "ok");
  ASSERT_TRUE(WaitFor([&] { return client.applied_version() == 2; }));
  std::lock_guard<std::mutex> l(mu);
  auto store = Store::Open(dir_ + "/mgmt.db");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(runs, (*store)->snapshot());
  EXPECT_EQ(applies.load(), 1);
  const std::string metrics = Metrics(client);
  EXPECT_NE(metrics.find("weir_mgmt_deltas_total{result=\"refused\"} 1"), std::string::npos) << metrics;
  EXPECT_EQ(client.rejected(), 0u);
}

TEST(MgmtConfig, TlsMakesTheTokenOptional) {
  const std::string base = "[mgmt]\nlisten = \"127.0.0.1:1\"\ndatabase = \"x.db\"\n";
  auto c =
      ParseMgmtConfig(base + "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\nca_file = \"ca.pem\"\n",
                      "/etc/weir/m.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tls.enabled);
  EXPECT_EQ(c->token_file, "");
  EXPECT_EQ(c->tls.cert_file, "/etc/weir/c.pem") << "relative to the config file";
  EXPECT_EQ(c->tls.ca_file, "/etc/weir/ca.pem");
  c = ParseMgmtConfig(base + "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n", "m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("'ca_file'"), std::string::npos) << c.status();
  c = ParseMgmtConfig(base + "[tls]\ncert = \"c.pem\"\n", "m.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("unknown key 'cert'"), std::string::npos) << c.status();
  c = ParseMgmtConfig(base, "m.toml");
  ASSERT_FALSE(c.ok()) << "without [tls] the token is required";
}

ParsedNodeMgmt ParseNodeText(const std::string& text) {
  ParsedNodeMgmt out;
  auto root = common::ParseToml(text, "n.toml");
  if (!root.ok()) {
    out.errors = std::string(root.status().message());
    return out;
  }
  common::TomlChecker c("n.toml");
  ParseNodeMgmt(c, *root, "fastpath", &out.config);
  out.errors = c.error();
  return out;
}

TEST(NodeMgmtConfig, TlsFilesGoTogetherAndReplaceTheToken) {
  auto p = ParseNodeText(
      "[mgmt]\nstate_dir = \"s\"\ntls_cert_file = \"c\"\ntls_key_file = \"k\"\ntls_ca_file = \"ca\"\n"
      "tls_server_name = \"mgmt.example.net\"\n");
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(p.config.token_file, "");
  EXPECT_EQ(p.config.tls_server_name, "mgmt.example.net");
  p = ParseNodeText("[mgmt]\nstate_dir = \"s\"\ntoken_file = \"t\"\ntls_cert_file = \"c\"\n");
  EXPECT_NE(p.errors.find("go together"), std::string::npos) << p.errors;
  p = ParseNodeText("[mgmt]\nstate_dir = \"s\"\n");
  EXPECT_NE(p.errors.find("needs 'token_file'"), std::string::npos) << p.errors;
  p = ParseNodeText("[mgmt]\nstate_dir = \"s\"\ntoken_file = \"t\"\ntls_server_name = \"x\"\n");
  EXPECT_NE(p.errors.find("tls_server_name needs"), std::string::npos) << p.errors;
}

}  // namespace
}  // namespace weir::mgmt

namespace weir::mgmt {
namespace {

// A control verb answered later (the recursor's zone check): while its
// reply is pending, the node goes on taking pushes; the reply then reaches
// weir-mgmt; a reply after the session ended goes nowhere.
TEST_F(NodeClientTest, ADeferredControlReplyHoldsNoPush) {
  ASSERT_EQ(mkdir((dir_ + "/rec").c_str(), 0700), 0);
  NodeClientOptions o = Options("rec-1", dir_ + "/rec");
  o.kind = "recursor";
  NodeClient client(o, [](const Snapshot&, const SnapshotParts&) { return absl::OkStatus(); });
  std::mutex mu;
  std::vector<NodeClient::ControlReplyFn> held;
  std::vector<std::vector<std::string>> asked;
  client.SetAsyncControlHandler(std::string(kZoneCheckVerb),
                                [&](const ControlRequest& r, NodeClient::ControlReplyFn reply) {
                                  std::lock_guard<std::mutex> l(mu);
                                  asked.push_back(r.args);
                                  held.push_back(std::move(reply));
                                });
  ASSERT_TRUE(client.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return Node("rec-1").node_id == "rec-1"; }));
  // The tag add waits for the zone check; meanwhile the node gets version 1.
  std::pair<std::string, std::string> added;
  std::thread request([&] { added = Request({"tag-add", "cdn.example.net weight=on"}); });
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return !held.empty();
  }));
  ASSERT_TRUE(WaitFor([&] { return Node("rec-1").acked_version == 1; })) << "the push waited for the check";
  {
    std::lock_guard<std::mutex> l(mu);
    ASSERT_EQ(asked.size(), 1u);
    EXPECT_NE(std::find(asked[0].begin(), asked[0].end(), "name=cdn.example.net."), asked[0].end());
    // Answered from another thread: the zone is found.
    std::thread([reply = held[0]] {
      reply(ControlReply{true, "",
                         R"({"names":[{"name":"cdn.example.net.","checked":true,"zone":"example.net."}]})"});
    }).join();
  }
  request.join();
  EXPECT_EQ(added.first, "ok");
  EXPECT_EQ(added.second, "tag added: version 1\n") << "a zone found gives no warning";
  // A second check, its session gone before the reply: the late reply is dropped.
  std::thread again([&] { added = Request({"tag-add", "img.example.net weight=on"}); });
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return held.size() == 2;
  }));
  server_.reset();  // weir-mgmt goes away: the session ends, weirctl gets nothing
  again.join();
  ASSERT_TRUE(WaitFor([&] { return !client.connected(); }));
  held[1](ControlReply{true, "", "{}"});  // no crash, nothing sent
  client.Stop();
  held[1](ControlReply{true, "", "{}"});  // nor after the client stopped
}

}  // namespace
}  // namespace weir::mgmt
