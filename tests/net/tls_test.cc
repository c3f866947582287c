// net::TlsServerContext's checks of the operator's files and the session
// ticket key ring's rotation. Certificates are made here with OpenSSL's API
// (a fresh key and a self-signed certificate per case), never read from the
// repository, so validity windows are relative to now.
#include "weir/net/tls.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

namespace weir::net {
namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/weir-tls-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

EVP_PKEY* NewKey(bool rsa) { return rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256"); }

// Writes a self-signed certificate for `key` valid from now + `from_s` to
// now + `to_s` seconds, and the key, as PEM files.
void WritePair(EVP_PKEY* cert_key, EVP_PKEY* file_key, long from_s, long to_s, const std::string& chain,
               const std::string& keyfile) {
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), from_s);
  X509_gmtime_adj(X509_getm_notAfter(x), to_s);
  X509_set_pubkey(x, cert_key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("weir unit"),
                             -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509_sign(x, cert_key, EVP_sha256());
  FILE* f = std::fopen(chain.c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(keyfile.c_str(), "w");
  PEM_write_PrivateKey(f, file_key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
}

class TlsContextTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::string File(const std::string& name) { return (dir.path / name).string(); }
  TlsServerOptions One(const std::string& chain, const std::string& key) {
    TlsServerOptions o;
    o.certificates.push_back({chain, key});
    return o;
  }
};

TEST_F(TlsContextTest, GoodEcdsaAndRsaChainsLoadSideBySide) {
  EVP_PKEY* ec = NewKey(false);
  EVP_PKEY* rsa = NewKey(true);
  WritePair(ec, ec, -60, 86400, File("ec.pem"), File("ec.key"));
  WritePair(rsa, rsa, -60, 86400, File("rsa.pem"), File("rsa.key"));
  TlsServerOptions o = One(File("ec.pem"), File("ec.key"));
  o.certificates.push_back({File("rsa.pem"), File("rsa.key")});
  TicketKeyRing ring(std::chrono::seconds(3600), std::chrono::steady_clock::now());
  auto ctx = TlsServerContext::Create(o, &ring);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  ASSERT_EQ((*ctx)->certificates().size(), 2u);
  EXPECT_EQ((*ctx)->certificates()[0].key_type, "ECDSA prime256v1");
  EXPECT_EQ((*ctx)->certificates()[1].key_type, "RSA 2048");
  EXPECT_EQ((*ctx)->certificates()[0].subject, "/CN=weir unit");
  EVP_PKEY_free(ec);
  EVP_PKEY_free(rsa);
}

TEST_F(TlsContextTest, EachProblemIsNamed) {
  EVP_PKEY* a = NewKey(false);
  EVP_PKEY* b = NewKey(false);
  WritePair(a, a, -60, 86400, File("good.pem"), File("good.key"));
  WritePair(a, a, -86400, -60, File("expired.pem"), File("expired.key"));
  WritePair(a, a, 3600, 86400, File("future.pem"), File("future.key"));
  WritePair(a, b, -60, 86400, File("mismatch.pem"), File("mismatch.key"));
  {
    FILE* f = std::fopen(File("garbage.pem").c_str(), "w");
    std::fputs("not a certificate\n", f);
    std::fclose(f);
  }
  auto msg = [&](const std::string& chain, const std::string& key) {
    auto r = TlsServerContext::Check(One(chain, key));
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_EQ(msg(File("good.pem"), File("good.key")), "ok");
  EXPECT_NE(msg(File("expired.pem"), File("expired.key")).find("has expired"), std::string::npos);
  EXPECT_NE(msg(File("future.pem"), File("future.key")).find("is not valid yet"), std::string::npos);
  EXPECT_NE(msg(File("mismatch.pem"), File("mismatch.key")).find("does not belong to the certificate"),
            std::string::npos);
  EXPECT_NE(msg(File("missing.pem"), File("good.key")).find("missing.pem: cannot read the certificate chain"),
            std::string::npos);
  EXPECT_NE(msg(File("garbage.pem"), File("good.key")).find("no PEM certificate"), std::string::npos);
  EXPECT_NE(msg(File("good.pem"), File("garbage.pem")).find("no PEM private key"), std::string::npos);
  // Two chains of one key type: which one would a client get?
  TlsServerOptions two = One(File("good.pem"), File("good.key"));
  two.certificates.push_back({File("good.pem"), File("good.key")});
  auto r = TlsServerContext::Check(two);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("one chain per key type"), std::string::npos);
  EXPECT_FALSE(TlsServerContext::Check(TlsServerOptions{}).ok());
  EVP_PKEY_free(a);
  EVP_PKEY_free(b);
}

TEST(TicketKeyRingTest, RotatesAndKeepsOnePreviousKey) {
  using namespace std::chrono;
  const auto t0 = steady_clock::time_point{} + hours(1);
  TicketKeyRing ring(seconds(60), t0);
  unsigned char name1[16], iv[16];
  EVP_CIPHER_CTX* cipher = EVP_CIPHER_CTX_new();
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* mac = EVP_MAC_CTX_new(hmac);
  ASSERT_EQ(ring.Seal(name1, iv, cipher, mac), 1);
  EXPECT_EQ(ring.Open(name1, iv, cipher, mac), 1);  // sealed with the current key
  ring.Rotate(t0 + seconds(59));
  EXPECT_EQ(ring.size(), 1u);  // not yet
  ring.Rotate(t0 + seconds(60));
  EXPECT_EQ(ring.size(), 2u);
  EXPECT_EQ(ring.Open(name1, iv, cipher, mac), 2);  // an older key: opened, renew the ticket
  unsigned char name2[16];
  ASSERT_EQ(ring.Seal(name2, iv, cipher, mac), 1);
  EXPECT_NE(std::string(reinterpret_cast<char*>(name1), 16), std::string(reinterpret_cast<char*>(name2), 16));
  ring.Rotate(t0 + seconds(120));
  EXPECT_EQ(ring.size(), 2u);
  EXPECT_EQ(ring.Open(name1, iv, cipher, mac), 0);  // two periods old: a full handshake
  EXPECT_EQ(ring.Open(name2, iv, cipher, mac), 2);
  EVP_MAC_CTX_free(mac);
  EVP_MAC_free(hmac);
  EVP_CIPHER_CTX_free(cipher);
}

}  // namespace
}  // namespace weir::net
