#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "security/pki.h"
#include "security/tls.h"

namespace meridian::security {
namespace {

constexpr int64_t kDay = int64_t{86'400} * 1'000'000;

KeyPair Ca(const std::string& name = "test-ca") {
  StatusOr<KeyPair> ca = MakeCa(name, 30 * kDay);
  EXPECT_TRUE(ca.ok()) << ca.status().ToString();
  return *ca;
}

TlsCredentials Creds(const KeyPair& ca, const std::string& name, bool server = true) {
  StatusOr<KeyPair> kp = Issue(ca, {name, {"127.0.0.1", "localhost"}, kDay, server});
  EXPECT_TRUE(kp.ok()) << kp.status().ToString();
  return {ca.cert_pem, kp->cert_pem, kp->key_pem};
}

TEST(PkiTest, IssuedCertificatesNameTheirHolderAndVerifyOnlyAgainstTheirCa) {
  KeyPair ca = Ca();
  StatusOr<KeyPair> kp = Issue(ca, {"coordinator", {"127.0.0.1", "localhost", "::1"}, kDay, true});
  ASSERT_TRUE(kp.ok()) << kp.status().ToString();
  StatusOr<CertInfo> info = Inspect(kp->cert_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name, "coordinator");
  EXPECT_EQ(info->issuer, "test-ca");
  EXPECT_EQ(info->hosts, (std::vector<std::string>{"127.0.0.1", "localhost", "::1"}));
  EXPECT_FALSE(info->is_ca);
  EXPECT_EQ(info->fingerprint.size(), 64u);
  EXPECT_EQ(info->not_after_unix - info->not_before_unix, 86'400 + 60);
  EXPECT_TRUE(KeyMatches(kp->cert_pem, kp->key_pem));
  EXPECT_FALSE(KeyMatches(kp->cert_pem, ca.key_pem));
  const int64_t now = info->not_before_unix + 120;
  EXPECT_TRUE(Verify(kp->cert_pem, ca.cert_pem, now).ok());
  Status other = Verify(kp->cert_pem, Ca("other-ca").cert_pem, now);
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("unable to get local issuer certificate"), std::string::npos) << other.ToString();
  Status expired = Verify(kp->cert_pem, ca.cert_pem, info->not_after_unix + 1);
  EXPECT_NE(expired.message().find("certificate has expired"), std::string::npos) << expired.ToString();
  // A bundle of the old and the new CA accepts certificates of either (rotation).
  EXPECT_TRUE(Verify(kp->cert_pem, Ca("new-ca").cert_pem + ca.cert_pem, now).ok());
}

TEST(PkiTest, ASignedRequestGetsTheNameTheSignerGivesNotTheOneItAsks) {
  KeyPair ca = Ca();
  StatusOr<KeyPair> req = MakeRequest("coordinator");
  ASSERT_TRUE(req.ok());
  StatusOr<std::string> cert = SignRequest(ca, req->cert_pem, {"node:n1", {}, kDay, true});
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  EXPECT_EQ(Inspect(*cert)->common_name, "node:n1");
  EXPECT_TRUE(KeyMatches(*cert, req->key_pem));
  std::string tampered = req->cert_pem;
  tampered[tampered.size() / 2] ^= 1;
  EXPECT_FALSE(SignRequest(ca, tampered, {"node:n1", {}, kDay, true}).ok());
  EXPECT_EQ(SignRequest(ca, "junk", {"node:n1", {}, kDay, true}).status().code(), StatusCode::kInvalidArgument);
}

TEST(PkiTest, TokensAreRandomAndHashesStable) {
  StatusOr<std::string> a = RandomHex(32), b = RandomHex(32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
}

// Accepts one connection on a loopback listener and runs `serve` on it.
struct OneServer {
  std::unique_ptr<TcpListener> listener = *TcpListener::Listen("127.0.0.1", 0);
  std::thread thread;
  Status result;
  std::string received, identity;

  void Run(std::shared_ptr<TlsContext> tls) {
    thread = std::thread([this, tls] {
      StatusOr<std::unique_ptr<TcpStream>> tcp = listener->Accept();
      if (!tcp.ok()) {
        result = tcp.status();
        return;
      }
      StatusOr<std::unique_ptr<ByteStream>> s = tls->Accept(**tcp);
      if (!s.ok()) {
        result = s.status();
        return;
      }
      identity = (*s)->identity();
      received.resize(5);
      result = (*s)->ReadExact(received.data(), 5);
      if (result.ok()) result = (*s)->WriteAll("world", 5);
    });
  }
  ~OneServer() {
    if (thread.joinable()) thread.join();
  }
};

// What a TLS directory holds is bounded before it is read: a link to /dev/zero was once
// read without end, and a file over 1 MiB whole before it was refused.
TEST(TlsTest, CredentialsAreRefusedBeforeReadingWhatCannotBeAFileOfThem) {
  std::unique_ptr<TempDir> dir = *TempDir::Make("meridian-tls-test");
  const std::filesystem::path d(dir->path());
  KeyPair ca = Ca();
  TlsCredentials node = Creds(ca, "node:a");
  std::ofstream(d / "node.crt") << node.cert_pem;
  std::ofstream(d / "node.key") << node.key_pem;
  ASSERT_EQ(symlink("/dev/zero", (d / "ca.crt").c_str()), 0);
  StatusOr<TlsCredentials> zero = LoadCredentials(d.string(), "node");
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.status().message(), (d / "ca.crt").string() + ": not a regular file");
  std::filesystem::remove(d / "ca.crt");
  std::ofstream(d / "ca.crt") << std::string((1 << 20) + 1, 'x');
  EXPECT_EQ(LoadCredentials(d.string(), "node").status().message(), (d / "ca.crt").string() + " is over 1 MiB");
  std::ofstream(d / "ca.crt", std::ios::trunc) << ca.cert_pem;
  StatusOr<TlsCredentials> loaded = LoadCredentials(d.string(), "node");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->ca_pem, ca.cert_pem);
  EXPECT_EQ(loaded->key_pem, node.key_pem);
  std::filesystem::remove(d / "node.key");
  EXPECT_EQ(LoadCredentials(d.string(), "node").status().message(), "cannot read " + (d / "node.key").string());
}

TEST(TlsTest, BothEndsProveACertificateOfTheClusterCa) {
  KeyPair ca = Ca();
  auto server_tls = *TlsContext::Create(Creds(ca, "node:a"));
  auto client_tls = *TlsContext::Create(Creds(ca, "client:alice", false));
  OneServer server;
  server.Run(server_tls);
  auto tcp = TcpStream::Connect("127.0.0.1", server.listener->port(), 5'000'000);
  ASSERT_TRUE(tcp.ok());
  StatusOr<std::unique_ptr<ByteStream>> s = client_tls->Connect(std::move(*tcp));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->identity(), "node:a");
  ASSERT_TRUE((*s)->WriteAll("hello", 5).ok());
  std::string reply(5, '\0');
  ASSERT_TRUE((*s)->ReadExact(reply.data(), 5).ok());
  EXPECT_EQ(reply, "world");
  server.thread.join();
  EXPECT_TRUE(server.result.ok()) << server.result.ToString();
  EXPECT_EQ(server.received, "hello");
  EXPECT_EQ(server.identity, "client:alice");
}

TEST(TlsTest, APeerWithACertificateOfAnotherCaIsRefused) {
  KeyPair ca = Ca();
  auto server_tls = *TlsContext::Create(Creds(ca, "node:a"));
  auto stranger = *TlsContext::Create(Creds(Ca("other-ca"), "client:mallory", false));
  OneServer server;
  server.Run(server_tls);
  auto tcp = TcpStream::Connect("127.0.0.1", server.listener->port(), 5'000'000);
  ASSERT_TRUE(tcp.ok());
  StatusOr<std::unique_ptr<ByteStream>> s = stranger->Connect(std::move(*tcp));
  EXPECT_EQ(s.status().code(), StatusCode::kUnauthenticated);
  server.thread.join();
  EXPECT_EQ(server.result.code(), StatusCode::kUnauthenticated) << server.result.ToString();
  EXPECT_TRUE(server.received.empty());
}

TEST(TlsTest, APlainTcpPeerIsRefusedBeforeItCanAskAnything) {
  KeyPair ca = Ca();
  auto server_tls = *TlsContext::Create(Creds(ca, "node:a"));
  OneServer server;
  server.Run(server_tls);
  auto tcp = TcpStream::Connect("127.0.0.1", server.listener->port(), 5'000'000);
  ASSERT_TRUE(tcp.ok());
  // What a transfer request looks like, sent without TLS.
  std::string request(48, 'x');
  (*tcp)->WriteAll(request.data(), request.size()).IgnoreError();
  server.thread.join();
  EXPECT_EQ(server.result.code(), StatusCode::kUnauthenticated) << server.result.ToString();
  EXPECT_TRUE(server.received.empty());
}

TEST(TlsTest, AClientRefusesAServerThatIsNotANode) {
  KeyPair ca = Ca();
  auto server_tls = *TlsContext::Create(Creds(ca, "client:bob"));
  auto client_tls = *TlsContext::Create(Creds(ca, "client:alice", false));
  OneServer server;
  server.Run(server_tls);
  auto tcp = TcpStream::Connect("127.0.0.1", server.listener->port(), 5'000'000);
  StatusOr<std::unique_ptr<ByteStream>> s = client_tls->Connect(std::move(*tcp));
  EXPECT_EQ(s.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(s.status().message().find("not of a node of the cluster"), std::string::npos) << s.status().ToString();
  s = UnavailableError("done");
  server.listener->Shutdown();
}

// `meridian health` of a coordinator: the server must be the one asked for, and only it.
TEST(TlsTest, AClientAsksForTheServerItMeans) {
  KeyPair ca = Ca();
  auto server_tls = *TlsContext::Create(Creds(ca, "coordinator"));
  auto client_tls = *TlsContext::Create(Creds(ca, "monitor:probe", false));
  for (const std::string want : {"coordinator", "node:a"}) {
    OneServer server;
    server.Run(server_tls);
    auto tcp = TcpStream::Connect("127.0.0.1", server.listener->port(), 5'000'000);
    ASSERT_TRUE(tcp.ok());
    StatusOr<std::unique_ptr<ByteStream>> s = client_tls->Connect(std::move(*tcp), want);
    if (want == "coordinator") {
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_EQ((*s)->identity(), "coordinator");
    } else {
      EXPECT_EQ(s.status().code(), StatusCode::kUnauthenticated);
      EXPECT_NE(s.status().message().find("presented the certificate of 'coordinator', not of 'node:a'"),
                std::string::npos)
          << s.status().ToString();
    }
    s = UnavailableError("done");
    server.listener->Shutdown();
    if (server.thread.joinable()) server.thread.join();
  }
}

}  // namespace
}  // namespace meridian::security
