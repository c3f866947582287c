// Golden tests: DNS messages captured from dig, kdig and a real unbound
// (tests/dns/golden/*.bin) decoded by weir's codec and compared field by field
// with tshark's independent decoding (tests/dns/golden/expected.txt, written by
// gen_expected.py from tshark's JSON and cross-checked there with ldns).
// Then every fixture is rebuilt with ResponseWriter (and the answers of every
// response with RecordEncoder) and the rebuilt bytes must decode back to the
// same fields.
//
// Every expected value (IDs, addresses, TTLs, option bytes...) comes from the
// expectations file or is written here literally, never from the code under
// test.

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace weir::dns {
namespace {

const std::string kDir = WEIR_TEST_DATA_DIR "/dns/golden/";
constexpr size_t kExpectedFixtures = 32;

// ---------------------------------------------------------------- expectations

struct ExpOption {
  uint16_t code = 0;
  uint16_t length = 0;
  std::string hex;  // "" for an empty option
  bool has_ecs = false;
  int ecs_family = 0, ecs_source = 0, ecs_scope = 0, ecs_bytes = 0;
  std::string ecs_address;
  bool has_cookie = false;
  std::string cookie_client, cookie_server;
  bool has_nsid = false;
  std::string nsid_hex;
};

struct ExpRr {
  std::string section;  // answer / authority / additional
  std::string name;
  uint16_t type = 0;
  uint16_t klass = 0;
  uint32_t ttl = 0;
  uint16_t rdlength = 0;  // on the wire, i.e. after compression
  std::vector<std::string> rdata;
};

struct ExpEdns {
  bool present = false;
  uint16_t udp = 0;
  int do_bit = 0, version = 0, ext_rcode = 0, flags_word = 0, rdlength = 0;
  std::string owner;
  std::vector<ExpOption> options;
};

struct Expected {
  std::string file;
  std::string kind;  // query / response
  size_t size = 0;
  uint16_t id = 0;
  uint16_t flags_word = 0;
  std::map<std::string, int> flags;
  int counts[4] = {-1, -1, -1, -1};  // qd an ns ar (ar includes OPT)
  int questions = 0;
  std::string qname;
  uint16_t qtype = 0, qclass = 0;
  std::vector<ExpRr> rrs;
  ExpEdns edns;
};

struct ExpectationsFile {
  int declared_count = -1;
  std::vector<Expected> fixtures;
  std::string error;
};

std::map<std::string, std::string> KeyValues(std::istringstream& in) {
  std::map<std::string, std::string> kv;
  std::string tok;
  while (in >> tok) {
    const size_t eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

ExpectationsFile LoadExpectations() {
  ExpectationsFile f;
  std::ifstream in(kDir + "expected.txt");
  if (!in) {
    f.error = "cannot open expected.txt";
    return f;
  }
  std::string line;
  Expected* cur = nullptr;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string kw;
    ls >> kw;
    if (kw == "count") {
      ls >> f.declared_count;
      continue;
    }
    if (kw == "fixture") {
      f.fixtures.emplace_back();
      cur = &f.fixtures.back();
      ls >> cur->file;
      continue;
    }
    if (cur == nullptr) {
      f.error = "line " + std::to_string(lineno) + " outside a fixture block";
      return f;
    }
    if (kw == "kind") {
      ls >> cur->kind;
    } else if (kw == "size") {
      ls >> cur->size;
    } else if (kw == "id") {
      ls >> cur->id;
    } else if (kw == "flags_word") {
      ls >> cur->flags_word;
    } else if (kw == "flags") {
      for (auto& [k, v] : KeyValues(ls)) cur->flags[k] = std::stoi(v);
    } else if (kw == "counts") {
      ls >> cur->counts[0] >> cur->counts[1] >> cur->counts[2] >> cur->counts[3];
    } else if (kw == "question") {
      ++cur->questions;
      ls >> cur->qname >> cur->qtype >> cur->qclass;
    } else if (kw == "rr") {
      ExpRr rr;
      ls >> rr.section >> rr.name >> rr.type >> rr.klass >> rr.ttl >> rr.rdlength;
      std::string tok;
      while (ls >> tok) rr.rdata.push_back(tok);
      cur->rrs.push_back(rr);
    } else if (kw == "edns") {
      std::string rest;
      std::getline(ls, rest);
      if (rest.find("none") != std::string::npos) {
        cur->edns.present = false;
        continue;
      }
      std::istringstream rs(rest);
      auto kv = KeyValues(rs);
      ExpEdns& e = cur->edns;
      e.present = true;
      e.udp = static_cast<uint16_t>(std::stoi(kv.at("udp")));
      e.do_bit = std::stoi(kv.at("do"));
      e.version = std::stoi(kv.at("version"));
      e.ext_rcode = std::stoi(kv.at("ext_rcode"));
      e.flags_word = std::stoi(kv.at("flags_word"));
      e.rdlength = std::stoi(kv.at("rdlength"));
      e.owner = kv.at("owner");
    } else if (kw == "option") {
      ExpOption o;
      ls >> o.code >> o.length >> o.hex;
      if (o.hex == "-") o.hex.clear();
      cur->edns.options.push_back(o);
    } else if (kw == "ecs" || kw == "cookie" || kw == "nsid") {
      if (cur->edns.options.empty()) {
        f.error = "line " + std::to_string(lineno) + ": " + kw + " without option";
        return f;
      }
      ExpOption& o = cur->edns.options.back();
      if (kw == "ecs") {
        o.has_ecs = true;
        ls >> o.ecs_family >> o.ecs_source >> o.ecs_scope >> o.ecs_address >> o.ecs_bytes;
      } else if (kw == "cookie") {
        o.has_cookie = true;
        ls >> o.cookie_client >> o.cookie_server;
        if (o.cookie_server == "-") o.cookie_server.clear();
        if (o.cookie_client == "-") o.cookie_client.clear();
      } else {
        o.has_nsid = true;
        ls >> o.nsid_hex;
        if (o.nsid_hex == "-") o.nsid_hex.clear();
      }
    } else if (kw == "end") {
      cur = nullptr;
    } else {
      f.error = "line " + std::to_string(lineno) + ": unknown keyword " + kw;
      return f;
    }
  }
  return f;
}

const ExpectationsFile& Expectations() {
  static const ExpectationsFile f = LoadExpectations();
  return f;
}

const Expected* Find(const std::string& file) {
  for (const Expected& e : Expectations().fixtures) {
    if (e.file == file) return &e;
  }
  return nullptr;
}

std::vector<uint8_t> ReadFixture(const std::string& file) {
  std::ifstream in(kDir + file, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------- helpers

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Hex(std::span<const uint8_t> b) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

std::string Ntop(int af, const uint8_t* p) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(af, p, buf, sizeof buf) == nullptr) return "<inet_ntop failed>";
  return buf;
}

const char* SectionName(Section s) {
  switch (s) {
    case Section::kAnswer:
      return "answer";
    case Section::kAuthority:
      return "authority";
    case Section::kAdditional:
      return "additional";
  }
  return "?";
}

// A decoded RR in re-encodable form: owner key and uncompressed RDATA.
struct DecodedRr {
  Section section;
  NameKey owner;
  uint16_t type;
  uint16_t klass;
  uint32_t ttl;
  std::vector<uint8_t> rdata;
};

enum class Mode {
  kOriginal,      // the captured bytes: rdlength as tshark saw it on the wire
  kUncompressed,  // rebuilt with AppendRecord: no compression anywhere
  kRecompressed,  // answers from RecordEncoder: compressed like unbound does
};

// Reads the name at `off` of an uncompressed buffer as presentation text.
std::string NameAt(std::span<const uint8_t> buf, size_t off, size_t* end) {
  NameKey k;
  const ParseError e = ReadName(buf, off, end, &k);
  if (e != ParseError::kOk) return std::string("<") + std::string(ParseErrorName(e)) + ">";
  return NameKeyToText(k.span());
}

// Checks one RR against its expectation and returns it in re-encodable form.
void CheckRr(std::span<const uint8_t> msg, const RrView& rr, const ExpRr& x, Mode mode, uint32_t ttl_age,
             DecodedRr* out) {
  SCOPED_TRACE("rr " + x.section + " " + x.name);
  EXPECT_STREQ(SectionName(rr.section), x.section.c_str());
  size_t end = 0;
  NameKey owner;
  ASSERT_EQ(ReadName(msg, rr.name_offset, &end, &owner), ParseError::kOk);
  EXPECT_EQ(NameKeyToText(owner.span()), Lower(x.name));
  if (mode == Mode::kUncompressed) {
    EXPECT_EQ(end - rr.name_offset, owner.len) << "owner must be uncompressed";
  }
  EXPECT_EQ(rr.type, x.type);
  EXPECT_EQ(rr.klass, x.klass);
  EXPECT_EQ(rr.ttl, x.ttl > ttl_age ? x.ttl - ttl_age : 0u);
  EXPECT_EQ(Load32(msg.data() + rr.ttl_offset), rr.ttl);

  uint8_t rd[1024];
  size_t rdlen = 0;
  ASSERT_EQ(CopyRdataUncompressed(msg, rr, rd, sizeof rd, &rdlen), ParseError::kOk);
  const std::span<const uint8_t> u(rd, rdlen);
  if (mode == Mode::kOriginal) {
    EXPECT_EQ(rr.rdlength, x.rdlength) << "on-wire RDLENGTH (tshark)";
  }
  if (mode == Mode::kUncompressed) {
    EXPECT_EQ(rr.rdlength, rdlen) << "RDATA must be uncompressed";
  }
  if (mode == Mode::kRecompressed && rr.section == Section::kAnswer) {
    // RecordEncoder compresses owners and CNAME/NS/PTR targets against the
    // qname and earlier names exactly where unbound did.
    EXPECT_EQ(rr.rdlength, x.rdlength) << "compressed RDLENGTH differs from unbound's";
  }

  switch (rr.type) {
    case type::kA:
      ASSERT_EQ(x.rdata.size(), 1u);
      ASSERT_EQ(rdlen, 4u);
      EXPECT_EQ(Ntop(AF_INET, rd), x.rdata[0]);
      break;
    case type::kAaaa:
      ASSERT_EQ(x.rdata.size(), 1u);
      ASSERT_EQ(rdlen, 16u);
      EXPECT_EQ(Ntop(AF_INET6, rd), x.rdata[0]);
      break;
    case type::kCname:
    case type::kNs:
    case type::kPtr: {
      ASSERT_EQ(x.rdata.size(), 1u);
      EXPECT_EQ(NameKeyToText(u), Lower(x.rdata[0]));
      size_t e2 = 0;
      EXPECT_EQ(NameAt(u, 0, &e2), Lower(x.rdata[0]));
      EXPECT_EQ(e2, rdlen);
      break;
    }
    case type::kMx: {
      ASSERT_EQ(x.rdata.size(), 2u);
      ASSERT_GE(rdlen, 3u);
      EXPECT_EQ(std::to_string(Load16(rd)), x.rdata[0]);
      size_t e2 = 0;
      EXPECT_EQ(NameAt(u, 2, &e2), Lower(x.rdata[1]));
      EXPECT_EQ(e2, rdlen);
      break;
    }
    case type::kSoa: {
      ASSERT_EQ(x.rdata.size(), 7u);
      size_t e1 = 0, e2 = 0;
      EXPECT_EQ(NameAt(u, 0, &e1), Lower(x.rdata[0]));
      EXPECT_EQ(NameAt(u, e1, &e2), Lower(x.rdata[1]));
      ASSERT_EQ(rdlen, e2 + 20);
      for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(std::to_string(Load32(rd + e2 + 4 * i)), x.rdata[2 + i]) << "SOA field " << i;
      }
      break;
    }
    default:
      ADD_FAILURE() << "test does not handle RR type " << rr.type;
  }
  if (out != nullptr) {
    out->section = rr.section;
    out->owner = owner;
    out->type = rr.type;
    out->klass = rr.klass;
    out->ttl = rr.ttl;
    out->rdata.assign(rd, rd + rdlen);
  }
}

// EDNS as parsed (by ParseQuery or Message::Parse) against the expectation.
void CheckEdns(std::span<const uint8_t> msg, const Edns& ed, const Expected& x, bool in_query,
               size_t address_records) {
  const ExpEdns& xe = x.edns;
  ASSERT_EQ(ed.present, xe.present);
  if (!xe.present) {
    EXPECT_FALSE(ed.has_ecs);
    EXPECT_FALSE(ed.has_weight);
    EXPECT_FALSE(ed.has_nsid);
    EXPECT_FALSE(ed.has_cookie);
    return;
  }
  EXPECT_EQ(ed.udp_size, xe.udp);
  EXPECT_EQ(ed.do_bit, xe.do_bit != 0);
  EXPECT_EQ(ed.version, xe.version);
  EXPECT_EQ(ed.ext_rcode, xe.ext_rcode);
  EXPECT_EQ(ed.rdata_len, xe.rdlength);
  ASSERT_LT(ed.opt_offset, msg.size());
  ASSERT_EQ(xe.owner, ".");
  EXPECT_EQ(msg[ed.opt_offset], 0) << "OPT owner must be the root";
  // The OPT header right before its RDATA: type, class = udp size, ttl, rdlength.
  ASSERT_EQ(ed.rdata_offset, ed.opt_offset + 11);
  const uint8_t* opt = msg.data() + ed.opt_offset + 1;
  EXPECT_EQ(Load16(opt), type::kOpt);
  EXPECT_EQ(Load16(opt + 2), xe.udp);
  EXPECT_EQ(Load32(opt + 4) & 0xFFFF, static_cast<uint32_t>(xe.flags_word));
  EXPECT_EQ(Load16(opt + 8), xe.rdlength);
  EXPECT_EQ(ed.option_count, xe.options.size());

  ASSERT_LE(size_t{ed.rdata_offset} + ed.rdata_len, msg.size());
  OptionIterator it(msg.subspan(ed.rdata_offset, ed.rdata_len));
  bool ecs = false, weight = false, nsid = false, cookie = false;
  for (size_t i = 0;; ++i) {
    uint16_t code = 0;
    std::span<const uint8_t> data;
    bool done = false;
    ASSERT_EQ(it.Next(&code, &data, &done), ParseError::kOk);
    if (done) {
      EXPECT_EQ(i, xe.options.size()) << "fewer options than tshark saw";
      break;
    }
    ASSERT_LT(i, xe.options.size()) << "more options than tshark saw";
    const ExpOption& xo = xe.options[i];
    SCOPED_TRACE("option " + std::to_string(xo.code));
    EXPECT_EQ(code, xo.code);
    EXPECT_EQ(data.size(), xo.length);
    EXPECT_EQ(Hex(data), xo.hex);
    if (xo.code == option::kEcs) {
      ecs = true;
      ASSERT_TRUE(xo.has_ecs);
      ASSERT_TRUE(ed.has_ecs);
      EXPECT_EQ(ed.ecs.family, xo.ecs_family);
      EXPECT_EQ(ed.ecs.source_prefix, xo.ecs_source);
      EXPECT_EQ(ed.ecs.scope_prefix, xo.ecs_scope);
      EXPECT_EQ(ed.ecs.AddressBytes(), static_cast<size_t>(xo.ecs_bytes));
      EXPECT_EQ(Ntop(xo.ecs_family == 1 ? AF_INET : AF_INET6, ed.ecs.address.data()), xo.ecs_address);
      ClientSubnet direct;
      EXPECT_EQ(DecodeEcs(data, in_query, &direct), ParseError::kOk);
      EXPECT_EQ(direct, ed.ecs);
    }
    if (xo.code == kDefaultWeightOptionCode) {
      weight = true;
      ASSERT_TRUE(ed.has_weight);
      EXPECT_EQ(ed.weight_len, xo.length);
      EXPECT_EQ(ed.weight_offset, data.data() - msg.data());
      const WeightSet w = DecodeWeights(msg.subspan(ed.weight_offset, ed.weight_len), address_records);
      if (xo.length == 0) {
        EXPECT_EQ(w.verdict, WeightVerdict::kEmpty);
        EXPECT_EQ(w.count, address_records);
        for (size_t k = 0; k < address_records; ++k) EXPECT_EQ(w.weights[k], 1);
      }
    }
    if (xo.code == option::kNsid) {
      nsid = true;
      ASSERT_TRUE(xo.has_nsid);
      EXPECT_EQ(Hex(data), xo.nsid_hex);
    }
    if (xo.code == option::kCookie) {
      cookie = true;
      ASSERT_TRUE(xo.has_cookie);
      EXPECT_EQ(ed.cookie_len, xo.length);
      EXPECT_EQ(ed.cookie_offset, data.data() - msg.data());
      ASSERT_LE(size_t{ed.cookie_offset} + ed.cookie_len, msg.size());
      EXPECT_EQ(Hex(msg.subspan(ed.cookie_offset, ed.cookie_len)), xo.cookie_client + xo.cookie_server);
      EXPECT_EQ(xo.cookie_client.size(), 16u) << "client cookie is 8 bytes";
    }
  }
  EXPECT_EQ(ed.has_ecs, ecs);
  EXPECT_EQ(ed.has_weight, weight);
  EXPECT_EQ(ed.has_nsid, nsid);
  EXPECT_EQ(ed.has_cookie, cookie);
}

size_t AddressRecords(const Expected& x) {
  size_t n = 0;
  for (const ExpRr& r : x.rrs) {
    if (r.section == "answer" && (r.type == type::kA || r.type == type::kAaaa)) ++n;
  }
  return n;
}

void CheckHeader(uint16_t id, uint16_t flags, const Expected& x) {
  EXPECT_EQ(id, x.id);
  EXPECT_EQ(flags, x.flags_word);
  EXPECT_EQ((flags & flag::kQr) != 0, x.flags.at("qr") != 0);
  EXPECT_EQ((flags & flag::kOpcodeMask) >> 11, x.flags.at("opcode"));
  EXPECT_EQ((flags & flag::kAa) != 0, x.flags.at("aa") != 0);
  EXPECT_EQ((flags & flag::kTc) != 0, x.flags.at("tc") != 0);
  EXPECT_EQ((flags & flag::kRd) != 0, x.flags.at("rd") != 0);
  EXPECT_EQ((flags & flag::kRa) != 0, x.flags.at("ra") != 0);
  EXPECT_EQ((flags & 0x0040) != 0, x.flags.at("z") != 0);
  EXPECT_EQ((flags & flag::kAd) != 0, x.flags.at("ad") != 0);
  EXPECT_EQ((flags & flag::kCd) != 0, x.flags.at("cd") != 0);
  EXPECT_EQ(flags & flag::kRcodeMask, x.flags.at("rcode"));
}

// Decodes `msg` with Message::Parse and compares every field with `x`.
// Returns the non-OPT records in re-encodable form.
std::vector<DecodedRr> CheckMessage(std::span<const uint8_t> msg, const Expected& x, Mode mode,
                                    uint32_t answer_ttl_age = 0) {
  std::vector<DecodedRr> out;
  Message m;
  const ParseError pe = m.Parse(msg, ParseOptions{});
  EXPECT_EQ(pe, ParseError::kOk) << ParseErrorName(pe);
  if (pe != ParseError::kOk) return out;
  EXPECT_EQ(m.bytes().size(), msg.size());
  CheckHeader(m.id(), m.flags(), x);
  EXPECT_EQ(m.rcode(), (x.edns.ext_rcode << 4) | x.flags.at("rcode"));
  EXPECT_EQ(Load16(msg.data() + kOffQdcount), x.counts[0]);
  EXPECT_EQ(m.count(Section::kAnswer), x.counts[1]);
  EXPECT_EQ(m.count(Section::kAuthority), x.counts[2]);
  EXPECT_EQ(m.count(Section::kAdditional), x.counts[3]);
  EXPECT_EQ(NameKeyToText(m.qname().span()), Lower(x.qname));
  EXPECT_EQ(m.qtype(), x.qtype);
  EXPECT_EQ(m.qclass(), x.qclass);

  size_t next = 0;  // index into x.rrs
  int opts_seen = 0;
  for (Section s : {Section::kAnswer, Section::kAuthority, Section::kAdditional}) {
    Message::Iterator it = m.Records(s);
    RrView rr;
    int n = 0;
    while (it.Next(&rr)) {
      ++n;
      EXPECT_EQ(rr.section, s);
      if (rr.type == type::kOpt) {
        ++opts_seen;
        EXPECT_EQ(s, Section::kAdditional);
        EXPECT_EQ(rr.name_offset, m.edns().opt_offset);
        continue;
      }
      if (next >= x.rrs.size()) {
        ADD_FAILURE() << "more records than tshark saw";
        continue;
      }
      const ExpRr& xr = x.rrs[next++];
      DecodedRr d;
      CheckRr(msg, rr, xr, mode, s == Section::kAnswer ? answer_ttl_age : 0, &d);
      out.push_back(d);
    }
    EXPECT_EQ(n, m.count(s)) << SectionName(s);
  }
  EXPECT_EQ(next, x.rrs.size()) << "fewer records than tshark saw";
  EXPECT_EQ(opts_seen, x.edns.present ? 1 : 0);
  CheckEdns(msg, m.edns(), x, /*in_query=*/false, AddressRecords(x));
  return out;
}

// Queries also go through ParseQuery.
void CheckQuery(std::span<const uint8_t> msg, const Expected& x) {
  Query q;
  const ParseError pe = ParseQuery(msg, ParseOptions{}, &q);
  ASSERT_EQ(pe, ParseError::kOk) << ParseErrorName(pe);
  CheckHeader(q.id, q.flags, x);
  EXPECT_EQ(q.opcode(), x.flags.at("opcode"));
  EXPECT_EQ(q.rd(), x.flags.at("rd") != 0);
  EXPECT_EQ(q.cd(), x.flags.at("cd") != 0);
  EXPECT_EQ(NameKeyToText(q.qname.span()), Lower(x.qname));
  EXPECT_EQ(q.qtype, x.qtype);
  EXPECT_EQ(q.qclass, x.qclass);
  EXPECT_EQ(q.question_end, kHeaderSize + x.qname.size() + 1 + 4);  // "a.b." -> 1 + a + 1 + b + 1 bytes
  EXPECT_EQ(q.udp_limit(), x.edns.present ? std::max<uint16_t>(512, x.edns.udp) : 512);
  CheckEdns(msg, q.edns, x, /*in_query=*/true, 0);
}

// ---------------------------------------------------------------- rebuild

enum class Rebuild { kAppendRecord, kRecordEncoder };

// Rebuilds `msg` from its decoded parts. With kRecordEncoder the answer
// section is a RecordEncoder blob appended with AppendRecords(age).
std::vector<uint8_t> RebuildMessage(std::span<const uint8_t> msg, const std::vector<DecodedRr>& rrs,
                                    Rebuild how, uint32_t age) {
  std::vector<uint8_t> out(4096);
  Message m;
  EXPECT_EQ(m.Parse(msg, ParseOptions{}), ParseError::kOk);
  ResponseWriter w(out.data(), out.size());
  // The question name sits uncompressed at offset 12 in any message; keep
  // its spelling (case).
  EXPECT_EQ(w.Begin(m.id(), m.flags(), msg.subspan(kHeaderSize, m.qname().len), m.qtype(), m.qclass()),
            ParseError::kOk);
  size_t i = 0;
  if (how == Rebuild::kRecordEncoder) {
    std::vector<uint8_t> blob(2048);
    RecordEncoder enc(blob.data(), blob.size(), m.qname().span());
    std::vector<uint16_t> ttl_offsets;
    uint16_t n = 0;
    for (; i < rrs.size() && rrs[i].section == Section::kAnswer; ++i, ++n) {
      uint16_t ttl_off = 0;
      EXPECT_EQ(
          enc.Append(rrs[i].owner.span(), rrs[i].type, rrs[i].klass, rrs[i].ttl, rrs[i].rdata, &ttl_off),
          ParseError::kOk);
      EXPECT_EQ(Load32(enc.blob().data() + ttl_off), rrs[i].ttl);
      ttl_offsets.push_back(ttl_off);
    }
    if (n > 0) {
      EXPECT_EQ(w.AppendRecords(Section::kAnswer, enc.blob(), n, ttl_offsets, age), ParseError::kOk);
    }
  }
  for (; i < rrs.size(); ++i) {
    const DecodedRr& r = rrs[i];
    EXPECT_EQ(w.AppendRecord(r.section, r.owner.span(), r.type, r.klass, r.ttl, r.rdata), ParseError::kOk);
  }
  const Edns& ed = m.edns();
  if (ed.present) {
    EXPECT_EQ(w.BeginOpt(ed.udp_size, ed.do_bit, ed.ext_rcode, ed.version), ParseError::kOk);
    OptionIterator it(msg.subspan(ed.rdata_offset, ed.rdata_len));
    for (;;) {
      uint16_t code = 0;
      std::span<const uint8_t> data;
      bool done = false;
      EXPECT_EQ(it.Next(&code, &data, &done), ParseError::kOk);
      if (done) break;
      if (code == option::kEcs) {
        EXPECT_EQ(w.AddEcs(ed.ecs), ParseError::kOk);
      } else if (code == kDefaultWeightOptionCode && data.empty() && how == Rebuild::kRecordEncoder) {
        EXPECT_EQ(w.AddWeights(code, {}), ParseError::kOk);
      } else {
        EXPECT_EQ(w.AddOption(code, data), ParseError::kOk);
      }
    }
  }
  const size_t len = w.Finish(out.size());
  EXPECT_EQ(len, w.size());
  out.resize(len);
  return out;
}

// ---------------------------------------------------------------- tests

TEST(GoldenExpectations, FileMatchesFixtureDirectory) {
  const ExpectationsFile& f = Expectations();
  ASSERT_TRUE(f.error.empty()) << f.error;
  EXPECT_EQ(f.declared_count, static_cast<int>(kExpectedFixtures));
  EXPECT_EQ(f.fixtures.size(), kExpectedFixtures);
  std::set<std::string> on_disk, listed;
  for (const auto& ent : std::filesystem::directory_iterator(kDir)) {
    if (ent.path().extension() == ".bin") on_disk.insert(ent.path().filename().string());
  }
  for (const Expected& x : f.fixtures) {
    EXPECT_TRUE(listed.insert(x.file).second) << "duplicate " << x.file;
    EXPECT_EQ(x.kind, x.file.starts_with("r_") ? "response" : "query") << x.file;
    EXPECT_EQ(x.questions, 1) << x.file;
    EXPECT_EQ(x.counts[0], 1) << x.file;
    int an = 0, ns = 0, ar = 0;
    for (const ExpRr& r : x.rrs) {
      an += r.section == "answer";
      ns += r.section == "authority";
      ar += r.section == "additional";
    }
    EXPECT_EQ(an, x.counts[1]) << x.file;
    EXPECT_EQ(ns, x.counts[2]) << x.file;
    EXPECT_EQ(ar + (x.edns.present ? 1 : 0), x.counts[3]) << x.file;
  }
  EXPECT_EQ(on_disk, listed);
}

// Literal spot checks, independent of the expectations file, so a broken or
// emptied expected.txt cannot make the suite pass vacuously.
TEST(GoldenSpotCheck, DigSubnetV4Query) {
  const std::vector<uint8_t> pkt = ReadFixture("q_dig_subnet_v4.bin");
  ASSERT_EQ(pkt.size(), 67u);
  Query q;
  ASSERT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(q.id, 21611);
  EXPECT_EQ(q.flags, 0x0120);
  EXPECT_EQ(NameKeyToText(q.qname.span()), "www.example.com.");
  EXPECT_EQ(q.qtype, type::kA);
  ASSERT_TRUE(q.edns.present);
  EXPECT_EQ(q.edns.udp_size, 1232);
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs.family, 1);
  EXPECT_EQ(q.edns.ecs.source_prefix, 24);
  EXPECT_EQ(q.edns.ecs.scope_prefix, 0);
  EXPECT_EQ(Ntop(AF_INET, q.edns.ecs.address.data()), "198.51.100.0");
  EXPECT_TRUE(q.edns.has_cookie);
  EXPECT_EQ(q.edns.cookie_len, 8);
  EXPECT_EQ(Hex(std::span<const uint8_t>(pkt).subspan(q.edns.cookie_offset, 8)), "6ffa20b375baa4ef");
  EXPECT_FALSE(q.edns.has_weight);
}

TEST(GoldenSpotCheck, DigSubnetV6Query) {
  const std::vector<uint8_t> pkt = ReadFixture("q_dig_subnet_v6.bin");
  Query q;
  ASSERT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(q.id, 4659);
  EXPECT_EQ(q.qtype, type::kAaaa);
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs.family, 2);
  EXPECT_EQ(q.edns.ecs.source_prefix, 48);
  EXPECT_EQ(q.edns.ecs.AddressBytes(), 6u);
  EXPECT_EQ(Ntop(AF_INET6, q.edns.ecs.address.data()), "2001:db8:1234::");
}

TEST(GoldenSpotCheck, WeightOptionFromDigAndKdig) {
  for (const char* file : {"q_dig_ednsopt65001.bin", "q_kdig_ednsopt65001.bin"}) {
    SCOPED_TRACE(file);
    const std::vector<uint8_t> pkt = ReadFixture(file);
    Query q;
    ASSERT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kOk);
    ASSERT_TRUE(q.edns.has_weight);
    EXPECT_EQ(q.edns.weight_len, 0);
    EXPECT_EQ(DecodeWeights({}, 3).verdict, WeightVerdict::kEmpty);
    // With another weight option code configured, 65001 is just unknown.
    ParseOptions other;
    other.weight_option_code = 65002;
    Query q2;
    ASSERT_EQ(ParseQuery(pkt, other, &q2), ParseError::kOk);
    EXPECT_FALSE(q2.edns.has_weight);
    EXPECT_EQ(q2.edns.option_count, q.edns.option_count);
  }
  Query q;
  const std::vector<uint8_t> kdig = ReadFixture("q_kdig_ednsopt65001.bin");
  ASSERT_EQ(ParseQuery(kdig, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(q.id, 56167);
  EXPECT_EQ(q.edns.udp_size, 4096);
  EXPECT_EQ(q.edns.option_count, 1);
  EXPECT_FALSE(q.edns.has_cookie);
}

TEST(GoldenSpotCheck, MixedCaseQueryKeepsCaseOnRebuild) {
  const std::vector<uint8_t> pkt = ReadFixture("q_dig_mixedcase.bin");
  Query q;
  ASSERT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(q.id, 18882);
  EXPECT_EQ(NameKeyToText(q.qname.span()), "www.example.com.");
  std::vector<uint8_t> out(512);
  ResponseWriter w(out.data(), out.size());
  ASSERT_EQ(w.BeginResponse(pkt, q, Rcode::kNoError), ParseError::kOk);
  const std::string wire(reinterpret_cast<const char*>(out.data() + kHeaderSize), q.qname.len);
  EXPECT_EQ(wire, std::string("\3WwW\7ExAmPlE\3CoM", 16) + std::string(1, '\0'));
  EXPECT_EQ(Load16(out.data()), 18882);
  EXPECT_EQ(Load16(out.data() + kOffFlags), flag::kQr | flag::kRd | flag::kRa);
}

TEST(GoldenSpotCheck, UnboundCnameChain) {
  const std::vector<uint8_t> pkt = ReadFixture("r_unbound_cname_chain.bin");
  Message m;
  ASSERT_EQ(m.Parse(pkt, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(m.id(), 62046);
  EXPECT_EQ(m.flags(), 0x8180);
  ASSERT_EQ(m.count(Section::kAnswer), 3);
  auto it = m.Records(Section::kAnswer);
  RrView rr[3];
  for (RrView& r : rr) ASSERT_TRUE(it.Next(&r));
  EXPECT_FALSE(it.Next(&rr[0]));
  uint8_t buf[256];
  size_t len = 0;
  EXPECT_EQ(rr[0].type, type::kCname);
  EXPECT_EQ(rr[0].ttl, 300u);
  ASSERT_EQ(CopyRdataUncompressed(pkt, rr[0], buf, sizeof buf, &len), ParseError::kOk);
  EXPECT_EQ(NameKeyToText({buf, len}), "a.cdn.example.net.");
  EXPECT_EQ(rr[1].type, type::kCname);
  EXPECT_EQ(rr[1].ttl, 120u);
  EXPECT_EQ(rr[1].rdlength, 4) << "label b + compression pointer";
  ASSERT_EQ(CopyRdataUncompressed(pkt, rr[1], buf, sizeof buf, &len), ParseError::kOk);
  EXPECT_EQ(NameKeyToText({buf, len}), "b.cdn.example.net.");
  EXPECT_EQ(len, 19u);
  EXPECT_EQ(rr[2].type, type::kA);
  EXPECT_EQ(rr[2].ttl, 60u);
  ASSERT_EQ(rr[2].rdlength, 4);
  EXPECT_EQ(Ntop(AF_INET, pkt.data() + rr[2].rdata_offset), "198.51.100.7");
  size_t end = 0;
  NameKey owner;
  ASSERT_EQ(ReadName(pkt, rr[2].name_offset, &end, &owner), ParseError::kOk);
  EXPECT_EQ(NameKeyToText(owner.span()), "b.cdn.example.net.");
}

TEST(GoldenSpotCheck, UnboundNxdomainSoaAndNsid) {
  const std::vector<uint8_t> pkt = ReadFixture("r_unbound_nxdomain.bin");
  Message m;
  ASSERT_EQ(m.Parse(pkt, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(m.id(), 12029);
  EXPECT_EQ(m.rcode(), 3);
  ASSERT_EQ(m.count(Section::kAuthority), 1);
  auto it = m.Records(Section::kAuthority);
  RrView rr;
  ASSERT_TRUE(it.Next(&rr));
  EXPECT_EQ(rr.type, type::kSoa);
  EXPECT_EQ(rr.ttl, 300u);
  uint8_t buf[256];
  size_t len = 0;
  ASSERT_EQ(CopyRdataUncompressed(pkt, rr, buf, sizeof buf, &len), ParseError::kOk);
  // ns1.example.com. (17) + hostmaster.example.com. (24) + 20 bytes.
  ASSERT_EQ(len, 17u + 24u + 20u);
  EXPECT_EQ(NameKeyToText({buf, 17}), "ns1.example.com.");
  EXPECT_EQ(NameKeyToText({buf + 17, 24}), "hostmaster.example.com.");
  EXPECT_EQ(Load32(buf + 41), 2024010101u);
  EXPECT_EQ(Load32(buf + 57), 300u);

  const std::vector<uint8_t> nsid = ReadFixture("r_unbound_nsid.bin");
  Message n;
  ASSERT_EQ(n.Parse(nsid, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(n.id(), 40279);
  ASSERT_TRUE(n.edns().has_nsid);
  ASSERT_EQ(n.edns().rdata_len, 8);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(nsid.data() + n.edns().rdata_offset + 4), 4), "weir");
}

TEST(GoldenSpotCheck, UnboundTruncated) {
  const std::vector<uint8_t> pkt = ReadFixture("r_unbound_tc.bin");
  ASSERT_EQ(pkt.size(), 33u);
  Message m;
  ASSERT_EQ(m.Parse(pkt, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(m.id(), 50275);
  EXPECT_TRUE(m.flags() & flag::kTc);
  EXPECT_EQ(m.count(Section::kAnswer), 0);
  EXPECT_EQ(m.count(Section::kAuthority), 0);
  EXPECT_EQ(m.count(Section::kAdditional), 0);
  EXPECT_FALSE(m.edns().present);
  EXPECT_EQ(m.qtype(), type::kTxt);
  RrView rr;
  auto it = m.Records(Section::kAnswer);
  EXPECT_FALSE(it.Next(&rr));
  const Expected* x = Find("r_unbound_tc.bin");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->flags.at("tc"), 1);
  EXPECT_EQ(x->counts[1], 0);
}

// ---------------------------------------------------------------- per fixture

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    x_ = Find(GetParam());
    ASSERT_NE(x_, nullptr);
    pkt_ = ReadFixture(GetParam());
    ASSERT_EQ(pkt_.size(), x_->size) << "fixture bytes changed";
  }
  const Expected* x_ = nullptr;
  std::vector<uint8_t> pkt_;
};

std::vector<std::string> FixtureNames(std::string_view kind = "") {
  std::vector<std::string> names;
  for (const Expected& e : Expectations().fixtures) {
    if (kind.empty() || e.kind == kind) names.push_back(e.file);
  }
  return names;
}

TEST_P(Golden, DecodesLikeTshark) {
  const std::vector<DecodedRr> rrs = CheckMessage(pkt_, *x_, Mode::kOriginal);
  EXPECT_EQ(rrs.size(), x_->rrs.size());
  if (x_->kind == "query") {
    CheckQuery(pkt_, *x_);
  } else {
    Query q;
    EXPECT_EQ(ParseQuery(pkt_, ParseOptions{}, &q), ParseError::kNotAQuery);
  }
}

TEST_P(Golden, RebuiltWithAppendRecordDecodesTheSame) {
  const std::vector<DecodedRr> rrs = CheckMessage(pkt_, *x_, Mode::kOriginal);
  ASSERT_FALSE(HasFailure());
  const std::vector<uint8_t> out = RebuildMessage(pkt_, rrs, Rebuild::kAppendRecord, 0);
  ASSERT_FALSE(HasFailure());
  {
    SCOPED_TRACE("rebuilt");
    CheckMessage(out, *x_, Mode::kUncompressed);
    if (x_->kind == "query") CheckQuery(out, *x_);
  }
  // Nothing to compress: the rebuild must be byte-identical to the capture.
  if (x_->rrs.empty()) {
    EXPECT_EQ(Hex(out), Hex(pkt_));
  }
}

// Responses only: the answer section re-encoded (compressed) by RecordEncoder.
class GoldenResponse : public Golden {};

TEST_P(GoldenResponse, RebuiltWithRecordEncoderDecodesTheSame) {
  ASSERT_EQ(x_->kind, "response");
  const std::vector<DecodedRr> rrs = CheckMessage(pkt_, *x_, Mode::kOriginal);
  ASSERT_FALSE(HasFailure());
  {
    SCOPED_TRACE("record encoder, age 0");
    const std::vector<uint8_t> out = RebuildMessage(pkt_, rrs, Rebuild::kRecordEncoder, 0);
    ASSERT_FALSE(HasFailure());
    CheckMessage(out, *x_, Mode::kRecompressed);
    // RecordEncoder compresses answers exactly like unbound did, so a reply
    // with nothing but answers (and OPT) comes back byte for byte.
    // Authority/additional records are appended uncompressed, though.
    if (x_->counts[2] == 0 && x_->counts[3] == (x_->edns.present ? 1 : 0)) {
      EXPECT_EQ(Hex(out), Hex(pkt_));
    }
  }
  {
    SCOPED_TRACE("record encoder, age 100");
    const std::vector<uint8_t> out = RebuildMessage(pkt_, rrs, Rebuild::kRecordEncoder, 100);
    ASSERT_FALSE(HasFailure());
    CheckMessage(out, *x_, Mode::kRecompressed, 100);
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::ValuesIn(FixtureNames()), ParamName);
INSTANTIATE_TEST_SUITE_P(Responses, GoldenResponse, ::testing::ValuesIn(FixtureNames("response")), ParamName);

}  // namespace
}  // namespace weir::dns
