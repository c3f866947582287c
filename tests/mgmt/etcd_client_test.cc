// The etcd client against a real etcd (Debian's etcd-server, started by the
// fixture on free loopback ports): the KV calls, transactions, compaction,
// member failover and the watcher across a member's restart.
#include "weir/mgmt/etcd_client.h"

#include "etcd_member.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace weir::mgmt::etcd {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using test::EtcdMember;
using test::FreePort;
using test::ListenLoopback;
using test::Url;

ClientOptions Options(std::vector<std::string> endpoints, milliseconds timeout = milliseconds(3000)) {
  ClientOptions o;
  o.endpoints = std::move(endpoints);
  o.request_timeout = timeout;
  o.connect_timeout = milliseconds(500);
  return o;
}

// What a Watcher reported, for the test thread to wait on.
struct WatchLog {
  struct Batch {
    int64_t revision;
    std::vector<WatchEvent> events;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Batch> batches;
  std::vector<int64_t> compacted;
  std::vector<std::string> errors;

  std::unique_ptr<Watcher> Make(const std::string& endpoint, const std::string& key, const std::string& end) {
    return std::make_unique<Watcher>(
        Options({endpoint}), key, end,
        [this](const std::vector<WatchEvent>& events, int64_t revision) {
          std::lock_guard lock(mu);
          batches.push_back({revision, events});
          cv.notify_all();
        },
        [this](int64_t revision) {
          std::lock_guard lock(mu);
          compacted.push_back(revision);
          cv.notify_all();
        },
        [this](const std::string& message) {
          std::lock_guard lock(mu);
          errors.push_back(message);
          cv.notify_all();
        });
  }

  bool WaitBatches(size_t n, milliseconds timeout = milliseconds(5000)) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [&] { return batches.size() >= n; });
  }
  bool WaitCompacted(milliseconds timeout = milliseconds(5000)) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [&] { return !compacted.empty(); });
  }
};

TEST(PrefixEndTest, IncrementsTheLastByteBelowFf) {
  EXPECT_EQ(PrefixEnd("a"), "b");
  EXPECT_EQ(PrefixEnd("/weir/"), "/weir0");
  EXPECT_EQ(PrefixEnd("a\xfe"), "a\xff");
  EXPECT_EQ(PrefixEnd("a\xff"), "b");
  EXPECT_EQ(PrefixEnd("a\xff\xff"), "b");
  EXPECT_EQ(PrefixEnd(std::string("\x01\x00", 2)), std::string("\x01\x01", 2));
  EXPECT_EQ(PrefixEnd("\xff"), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd("\xff\xff\xff"), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

// One etcd for the suite; each test works under its own key prefix.
class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    member_ = new EtcdMember();
    started_ = member_->Start();
  }
  static void TearDownTestSuite() {
    delete member_;
    member_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(started_) << started_.message();
    client_ = std::make_unique<Client>(Options({member_->endpoint()}));
    prefix_ = std::string("/t/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  static EtcdMember* member_;
  static ::testing::AssertionResult started_;
  std::unique_ptr<Client> client_;
  std::string prefix_;
};

EtcdMember* EtcdClientTest::member_ = nullptr;
::testing::AssertionResult EtcdClientTest::started_ = ::testing::AssertionFailure();

TEST_F(EtcdClientTest, PutRangeDelete) {
  EXPECT_EQ(client_->current_endpoint(), "");
  const std::string key = prefix_ + "k";
  auto r1 = client_->Put(key, "v1");
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(client_->current_endpoint(), member_->endpoint());
  auto r2 = client_->Put(key, "v2");
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(*r2, *r1 + 1);

  auto got = client_->Range(key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->revision, *r2);
  EXPECT_EQ(got->count, 1);
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, key);
  EXPECT_EQ(got->kvs[0].value, "v2");
  EXPECT_EQ(got->kvs[0].create_revision, *r1);
  EXPECT_EQ(got->kvs[0].mod_revision, *r2);
  EXPECT_EQ(got->kvs[0].version, 2);

  // An empty value is a value (proto3 JSON leaves it out of the answer).
  ASSERT_TRUE(client_->Put(key, "").ok());
  got = client_->Range(key);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "");
  EXPECT_EQ(got->kvs[0].version, 3);

  auto deleted = client_->Delete(key);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);
  deleted = client_->Delete(key);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 0);

  got = client_->Range(key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->kvs.empty());
  EXPECT_EQ(got->count, 0);
  EXPECT_GT(got->revision, *r2);
}

TEST_F(EtcdClientTest, PrefixRanges) {
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(client_->Put(prefix_ + "p/" + k, k).ok());
  ASSERT_TRUE(client_->Put(prefix_ + "p0", "outside").ok());  // '0' follows '/'
  ASSERT_TRUE(client_->Put(prefix_ + "o", "outside").ok());

  const std::string p = prefix_ + "p/";
  auto got = client_->Range(p, PrefixEnd(p));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 3u);
  EXPECT_EQ(got->count, 3);
  EXPECT_EQ(got->kvs[0].key, p + "a");
  EXPECT_EQ(got->kvs[1].key, p + "b");
  EXPECT_EQ(got->kvs[2].key, p + "c");
  EXPECT_EQ(got->kvs[2].value, "c");

  got = client_->Range(p, PrefixEnd(p), 0, /*keys_only=*/true, /*limit=*/2);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 2u);
  EXPECT_EQ(got->count, 3);
  EXPECT_EQ(got->kvs[1].key, p + "b");
  EXPECT_EQ(got->kvs[1].value, "");

  // Every key: the empty prefix.
  got = client_->Range("", PrefixEnd(""), 0, true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GE(got->count, 5);

  auto deleted = client_->Delete(p, PrefixEnd(p));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3);
  got = client_->Range(prefix_, PrefixEnd(prefix_));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 2u);
  EXPECT_EQ(got->kvs[0].key, prefix_ + "o");
  EXPECT_EQ(got->kvs[1].key, prefix_ + "p0");
}

TEST_F(EtcdClientTest, BinaryKeysAndValues) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string key = prefix_ + all;
  const std::string value = all + all;
  ASSERT_TRUE(client_->Put(key, value).ok());
  // Keys after every other under prefix_ + "\xff": PrefixEnd drops the 0xff.
  ASSERT_TRUE(client_->Put(prefix_ + "\xff", "ff").ok());
  ASSERT_TRUE(client_->Put(prefix_ + "\xff\xff", "ffff").ok());

  auto got = client_->Range(key);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, key);
  EXPECT_EQ(got->kvs[0].value, value);

  const std::string ff = prefix_ + "\xff";
  got = client_->Range(ff, PrefixEnd(ff));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 2u);
  EXPECT_EQ(got->kvs[1].value, "ffff");

  got = client_->Range(prefix_, PrefixEnd(prefix_));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->count, 3);
}

TEST_F(EtcdClientTest, OneMebibyteValue) {
  std::string value(1 << 20, '\0');
  std::mt19937 rng(7);
  for (char& c : value) c = static_cast<char>(rng());
  ASSERT_TRUE(client_->Put(prefix_ + "big", value).ok());
  auto got = client_->Range(prefix_ + "big");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_TRUE(got->kvs[0].value == value);
}

TEST_F(EtcdClientTest, RefusalCarriesEtcdsMessage) {
  auto put = client_->Put("", "no key");
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(put.status().message().find("key is not provided"), std::string::npos) << put.status();
  EXPECT_NE(put.status().message().find(member_->endpoint()), std::string::npos) << put.status();

  auto future = client_->Range(prefix_, {}, int64_t{1} << 40);
  ASSERT_FALSE(future.ok());
  EXPECT_NE(future.status().message().find("future revision"), std::string::npos) << future.status();
}

Compare Check(std::string key, Compare::Target target, Compare::Result result, int64_t number,
              std::string value = {}) {
  Compare c;
  c.key = std::move(key);
  c.target = target;
  c.result = result;
  c.number = number;
  c.value = std::move(value);
  return c;
}

TEST_F(EtcdClientTest, TxnBranches) {
  using T = Compare::Target;
  using R = Compare::Result;
  const std::string key = prefix_ + "k";
  // Version 0: the key does not exist yet.
  Compare absent = Check(key, T::kVersion, R::kEqual, 0);
  auto t = client_->Txn({absent}, {Op::Put(key, "first")}, {Op::Range(key)});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->succeeded);
  ASSERT_EQ(t->responses.size(), 1u);
  const int64_t created = t->revision;

  t = client_->Txn({absent}, {Op::Put(key, "second")}, {Op::Range(key)});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->succeeded);
  EXPECT_EQ(t->revision, created);  // nothing written
  ASSERT_EQ(t->responses.size(), 1u);
  ASSERT_EQ(t->responses[0].kvs.size(), 1u);
  EXPECT_EQ(t->responses[0].count, 1);
  EXPECT_EQ(t->responses[0].kvs[0].value, "first");
  EXPECT_EQ(t->responses[0].kvs[0].mod_revision, created);

  // Compare-and-swap on the mod revision: the current one wins, a stale one loses.
  Compare at = Check(key, T::kMod, R::kEqual, created);
  t = client_->Txn({at}, {Op::Put(key, "swapped"), Op::Put(prefix_ + "other", "x")}, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->succeeded);
  EXPECT_EQ(t->revision, created + 1);  // one revision for the whole transaction
  EXPECT_EQ(t->responses.size(), 2u);
  t = client_->Txn({at}, {Op::Put(key, "lost")}, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->succeeded);
  EXPECT_TRUE(t->responses.empty());

  Compare newer = Check(key, T::kMod, R::kGreater, created);
  Compare value_is = Check(key, T::kValue, R::kEqual, 0, "swapped");
  t = client_->Txn({newer, value_is}, {Op::Delete(prefix_, PrefixEnd(prefix_)), Op::Range(key)}, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->succeeded);
  ASSERT_EQ(t->responses.size(), 2u);
  EXPECT_EQ(t->responses[0].deleted, 2);
  EXPECT_TRUE(t->responses[1].kvs.empty());
  EXPECT_EQ(t->responses[1].count, 0);

  Compare value_not = Check(key, T::kValue, R::kNotEqual, 0, "swapped");
  ASSERT_TRUE(client_->Put(key, "swapped").ok());
  t = client_->Txn({value_not}, {Op::Put(key, "changed")}, {Op::Delete(key)});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->succeeded);
  ASSERT_EQ(t->responses.size(), 1u);
  EXPECT_EQ(t->responses[0].deleted, 1);
}

TEST_F(EtcdClientTest, RangeAtOldRevisionAndCompaction) {
  const std::string key = prefix_ + "k";
  auto r1 = client_->Put(key, "old");
  auto r2 = client_->Put(key, "new");
  ASSERT_TRUE(r1.ok() && r2.ok());
  auto got = client_->Range(key, {}, *r1);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "old");

  ASSERT_TRUE(client_->Compact(*r2).ok());
  got = client_->Range(key, {}, *r1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange) << got.status();
  EXPECT_NE(got.status().message().find("compacted"), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find(member_->endpoint()), std::string::npos) << got.status();
  got = client_->Range(key, {}, *r2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kvs[0].value, "new");
  // Compacting at or below the compacted revision is refused the same way.
  EXPECT_EQ(client_->Compact(*r1).code(), absl::StatusCode::kOutOfRange);
}

TEST_F(EtcdClientTest, FailsOverFromADeadMember) {
  const std::string dead = Url(FreePort());
  Client client(Options({dead, member_->endpoint()}));
  auto put = client.Put(prefix_ + "k", "v");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(client.current_endpoint(), member_->endpoint());
  auto got = client.Range(prefix_ + "k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(client.current_endpoint(), member_->endpoint());

  Client none(Options({dead, Url(FreePort())}));
  auto failed = none.Range(prefix_ + "k");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find(dead), std::string::npos) << failed.status();
}

TEST_F(EtcdClientTest, SilentMemberTimesOut) {
  // The kernel completes the handshake into the backlog; nobody reads.
  int port = 0;
  int fd = ListenLoopback(&port);
  ASSERT_GE(fd, 0);
  Client client(Options({Url(port)}, milliseconds(300)));

  auto start = Clock::now();
  auto got = client.Range("/k");
  auto took = Clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_NE(got.status().message().find(Url(port)), std::string::npos) << got.status();
  EXPECT_LT(took, milliseconds(1000));

  // A write that may have reached the member is not "unavailable": the
  // caller must read back before repeating it.
  start = Clock::now();
  auto put = client.Put("/k", "v");
  took = Clock::now() - start;
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnknown) << put.status();
  EXPECT_LT(took, milliseconds(1000));
  close(fd);
}

TEST_F(EtcdClientTest, WatcherDeliversPutsAndDeletesByRevision) {
  const std::string p = prefix_;
  auto now = client_->Range(p);
  ASSERT_TRUE(now.ok());
  WatchLog log;
  auto watcher = log.Make(member_->endpoint(), p, PrefixEnd(p));
  watcher->Start(now->revision + 1);
  EXPECT_EQ(watcher->next_revision(), now->revision + 1);

  auto ra = client_->Put(p + "a", "1");
  auto rb = client_->Put(p + "b", "2");
  auto rd = client_->Delete(p + "a");
  auto rt = client_->Txn({}, {Op::Put(p + "c", "3"), Op::Put(p + "d", "4"), Op::Delete(p + "b")}, {});
  ASSERT_TRUE(ra.ok() && rb.ok() && rd.ok() && rt.ok());
  ASSERT_TRUE(client_->Put("/outside", "x").ok());
  ASSERT_TRUE(log.WaitBatches(4));
  watcher->Stop();

  std::lock_guard lock(log.mu);
  ASSERT_EQ(log.batches.size(), 4u);
  EXPECT_EQ(log.batches[0].revision, *ra);
  ASSERT_EQ(log.batches[0].events.size(), 1u);
  EXPECT_EQ(log.batches[0].events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(log.batches[0].events[0].kv.key, p + "a");
  EXPECT_EQ(log.batches[0].events[0].kv.value, "1");
  EXPECT_EQ(log.batches[0].events[0].kv.mod_revision, *ra);
  EXPECT_EQ(log.batches[1].revision, *rb);
  EXPECT_EQ(log.batches[1].events[0].kv.key, p + "b");

  const int64_t deleted_at = *rb + 1;
  EXPECT_EQ(log.batches[2].revision, deleted_at);
  ASSERT_EQ(log.batches[2].events.size(), 1u);
  EXPECT_EQ(log.batches[2].events[0].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(log.batches[2].events[0].kv.key, p + "a");
  EXPECT_EQ(log.batches[2].events[0].kv.mod_revision, deleted_at);

  // The transaction's three events together, in its order.
  EXPECT_EQ(log.batches[3].revision, rt->revision);
  ASSERT_EQ(log.batches[3].events.size(), 3u);
  EXPECT_EQ(log.batches[3].events[0].kv.key, p + "c");
  EXPECT_EQ(log.batches[3].events[1].kv.key, p + "d");
  EXPECT_EQ(log.batches[3].events[2].kv.key, p + "b");
  EXPECT_EQ(log.batches[3].events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(watcher->next_revision(), rt->revision + 1);
  EXPECT_TRUE(log.compacted.empty());
}

TEST_F(EtcdClientTest, WatcherCatchingUpSplitsRevisions) {
  // Written before the watch starts: etcd sends them in one response; the
  // watcher still delivers one revision at a time.
  const std::string p = prefix_;
  auto first = client_->Put(p + "a", "1");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(client_->Txn({}, {Op::Put(p + "b", "2"), Op::Put(p + "c", "3")}, {}).ok());
  auto last = client_->Put(p + "a", "4");
  ASSERT_TRUE(last.ok());

  WatchLog log;
  auto watcher = log.Make(member_->endpoint(), p, PrefixEnd(p));
  watcher->Start(*first);
  ASSERT_TRUE(log.WaitBatches(3));
  watcher->Stop();
  std::lock_guard lock(log.mu);
  ASSERT_EQ(log.batches.size(), 3u);
  EXPECT_EQ(log.batches[0].revision, *first);
  EXPECT_EQ(log.batches[1].revision, *first + 1);
  EXPECT_EQ(log.batches[1].events.size(), 2u);
  EXPECT_EQ(log.batches[2].revision, *last);
  EXPECT_EQ(log.batches[2].events[0].kv.value, "4");
  EXPECT_EQ(log.batches[2].events[0].kv.version, 2);
  EXPECT_EQ(watcher->next_revision(), *last + 1);
}

TEST_F(EtcdClientTest, WatcherFromACompactedRevision) {
  auto r1 = client_->Put(prefix_ + "k", "1");
  auto r2 = client_->Put(prefix_ + "k", "2");
  ASSERT_TRUE(r1.ok() && r2.ok());
  ASSERT_TRUE(client_->Compact(*r2).ok());

  WatchLog log;
  auto watcher = log.Make(member_->endpoint(), prefix_, PrefixEnd(prefix_));
  watcher->Start(*r1);
  ASSERT_TRUE(log.WaitCompacted());
  watcher->Stop();
  std::lock_guard lock(log.mu);
  EXPECT_EQ(log.compacted, std::vector<int64_t>{*r2});
  EXPECT_TRUE(log.batches.empty());
  EXPECT_EQ(watcher->next_revision(), *r1);
}

TEST_F(EtcdClientTest, WatcherStopsPromptly) {
  WatchLog log;
  auto watcher = log.Make(member_->endpoint(), prefix_, PrefixEnd(prefix_));
  auto now = client_->Range(prefix_);
  ASSERT_TRUE(now.ok());
  watcher->Start(now->revision + 1);
  ASSERT_TRUE(client_->Put(prefix_ + "k", "v").ok());
  ASSERT_TRUE(log.WaitBatches(1));  // the stream is up and now idle

  auto start = Clock::now();
  watcher->Stop();
  auto took = Clock::now() - start;
  EXPECT_LT(took, milliseconds(500)) << std::chrono::duration_cast<milliseconds>(took).count() << " ms";

  // Also while it pauses between rounds of unreachable members.
  WatchLog dead_log;
  auto dead = dead_log.Make(Url(FreePort()), prefix_, PrefixEnd(prefix_));
  dead->Start(1);
  {
    std::unique_lock lock(dead_log.mu);
    ASSERT_TRUE(dead_log.cv.wait_for(lock, milliseconds(3000), [&] { return !dead_log.errors.empty(); }));
  }
  start = Clock::now();
  dead->Stop();
  took = Clock::now() - start;
  EXPECT_LT(took, milliseconds(300)) << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
}

// Its own member, killed and restarted under a running watcher.
TEST(EtcdWatcherRestartTest, ResumesAfterTheMemberRestarts) {
  EtcdMember member;
  ASSERT_TRUE(member.Start());
  Client client(Options({member.endpoint()}));
  auto now = client.Range("/w/");
  ASSERT_TRUE(now.ok()) << now.status();

  WatchLog log;
  auto watcher = log.Make(member.endpoint(), "/w/", PrefixEnd("/w/"));
  watcher->Start(now->revision + 1);
  auto r1 = client.Put("/w/1", "before");
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_TRUE(log.WaitBatches(1));

  member.Kill();
  ASSERT_TRUE(member.Start());
  auto r2 = client.Put("/w/2", "after");
  ASSERT_TRUE(r2.ok()) << r2.status();
  ASSERT_TRUE(log.WaitBatches(2, milliseconds(8000)));

  // A graceful stop: the gateway ends the stream with etcd's reason.
  member.Kill(SIGTERM);
  ASSERT_TRUE(member.Start());
  auto r3 = client.Put("/w/3", "again");
  ASSERT_TRUE(r3.ok()) << r3.status();
  ASSERT_TRUE(log.WaitBatches(3, milliseconds(8000)));
  // Nothing more arrives: the resumed watches did not repeat a revision.
  auto r4 = client.Put("/w/4", "marker");
  ASSERT_TRUE(r4.ok()) << r4.status();
  ASSERT_TRUE(log.WaitBatches(4));
  watcher->Stop();

  std::lock_guard lock(log.mu);
  ASSERT_EQ(log.batches.size(), 4u);
  EXPECT_EQ(log.batches[0].revision, *r1);
  EXPECT_EQ(log.batches[1].revision, *r2);
  EXPECT_EQ(log.batches[1].events[0].kv.key, "/w/2");
  EXPECT_EQ(log.batches[2].revision, *r3);
  EXPECT_EQ(log.batches[3].revision, *r4);
  EXPECT_EQ(watcher->next_revision(), *r4 + 1);
  // Each lost stream was reported, naming the member; the graceful stop
  // with the member's own reason rather than a bare end of stream. etcd
  // words it after which side of its gateway closed first: "transport is
  // closing" or "grpc: the client connection is closing".
  ASSERT_FALSE(log.errors.empty());
  EXPECT_NE(log.errors.front().find(member.endpoint()), std::string::npos) << log.errors.front();
  bool reason_seen = false;
  for (const auto& e : log.errors)
    reason_seen = reason_seen || e.find("transport is closing") != std::string::npos ||
                  e.find("connection is closing") != std::string::npos;
  EXPECT_TRUE(reason_seen) << ::testing::PrintToString(log.errors);
}

}  // namespace
}  // namespace weir::mgmt::etcd
