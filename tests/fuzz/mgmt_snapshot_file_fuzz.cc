// Fuzzes the node's stored snapshot file (mgmt::LoadPersistedSnapshot), what
// weir-fastpath and weir-recursor read from their state_dir at start when
// weir-mgmt is down: any file is a snapshot or a DataLoss error, never a
// crash. Half the inputs are taken as the file's body and given a valid
// header and checksum, so the frame and snapshot decoding behind the
// checksum are fuzzed too. A snapshot that loads is stored again and loads
// back equal.
//
// Input: byte 0 picks the mode (even: the whole file; odd: the body), the
// rest is the file or the body.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "weir/mgmt/snapshot.h"

namespace {

std::string TempDir(const char* name) {
  const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string tmpl = std::string(base) + "/weir-fuzz-" + name + "-XXXXXX";
  FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = TempDir("load");
  static const std::string again = TempDir("store");
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file;
  if (data[0] % 2 == 0) {
    file = rest;
  } else {
    file = "weir-snapshot/1\n" + weir::mgmt::PersistedSnapshotChecksum(rest) + "\n" + std::string(rest);
  }
  FILE* f = std::fopen((dir + "/snapshot").c_str(), "wb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(std::fwrite(file.data(), 1, file.size(), f) == file.size());
  FUZZ_CHECK(std::fclose(f) == 0);

  auto s = weir::mgmt::LoadPersistedSnapshot(dir);
  if (!s.ok()) {
    FUZZ_CHECK(!s.status().message().empty());
    return 0;
  }
  if (s->tags.size() + s->citymap.size() < 4096) (void)weir::mgmt::ValidateSnapshot(*s);
  FUZZ_CHECK(weir::mgmt::PersistSnapshot(again, *s).ok());
  auto back = weir::mgmt::LoadPersistedSnapshot(again);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(*back == *s);
  return 0;
}
