#include "collective/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>

namespace meridian::collective {
namespace {

struct Pair {
  std::unique_ptr<TcpStream> a, b;
};

Pair Connected() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {std::make_unique<TcpStream>(fds[0]), std::make_unique<TcpStream>(fds[1])};
}

uint8_t Pattern(size_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }

TEST(ShmStreamTest, CarriesEveryByteInOrderAcrossManyWrapsOfTheRing) {
  Pair p = Connected();
  StatusOr<std::unique_ptr<ShmStream>> w = ShmStream::Offer(std::move(p.a), 4096);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  StatusOr<std::unique_ptr<ShmStream>> r = ShmStream::Take(std::move(p.b), 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE((*r)->SetTimeout(5'000'000).ok());
  const size_t total = 3'000'017;  // 732 rings' worth
  std::vector<uint8_t> sent(total);
  for (size_t i = 0; i < total; ++i) sent[i] = Pattern(i);
  std::thread writer([&] {
    // Writes of uneven sizes, two buffers at a time, some longer than the ring.
    for (size_t off = 0, k = 0; off < total; ++k) {
      const size_t n1 = std::min<size_t>(1 + (k * 7919) % 9000, total - off);
      const size_t n2 = std::min<size_t>((k * 104729) % 300, total - off - n1);
      const iovec parts[] = {{sent.data() + off, n1}, {sent.data() + off + n1, n2}};
      ASSERT_TRUE((*w)->WriteAll(parts).ok());
      off += n1 + n2;
    }
  });
  std::vector<uint8_t> got(total);
  Status s;
  for (size_t off = 0, k = 0; off < total && s.ok(); ++k) {
    const size_t n = std::min<size_t>(1 + (k * 6007) % 7000, total - off);
    s = (*r)->ReadExact(got.data() + off, n);
    off += n;
  }
  writer.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  size_t wrong = 0;
  for (size_t i = 0; i < total; ++i) wrong += got[i] != sent[i];
  EXPECT_EQ(wrong, 0u);
  // Each end can go one way only.
  EXPECT_EQ((*r)->WriteAll(got.data(), 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->ReadExact(got.data(), 1).code(), StatusCode::kFailedPrecondition);
}

TEST(ShmStreamTest, AReaderWaitingOnAPeerThatExitsFailsAtOnce) {
  Pair p = Connected();
  StatusOr<std::unique_ptr<ShmStream>> w = ShmStream::Offer(std::move(p.a), 4096);
  ASSERT_TRUE(w.ok());
  StatusOr<std::unique_ptr<ShmStream>> r = ShmStream::Take(std::move(p.b), 4096);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->SetTimeout(60'000'000).ok());
  ASSERT_TRUE((*w)->WriteAll("abc", 3).ok());
  std::thread gone([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    w->reset();
  });
  char buf[8] = {};
  Status s = (*r)->ReadExact(buf, 8);  // 3 bytes come, then the writer is gone
  gone.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("closed its end"), std::string::npos) << s.ToString();
  EXPECT_EQ(std::string(buf, 3), "abc");
  // And a reader shut from another thread returns too.
  Pair q = Connected();
  StatusOr<std::unique_ptr<ShmStream>> w2 = ShmStream::Offer(std::move(q.a), 4096);
  StatusOr<std::unique_ptr<ShmStream>> r2 = ShmStream::Take(std::move(q.b), 4096);
  ASSERT_TRUE(w2.ok() && r2.ok());
  std::thread shut([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*r2)->Shutdown();
  });
  EXPECT_EQ((*r2)->ReadExact(buf, 1).code(), StatusCode::kUnavailable);
  shut.join();
}

// A hostile writer's ring: a memfd of `bytes`, sealed when `seal`, with our header
// laid out (magic, capacity; the positions at 64 and 128), handed over with `extra`
// descriptors more.
struct Forged {
  int fd = -1;
  void* map = nullptr;
  size_t bytes = 0;
  ~Forged() {
    if (map) munmap(map, bytes);
    if (fd >= 0) close(fd);
  }
};

void Hand(TcpStream& socket, const std::vector<int>& fds) {
  char byte = 'R';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ASSERT_EQ(sendmsg(socket.fd(), &msg, MSG_NOSIGNAL), 1);
}

std::unique_ptr<Forged> Forge(size_t capacity, size_t bytes, bool seal) {
  auto f = std::make_unique<Forged>();
  f->fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  f->bytes = bytes;
  EXPECT_EQ(ftruncate(f->fd, static_cast<off_t>(bytes)), 0);
  if (seal) {
    EXPECT_EQ(fcntl(f->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  }
  f->map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
  const uint64_t header[2] = {0x474E495231434D52, capacity};
  std::memcpy(f->map, header, sizeof(header));
  return f;
}

TEST(ShmStreamTest, ARingThatCouldBeResizedOrIsNotTheAgreedSizeIsRefused) {
  struct Case {
    size_t bytes;
    bool seal;
    int copies;
    const char* why;
  };
  for (const Case& c : {Case{4096 + 8192, false, 1, "not sealed against resizing"},
                        Case{4096 + 4096, true, 1, "not a ring of 12288 bytes"},
                        Case{4096 + 8192, true, 2, "expected one descriptor, got 2"}}) {
    Pair p = Connected();
    std::unique_ptr<Forged> f = Forge(8192, c.bytes, c.seal);
    Hand(*p.a, std::vector<int>(static_cast<size_t>(c.copies), f->fd));
    StatusOr<std::unique_ptr<ShmStream>> r = ShmStream::Take(std::move(p.b), 8192);
    ASSERT_FALSE(r.ok()) << c.why;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.why), std::string::npos) << r.status().ToString();
  }
}

TEST(ShmStreamTest, AWritePositionBeyondTheRingIsDataLossNotAReadOutsideIt) {
  Pair p = Connected();
  std::unique_ptr<Forged> f = Forge(8192, 4096 + 8192, true);
  Hand(*p.a, {f->fd});
  StatusOr<std::unique_ptr<ShmStream>> r = ShmStream::Take(std::move(p.b), 8192);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The peer claims to have written more than the ring holds.
  const uint64_t written = 8192 + 1;
  std::memcpy(static_cast<char*>(f->map) + 64, &written, sizeof(written));
  std::vector<char> buf(100);
  Status s = (*r)->ReadExact(buf.data(), buf.size());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("write position is corrupt"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace meridian::collective
