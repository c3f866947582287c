#include "weir/mgmt/accounts.h"

#include <openssl/evp.h>

#include <array>
#include <limits>

#include "weir/common/secure_random.h"
#include "weir/common/text.h"
#include "weir/mgmt/control.h"

namespace weir::mgmt {

using common::Cat;

namespace {

std::string Hex(const uint8_t* bytes, size_t len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (size_t i = 0; i < len; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

absl::StatusOr<std::optional<bool>> OnOff(const ControlArgs& a, std::string_view key, std::string_view flag) {
  if (!a.Has(key)) return std::optional<bool>();
  const std::string v = a.Get(key);
  if (v == "on") return std::optional<bool>(true);
  if (v == "off") return std::optional<bool>(false);
  return absl::InvalidArgumentError(Cat(flag, " takes on or off, not '", v.substr(0, 32), "'"));
}

// The settings among `a`'s arguments.
absl::StatusOr<AccountSettings> Settings(const ControlArgs& a) {
  AccountSettings s;
  auto u = OnOff(a, "unsigned", "--unsigned");
  if (!u.ok()) return u.status();
  s.allow_unsigned = *u;
  auto md5 = OnOff(a, "legacy_md5", "--legacy-md5");
  if (!md5.ok()) return md5.status();
  s.allow_legacy_md5 = *md5;
  if (a.Has("rps")) {
    auto rps = a.Number("rps", 0, 0, std::numeric_limits<uint32_t>::max());
    if (!rps.ok()) return rps.status();
    s.rps = static_cast<uint32_t>(*rps);
  }
  return s;
}

// The text and JSON of a change: "account acme added: version 3".
StructuredReply ChangeReply(const std::string& what, uint64_t version, const std::string& name) {
  StructuredReply r(Json{{"version", version}, {"account", name}});
  r.Block([what](const Json& d) { return Cat(what, ": version ", CellText(d, "version"), "\n"); });
  return r;
}

// Adds the secret (when weir-mgmt made it) and its fingerprint to an add's
// or rotate's reply.
void AddSecret(StructuredReply& r, const std::string& secret, bool generated) {
  r.json()["fingerprint"] = SecretFingerprint(secret);
  if (generated) {
    r.json()["secret"] = secret;
    r.Block([](const Json& d) {
      return Cat("secret ", CellText(d, "secret"), "\nfingerprint ", CellText(d, "fingerprint"),
                 "\nweir-mgmt shows this secret only now: store it where the app's signer reads it\n");
    });
  } else {
    r.Block([](const Json& d) {
      return Cat("secret from the file, fingerprint ", CellText(d, "fingerprint"), "\n");
    });
  }
}

}  // namespace

std::string NewAccountSecret() {
  std::array<uint8_t, 32> bytes{};
  common::SecureRandom rng;
  rng.Fill(bytes.data(), bytes.size());
  return Hex(bytes.data(), bytes.size());
}

std::string SecretFingerprint(std::string_view secret) {
  std::array<uint8_t, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_Digest(secret.data(), secret.size(), md.data(), &len, EVP_sha256(), nullptr) != 1 || len < 6) {
    return "?";  // OpenSSL without SHA-256: never in a working build
  }
  return Hex(md.data(), 6);
}

absl::StatusOr<AccountChange> ChangeAccount(Store& store, Command id, const std::vector<std::string>& args,
                                            const std::string& actor) {
  if (args.empty()) return absl::InvalidArgumentError("an account request names the account");
  const std::string& name = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  absl::StatusOr<ControlArgs> a = absl::InternalError("");
  switch (id) {
    case Command::kAccountAdd:
      a = ControlArgs::Parse(rest, {"unsigned", "legacy_md5", "rps", "secret"});
      break;
    case Command::kAccountRotate:
      a = ControlArgs::Parse(rest, {"secret"});
      break;
    case Command::kAccountSet:
      a = ControlArgs::Parse(rest, {"unsigned", "legacy_md5", "rps"});
      break;
    case Command::kAccountRetire:
    case Command::kAccountRm:
      a = ControlArgs::Parse(rest, {});
      break;
    default:
      return absl::InvalidArgumentError(Cat("'", SpecOf(id).verb, "' is not an account change"));
  }
  if (!a.ok()) return a.status();
  const bool generated = !a->Has("secret");
  std::string secret;
  if (id == Command::kAccountAdd || id == Command::kAccountRotate)
    secret = generated ? NewAccountSecret() : a->Get("secret");
  AccountChange out;
  switch (id) {
    case Command::kAccountAdd: {
      auto settings = Settings(*a);
      if (!settings.ok()) return settings.status();
      auto v = store.AddAccount(name, secret, *settings, actor);
      if (!v.ok()) return v.status();
      out.version = *v;
      out.what = Cat("account ", name, " added");
      out.reply = ChangeReply(out.what, *v, name);
      AddSecret(out.reply, secret, generated);
      break;
    }
    case Command::kAccountRotate: {
      auto v = store.RotateAccount(name, secret, actor);
      if (!v.ok()) return v.status();
      out.version = *v;
      out.what = Cat("account ", name, " rotated");
      out.reply = ChangeReply(out.what, *v, name);
      AddSecret(out.reply, secret, generated);
      out.reply.Text(Cat("the previous secret stays live until: weirctl account retire ", name, "\n"));
      break;
    }
    case Command::kAccountRetire: {
      auto v = store.RetireAccountSecret(name, actor);
      if (!v.ok()) return v.status();
      out.version = *v;
      out.what = Cat("account ", name, ": previous secret retired");
      out.reply = ChangeReply(out.what, *v, name);
      break;
    }
    case Command::kAccountSet: {
      auto settings = Settings(*a);
      if (!settings.ok()) return settings.status();
      auto v = store.SetAccount(name, *settings, actor);
      if (!v.ok()) return v.status();
      out.version = *v;
      out.what = Cat("account ", name, " changed");
      out.reply = ChangeReply(out.what, *v, name);
      break;
    }
    default: {  // kAccountRm
      auto v = store.RemoveAccount(name, actor);
      if (!v.ok()) return v.status();
      out.version = *v;
      out.what = Cat("account ", name, " removed");
      out.reply = ChangeReply(out.what, *v, name);
      break;
    }
  }
  return out;
}

StructuredReply ListAccounts(const Store& store) {
  StructuredReply r(Json{{"version", store.version()}, {"accounts", Json::array()}});
  for (const AccountRecord& a : store.accounts()) {
    Json fingerprints = Json::array({SecretFingerprint(a.secret)});
    if (!a.previous_secret.empty()) fingerprints.push_back(SecretFingerprint(a.previous_secret));
    r.json()["accounts"].push_back(Json{{"name", a.name},
                                        {"unsigned", a.allow_unsigned},
                                        {"legacy_md5", a.allow_legacy_md5},
                                        {"rps", a.rps},
                                        {"secrets", fingerprints.size()},
                                        {"fingerprints", fingerprints},
                                        {"created", a.created},
                                        {"rotated", a.rotated == 0 ? Json(nullptr) : Json(a.rotated)}});
  }
  auto on_off = [](std::string key) {
    return [key](const Json& row) { return row.value(key, false) ? std::string("on") : std::string("off"); };
  };
  r.Table("/accounts",
          {StructuredReply::Field("NAME", "name"),
           {"UNSIGNED", on_off("unsigned")},
           {"LEGACY_MD5", on_off("legacy_md5")},
           StructuredReply::Field("RPS", "rps"),
           StructuredReply::Field("SECRETS", "secrets"),
           {"FINGERPRINTS",
            [](const Json& row) {
              std::string out;
              for (const Json& f : row["fingerprints"])
                out += (out.empty() ? "" : ",") + f.get<std::string>();
              return out;
            }},
           {"CREATED", [](const Json& row) { return UtcTimeText(row.value("created", int64_t{0})); }},
           {"ROTATED", [](const Json& row) {
              return row["rotated"].is_null() ? std::string("-") : UtcTimeText(row["rotated"].get<int64_t>());
            }}});
  return r;
}

}  // namespace weir::mgmt
