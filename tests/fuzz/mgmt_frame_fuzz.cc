// Fuzzes the mgmt wire protocol reader (what weir-mgmt reads from any peer,
// what a node reads from mgmt, and the stored snapshot file's body): any
// byte stream, fed in arbitrary chunks, yields messages or one final error;
// every decoded message encodes back to bytes that decode to it again. A
// DELTA that decodes is applied to a fixed base: it applies or is refused,
// and what it makes is made again by MakeDelta from the same base.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weir/mgmt/protocol.h"
#include "weir/mgmt/snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t chunk = data[0] % 17 + 1;
  weir::mgmt::FrameReader r;
  for (size_t pos = 0; pos < in.size(); pos += chunk) {
    r.Feed(in.substr(pos, chunk));
    for (;;) {
      auto m = r.Next();
      if (!m.ok()) return 0;  // a broken peer: the connection is closed
      if (!m->has_value()) break;
      const weir::mgmt::Message& msg = **m;
      const std::string again = weir::mgmt::Encode(msg);
      auto back = weir::mgmt::DecodeBody(std::string_view(again).substr(4));
      if (!back.ok() || back->type != msg.type || back->fields != msg.fields) __builtin_trap();
      if (msg.type == weir::mgmt::MsgType::kDelta) {
        auto d = weir::mgmt::DeltaFromMessage(msg);
        if (!d.ok()) continue;
        auto again_d = weir::mgmt::DeltaFromMessage(weir::mgmt::DeltaMessage(*d));
        if (!again_d.ok() || again_d->parts.size() != d->parts.size()) __builtin_trap();
        const weir::mgmt::Snapshot base{d->base_version, "a.example ecs=on\nb.example weight=on\n",
                                        "10.0.0.0/8,bj\n", d->origin, "acme secret=0123456789abcdef\n"};
        weir::mgmt::SnapshotParts changed;
        auto next = weir::mgmt::ApplyDelta(base, *d, &changed);
        if (!next.ok()) continue;
        const weir::mgmt::SnapshotDelta remade = weir::mgmt::MakeDelta(base, *next, true);
        auto same = weir::mgmt::ApplyDelta(base, remade, nullptr);
        if (!same.ok() || !(*same == *next)) __builtin_trap();
        if (weir::mgmt::DiffParts(base, *next).tags && !changed.tags) __builtin_trap();
      }
      if (msg.type == weir::mgmt::MsgType::kSnapshot) {
        auto snap = weir::mgmt::SnapshotFromMessage(msg);
        if (snap.ok() && snap->tags.size() + snap->citymap.size() < 4096)
          (void)weir::mgmt::ValidateSnapshot(*snap);
      }
    }
  }
  return 0;
}
