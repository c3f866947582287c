// DNS over TCP (RFC 7766), written once for every daemon and tool.
//
// DnsTcpStream is the server side of one connection: it reads the two-byte
// length-prefixed queries (any number pipelined, split across reads any
// way), queues the framed answers and writes what the socket takes, and
// tracks what is owed:
//  * every query handed out is pending until it is answered (or dropped);
//  * a client that half-closes (shutdown(SHUT_WR), read() == 0) gets every
//    answer it is owed, then the connection is done (6.2.4);
//  * answers the client does not read are bounded: above max_unsent no
//    more queries are read (the client must read first), above four times
//    it the connection is to be closed;
//  * bytes of a query still coming are bounded by one whole message.
// The owner polls WantedEvents(), calls Read() on EPOLLIN and Flush() on
// EPOLLOUT, and closes the socket when a call returns kClose or Done()
// holds. Who may stay connected and for how long (per-source limits, idle
// and lifetime timeouts) is net::TcpConnectionTable's (tcp_connections.h).
//
// The bytes come from the socket, or from a StreamIo in between (DNS over
// TLS: net::TlsStreamIo decrypts), so the framing is the same for both.
//
// DnsTcpReader is the client side for one answer: it never takes more bytes
// off the socket than the message it is reading, so a peer that keeps
// sending cannot grow the buffer past 2 + 65535 bytes.
//
// Threading: plain values, used on one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <sys/types.h>

namespace weir::net {

inline constexpr size_t kMaxDnsMessage = 65535;

// What a DnsTcpStream reads from and writes to when it is not the socket
// itself: recv()/send() semantics (>0 bytes, 0 at EOF, -1 with errno set;
// EAGAIN when it would block).
class StreamIo {
 public:
  virtual ~StreamIo() = default;
  virtual ssize_t Recv(void* buf, size_t len) = 0;
  virtual ssize_t Send(const void* buf, size_t len) = 0;
  // Bytes already read off the socket and not yet returned by Recv(): the
  // owner reads again without waiting for the socket.
  virtual bool HasBuffered() const { return false; }
  // The last Recv or Send stopped because the socket was not writable
  // (TLS may need to write to read): wait for EPOLLOUT too.
  virtual bool wants_write() const { return false; }
  // Bytes Recv has returned so far (whether a read made progress).
  uint64_t received() const { return received_; }

 protected:
  uint64_t received_ = 0;
};

// StreamIo straight on a non-blocking stream socket (not owned): recv and
// send, EINTR retried, no SIGPIPE.
class SocketStreamIo final : public StreamIo {
 public:
  explicit SocketStreamIo(int fd) : fd_(fd) {}
  ssize_t Recv(void* buf, size_t len) override;
  ssize_t Send(const void* buf, size_t len) override;
  bool wants_write() const override { return wants_write_; }

 private:
  int fd_;
  bool wants_write_ = false;
};

class DnsTcpStream {
 public:
  using Clock = std::chrono::steady_clock;
  // kOverflow: the client let more than four times max_unsent pile up
  // unread; close it as for kClose.
  enum class Status : uint8_t { kOpen, kClose, kOverflow };

  // `fd`: a connected, non-blocking stream socket; not owned (the caller
  // closes it). `io`: what to read and write through instead of the
  // socket (not owned; null: the socket).
  DnsTcpStream(int fd, size_t max_unsent, Clock::time_point now, StreamIo* io = nullptr)
      : fd_(fd), max_unsent_(max_unsent), last_(now), io_(io) {}

  int fd() const { return fd_; }

  // Reads what the socket has, up to one whole message beyond what is
  // buffered. kClose on a reset or error. EOF marks the read side closed.
  Status Read(Clock::time_point now);
  // The next whole query received, without its prefix; it becomes pending.
  // None while reading is paused. The span is valid until the next Read()
  // or NextQuery().
  bool NextQuery(std::span<const uint8_t>* query, Clock::time_point now);
  // A whole query is buffered (taken by NextQuery() unless paused).
  bool HasQuery() const;
  // Answers a pending query (an empty `answer`: it is dropped, nothing is
  // sent). kClose when the socket failed, kOverflow (nothing queued) when
  // the unsent answers would exceed four times max_unsent.
  Status Answer(std::span<const uint8_t> answer);
  // Writes queued answers (on EPOLLOUT). kClose when the socket failed.
  Status Flush();
  // Corked, Answer() only queues: the owner answers a batch, then Flush()es
  // once (over TLS one record and one send for the batch, not one each).
  void set_corked(bool corked) { corked_ = corked; }
  bool corked() const { return corked_; }

  // EPOLLIN while reading goes on (not half-closed, not paused), EPOLLOUT
  // while answers are queued.
  uint32_t WantedEvents() const;
  // Half-closed, nothing pending, buffered or unsent: close it.
  bool Done() const { return read_closed_ && pending_ == 0 && out_.empty() && !HasQuery(); }
  bool read_closed() const { return read_closed_; }
  // The server ends the connection: nothing more is read, and as after the
  // client's half-close, Done() once every answer owed is sent.
  void StopReading() { read_closed_ = true; }
  // Reading is paused because the client does not read its answers; since when.
  bool paused() const { return out_.size() >= max_unsent_; }
  Clock::time_point paused_since() const { return paused_since_; }
  size_t unsent() const { return out_.size(); }
  size_t pending() const { return pending_; }
  // The last whole query read (a byte trickle does not move it).
  Clock::time_point last_activity() const { return last_; }

 private:
  void Queued(bool was_paused);
  ssize_t RecvSome(void* buf, size_t len);
  ssize_t SendSome(const void* buf, size_t len);

  int fd_;
  size_t max_unsent_;
  Clock::time_point last_;
  StreamIo* io_;
  Clock::time_point paused_since_{};
  std::vector<uint8_t> in_;
  size_t in_off_ = 0;  // start of the first unparsed byte in `in_`
  std::vector<uint8_t> out_;
  size_t pending_ = 0;
  bool read_closed_ = false;
  bool corked_ = false;
};

class DnsTcpReader {
 public:
  static constexpr size_t kMaxBytes = 2 + kMaxDnsMessage;

  // Bytes still missing: up to the length prefix first, then up to the end
  // of the message. 0 when complete.
  size_t Want() const {
    if (bytes_.size() < 2) return 2 - bytes_.size();
    return 2 + Length() - bytes_.size();
  }
  // Takes bytes just read; false (and nothing taken) when they are more
  // than Want(): the caller read past the message, which it must not do.
  bool Append(std::span<const uint8_t> data) {
    if (data.size() > Want()) return false;
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    return true;
  }
  bool Complete() const { return bytes_.size() >= 2 && Want() == 0; }
  // The message without its length prefix; valid when Complete().
  std::span<const uint8_t> Message() const { return std::span<const uint8_t>(bytes_).subspan(2); }
  size_t buffered() const { return bytes_.size(); }
  void Clear() { bytes_.clear(); }

 private:
  size_t Length() const { return (size_t{bytes_[0]} << 8) | bytes_[1]; }

  std::vector<uint8_t> bytes_;
};

// `message` with its two-byte length prefix appended to `out`.
void AppendFramed(std::span<const uint8_t> message, std::vector<uint8_t>* out);

}  // namespace weir::net
