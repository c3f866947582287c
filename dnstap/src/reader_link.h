// The link to a Frame Streams reader's unix socket, under fstrm's writer.
//
// fstrm's own unix writer waits on the reader without a limit (a reader that
// accepts the connection and never answers the handshake holds its I/O
// thread, and the daemon's stop with it), and once a write fails its writer
// stays closed. So fstrm's writer is given this link as a one-way transport
// that is always open, and the link does the bidirectional handshake
// (READY, ACCEPT, START) itself, on its own thread: every wait on the reader
// is bounded by a timeout, a reader that fails (a handshake or a write that
// timed out, a connection reset) is dropped and connected to again after a
// back-off, and Stop() ends every wait within one timeout.
// docs/dnstap.md#a-reader-that-does-not-read.
//
// Threading: the connect thread is the link's own; Write() runs on fstrm's
// I/O thread; Start() and Stop() on the thread that owns the writer. `ready`
// is set while a reader takes data, for the producers to read.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <fstrm.h>

#include "weir/common/log.h"

namespace weir::dnstap {

// When to connect to a reader again after it failed us: `first` after the
// first failure, then twice as long each time up to `max`; a completed
// handshake starts over. Times are passed in (tested without a clock).
class ReconnectBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  ReconnectBackoff(Clock::duration first, Clock::duration max) : first_(first), max_(max) {}

  Clock::time_point next() const { return next_; }
  void Failed(Clock::time_point now) {
    delay_ = delay_ == Clock::duration::zero() ? first_ : std::min(delay_ * 2, max_);
    next_ = now + delay_;
  }
  void Succeeded() {
    delay_ = Clock::duration::zero();
    next_ = Clock::time_point{};
  }
  // The wait after the last failure (zero after a success).
  Clock::duration delay() const { return delay_; }

 private:
  Clock::duration first_, max_;
  Clock::duration delay_{};
  Clock::time_point next_{};
};

class ReaderLink {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string path;
    std::string content_type;
    // The whole handshake (connect, READY, ACCEPT, START); each write.
    std::chrono::milliseconds timeout{1000};
    // Looking for a reader when nobody listens on the path.
    Clock::duration retry = std::chrono::seconds(1);
    // After a reader that failed us.
    Clock::duration backoff_first = std::chrono::seconds(1);
    Clock::duration backoff_max = std::chrono::seconds(4);
  };
  // `ready` must outlive the link.
  ReaderLink(Options options, std::atomic<bool>* ready);
  ~ReaderLink();
  ReaderLink(const ReaderLink&) = delete;
  ReaderLink& operator=(const ReaderLink&) = delete;

  // A new fstrm_rdwr writing through this link (one-way for fstrm). fstrm
  // owns it; the link must outlive it.
  fstrm_rdwr* MakeRdwr();
  // Starts the connect thread.
  void Start();
  // Stops the connect thread (a handshake under way is given up) and ends
  // every later wait of Write() within one timeout from now.
  void Stop();

 private:
  static fstrm_res OpenCb(void* self);
  static fstrm_res CloseCb(void* self);
  static fstrm_res WriteCb(void* self, const struct iovec* iov, int iovcnt);

  enum class Wait : uint8_t { kReady, kTimedOut, kFailed, kStopped };
  // Waits for `events` on `fd` until `deadline`; the connect thread's waits
  // also end at Stop().
  Wait WaitFor(int fd, short events, Clock::time_point deadline, bool connecting) const;
  Clock::time_point Deadline() const;
  bool SendAll(int fd, iovec* iov, int iovcnt, Clock::time_point deadline, bool connecting) const;
  bool ReadAll(int fd, uint8_t* data, size_t n, Clock::time_point deadline, bool connecting) const;

  void Run();
  // Connects and does the handshake: the socket, or -1 with *why set and
  // *listening false when nobody listens on the path.
  int Connect(std::string* why, bool* listening) const;
  bool Handshake(int fd, Clock::time_point deadline, std::string* why) const;
  fstrm_res Write(const struct iovec* iov, int iovcnt);
  // The reader failed a write: the link lets it go and connects again.
  void DropReader(std::string_view why);
  // STOP, and the reader's FINISH, at the end of the stream.
  void Finish();

  Options options_;
  std::atomic<bool>* ready_;
  int wake_fd_ = -1;  // an eventfd, readable once Stop() was called
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;       // guarded by mu_
  bool reader_failed_ = false;  // guarded by mu_: a write failed, back off
  // The connected socket: set by the connect thread when -1, used and
  // reset to -1 by fstrm's I/O thread.
  std::atomic<int> fd_{-1};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> stop_deadline_ns_{0};  // steady clock, once stop_

  common::RateLimitedLog log_{{.level = common::LogLevel::kWarning, .component = "dnstap"}};
};

}  // namespace weir::dnstap
