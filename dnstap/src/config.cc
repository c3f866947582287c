#include "weir/common/text.h"
#include "weir/dnstap/dnstap.h"

namespace weir::dnstap {

using common::Cat;

void ParseConfig(common::TomlChecker& c, const toml::table& root, Options* out) {
  const toml::table* t = common::SubTable(c, root, "dnstap");
  if (t == nullptr) return;
  const size_t errors_before = c.error_count();
  c.OnlyKeys(*t, "dnstap",
             {"socket", "file", "sample", "queue_size", "identity", "version", "client", "upstream"});
  c.String(*t, "socket", &out->socket_path);
  c.String(*t, "file", &out->file_path);
  c.Int(*t, "sample", &out->sample, 1, 1000000);
  c.Int(*t, "queue_size", &out->queue_size, 2, 16384);
  c.String(*t, "identity", &out->identity);
  c.String(*t, "version", &out->version);
  c.Bool(*t, "client", &out->client);
  c.Bool(*t, "upstream", &out->upstream);
  if (c.error_count() != errors_before) return;  // the rules below would repeat those errors
  if (out->socket_path.empty() == out->file_path.empty()) {
    return c.Fail(t->source(), "[dnstap] needs exactly one of 'socket' (a unix socket path) or 'file'");
  }
  const uint32_t q = out->queue_size;
  if ((q & (q - 1)) != 0) {
    return c.Fail(t->get("queue_size")->source(),
                  Cat("'queue_size' must be a power of two (fstrm's queues are), not ", q));
  }
  if (!out->client && !out->upstream) {
    return c.Fail(t->source(),
                  "[dnstap] with client = false and upstream = false taps nothing: remove the table");
  }
}

}  // namespace weir::dnstap
