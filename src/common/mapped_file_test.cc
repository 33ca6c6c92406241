#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>

#include <gtest/gtest.h>

#include "common/temp_dir.h"

namespace meridian {
namespace {

TEST(MappedFileTest, ViewsAFilesBytesAndRefusesWhatIsNoFile) {
  std::unique_ptr<TempDir> dir = *TempDir::Make("meridian-mapped-test");
  const std::string path = dir->path() + "/data";
  std::ofstream(path, std::ios::binary) << std::string("a\0b\nc", 5);
  StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->data(), std::string_view("a\0b\nc", 5));
  EXPECT_EQ((*f)->size(), 5);
  const std::string empty = dir->path() + "/empty";
  std::ofstream(empty, std::ios::binary).flush();
  StatusOr<std::unique_ptr<MappedFile>> e = MappedFile::Open(empty);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->size(), 0);
  EXPECT_TRUE((*e)->data().empty());
  StatusOr<std::unique_ptr<MappedFile>> missing = MappedFile::Open(dir->path() + "/none");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir->path() + "/none: no such file");
  StatusOr<std::unique_ptr<MappedFile>> d = MappedFile::Open(dir->path());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(), dir->path() + ": a directory, not a file");
  StatusOr<std::unique_ptr<MappedFile>> zero = MappedFile::Open("/dev/zero");
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.status().message(), "/dev/zero: not a regular file");
}

// A FIFO is refused at once: its open once waited for a writer, so `objects put FIFO`
// (or a TLS file that is one) hung for as long as nobody wrote to it.
TEST(MappedFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  std::unique_ptr<TempDir> dir = *TempDir::Make("meridian-mapped-test");
  const std::string fifo = dir->path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::future<Status> opened = std::async(std::launch::async, [&] { return MappedFile::Open(fifo).status(); });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int writer = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets the open return
    opened.wait();
    if (writer >= 0) close(writer);
    FAIL() << "opening a FIFO waited for a writer";
  }
  const Status s = opened.get();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), fifo + ": not a regular file");
}

}  // namespace
}  // namespace meridian
