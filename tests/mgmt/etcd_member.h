// One etcd member (Debian's etcd-server) for the tests, on free loopback
// ports in its own data directory; Start() again after Kill() restarts it on
// the same ports and data. Shared by the etcd client's and the store's tests.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "weir/mgmt/etcd_client.h"

namespace weir::mgmt::test {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";

// A listening TCP socket on a kernel-chosen loopback port.
inline int ListenLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A port nothing listens on (it was free a moment ago).
inline int FreePort() {
  int port = 0;
  int fd = ListenLoopback(&port);
  if (fd >= 0) close(fd);
  return port;
}

inline std::string Url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

class EtcdMember {
 public:
  EtcdMember() {
    char tmpl[] = "/tmp/weir-etcd-test-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
    client_port_ = FreePort();
    peer_port_ = FreePort();
  }
  ~EtcdMember() {
    Kill();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  EtcdMember(const EtcdMember&) = delete;
  EtcdMember& operator=(const EtcdMember&) = delete;

  std::string endpoint() const { return Url(client_port_); }

  // Starts etcd and waits (up to 10 s) until it serves a Range.
  ::testing::AssertionResult Start() {
    using std::chrono::milliseconds;
    if (dir_.empty()) return ::testing::AssertionFailure() << "mkdtemp failed";
    const std::string peer = Url(peer_port_);
    std::vector<std::string> args = {
        kEtcdBinary, "--name=weir-test", "--data-dir=" + dir_ + "/data", "--listen-client-urls=" + endpoint(),
        "--advertise-client-urls=" + endpoint(), "--listen-peer-urls=" + peer,
        "--initial-advertise-peer-urls=" + peer, "--initial-cluster=weir-test=" + peer,
        // A single member elects itself after one
        // election timeout: short ones start it fast.
        "--heartbeat-interval=10", "--election-timeout=100", "--logger=zap", "--log-level=error",
        "--log-outputs=" + dir_ + "/etcd.log"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string out = dir_ + "/etcd.out";
    int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      if (out_fd >= 0) {
        dup2(out_fd, 1);
        dup2(out_fd, 2);
      }
      execv(kEtcdBinary, argv.data());
      _exit(127);
    }
    if (out_fd >= 0) close(out_fd);
    if (pid_ < 0) return ::testing::AssertionFailure() << "fork failed";

    etcd::ClientOptions o;
    o.endpoints = {endpoint()};
    o.request_timeout = milliseconds(300);
    o.connect_timeout = milliseconds(500);
    etcd::Client probe(o);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (probe.Range("/probe").ok()) return ::testing::AssertionSuccess();
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return ::testing::AssertionFailure() << "etcd exited, status " << status << "; see " << dir_;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return ::testing::AssertionFailure() << "etcd did not answer within 10 s";
  }

  // SIGTERM: etcd shuts down gracefully, ending its streams with an error.
  void Kill(int signal = SIGKILL) {
    if (pid_ <= 0) return;
    kill(pid_, signal);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace weir::mgmt::test
