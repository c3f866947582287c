// The mgmt wire protocol (docs/behaviour.md#management): length-prefixed frames over TCP
// between weir-mgmt and its nodes (fastpath, recursor) and between weirctl
// and weir-mgmt. Control plane only.
//
// Frame: u32 big-endian length of what follows, u8 message type, then the
// fields, each a u32 big-endian length and that many bytes. Every field is a
// byte string; numbers are decimal text. Documented in docs/mgmt.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::mgmt {

inline constexpr std::string_view kProtocol = "weir-mgmt/1";
// A snapshot of a carrier's city map is a few MB; this bounds what a peer
// can make us buffer.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
inline constexpr size_t kMaxFields = 4096;

enum class MsgType : uint8_t {
  kHello = 1,     // node -> mgmt: protocol, token, node_id, kind, have_version, have_origin
  kSnapshot = 2,  // mgmt -> node: version, tags text, city map CSV, origin
  kAck = 3,       // node -> mgmt: version
  kNack = 4,      // node -> mgmt: version, reason[, "send-whole"]
  kRequest = 5,   // weirctl -> mgmt: protocol, token, verb, args...
  kReply = 6,     // mgmt -> weirctl: "ok" | "error", text, json
  kError = 7,     // mgmt -> peer: reason; the connection is closed after it
  // mgmt -> node: id, actor, verb, args... (a control request fanned out by
  // weirctl --all; control.h)
  kControl = 8,
  kControlReply = 9,  // node -> mgmt: id, "ok" | "error", text, json
  // mgmt -> node: version, base version, origin, then per changed part:
  // name, "PREFIX SUFFIX", middle, sha256 (snapshot.h SnapshotDelta). Sent
  // only to nodes whose HELLO offers "delta".
  kDelta = 10,
};

// The capability a node's HELLO names (its 7th field) when it takes DELTA.
inline constexpr std::string_view kDeltaCapability = "delta";
// A NACK's 3rd field when a delta did not fit the node's base: send the
// whole snapshot of that version (any other NACK is the node refusing it).
inline constexpr std::string_view kResendWhole = "send-whole";

struct Message {
  MsgType type = MsgType::kError;
  std::vector<std::string> fields;
};

// The frame bytes of `m`.
std::string Encode(const Message& m);

// Reassembles frames from a byte stream. Errors are final: the peer is
// broken or hostile and the connection must be closed.
class FrameReader {
 public:
  void Feed(std::string_view bytes) { buf_.append(bytes.data(), bytes.size()); }
  // The next complete message, nullopt when more bytes are needed.
  absl::StatusOr<std::optional<Message>> Next();
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
};

// Decodes exactly one frame body (type byte + fields), as FrameReader does.
absl::StatusOr<Message> DecodeBody(std::string_view body);

// Whether a presented token equals the expected one, in time independent of
// where they differ. An empty expected token never matches.
bool TokenEquals(std::string_view presented, std::string_view expected);

// TCP keepalive tuned to notice a dead peer on an idle stream in ~25 s.
void EnableKeepalive(int fd);

// Parses a decimal version / counter field.
absl::StatusOr<uint64_t> ParseU64(std::string_view s);

}  // namespace weir::mgmt
