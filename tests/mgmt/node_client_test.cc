// The push stream end to end in one process: MgmtServer, NodeClients with
// apply functions that accept or reject, the stored snapshot.
#include "weir/mgmt/node_client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

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
    MgmtConfig c;
    c.listen = *common::SocketAddress::Parse("127.0.0.1", port);
    c.database = dir_ + "/mgmt.db";
    c.token_file = dir_ + "/token";
    server_ = std::make_unique<MgmtServer>(c);
    ASSERT_TRUE(server_->Start().ok());
  }
  // One weirctl-style request; returns {status, text}.
  std::pair<std::string, std::string> Request(std::vector<std::string> args) {
    Message req{MsgType::kRequest, {std::string(kProtocol), kToken, "test"}};
    for (auto& a : args) req.fields.push_back(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    common::SocketAddress a = server_->bound();
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
    o.mgmt = server_->bound();
    o.token = kToken;
    o.node_id = id;
    o.kind = "fastpath";
    o.state_dir = state;
    o.reconnect_min_ms = 20;
    o.reconnect_max_ms = 100;
    return o;
  }
  NodeRecord Node(const std::string& id) {
    auto s = Store::Open(dir_ + "/mgmt.db");
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
  NodeClient client(Options("fp-1", dir_ + "/fp"), [&](const Snapshot& s) {
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
  NodeClient client(Options("fp-1", dir_ + "/fp"), [&](const Snapshot&) {
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
  NodeClient client(Options("fp-1", ""), [](const Snapshot&) { return absl::OkStatus(); });
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
  NodeClient client(Options("fp-1", ""), [&](const Snapshot&) {
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
  NodeClient a(Options("twin", ""), [](const Snapshot&) { return absl::OkStatus(); });
  ASSERT_TRUE(a.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return Node("twin").node_id == "twin"; }));
  NodeClient b(Options("twin", ""), [](const Snapshot&) { return absl::OkStatus(); });
  ASSERT_TRUE(b.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] {
    return a.last_error().find("replaced by a newer connection with node_id twin") != std::string::npos;
  }));
}

TEST_F(NodeClientTest, BadTokenIsRefused) {
  NodeClientOptions o = Options("fp-x", "");
  o.token = "wrong-token-wrong-token";
  NodeClient client(o, [](const Snapshot&) { return absl::OkStatus(); });
  ASSERT_TRUE(client.Start(0, "").ok());
  ASSERT_TRUE(WaitFor([&] { return client.last_error().find("bad token") != std::string::npos; }));
  EXPECT_EQ(Node("fp-x").node_id, "");
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

}  // namespace
}  // namespace weir::mgmt
