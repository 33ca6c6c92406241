#include "common/files.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "testing/file_size_limit.h"

namespace meridian {
namespace {

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

mode_t ModeOf(const std::filesystem::path& path) {
  struct stat st = {};
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return st.st_mode & 0777;
}

TEST(FilesTest, ASecretIsItsOwnersFromItsCreationAndReplacesTheOldFileWhole) {
  std::unique_ptr<TempDir> dir = *TempDir::Make("meridian-files-test");
  const std::filesystem::path key = std::filesystem::path(dir->path()) / "ca.key";
  // A stale temporary file others may read is not written into: it is replaced.
  std::ofstream(std::filesystem::path(dir->path()) / "ca.key.tmp") << "stale";
  chmod((key.string() + ".tmp").c_str(), 0644);
  ASSERT_TRUE(WriteFileAtomically(key, "first", 0600).ok());
  EXPECT_EQ(Read(key), "first");
  EXPECT_EQ(ModeOf(key), 0600u);
  ASSERT_TRUE(WriteFileAtomically(key, std::string(10'000, 'k'), 0600).ok());
  EXPECT_EQ(Read(key), std::string(10'000, 'k'));
  EXPECT_FALSE(std::filesystem::exists(key.string() + ".tmp"));
  const std::filesystem::path plain = std::filesystem::path(dir->path()) / "plain";
  ASSERT_TRUE(WriteFileWhole(plain, "x").ok());
  EXPECT_EQ(ModeOf(plain), 0644u);
}

// A write cut short (here by a file size limit; a full disk alike) is an error naming
// the file; the old file stays as it was. Small writes too, which a buffered stream
// only makes when it closes, unchecked: they once left a file cut short.
TEST(FilesTest, AWriteCutShortIsAnErrorAndLeavesTheOldFile) {
  std::unique_ptr<TempDir> dir = *TempDir::Make("meridian-files-test");
  const std::filesystem::path path = std::filesystem::path(dir->path()) / "token";
  ASSERT_TRUE(WriteFileAtomically(path, "old\n").ok());
  Status small, large;
  {
    testing::FileSizeLimit limit(64);
    ASSERT_TRUE(limit.ok());
    small = WriteFileAtomically(path, std::string(100, 's'));
    large = WriteFileWhole(path.string() + ".large", std::string(1 << 20, 'l'));
  }
  EXPECT_EQ(small.code(), StatusCode::kUnavailable);
  EXPECT_EQ(small.message(), "cannot write 100 B to " + path.string() + ".tmp: File too large");
  EXPECT_EQ(Read(path), "old\n");
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  EXPECT_EQ(large.message(), "cannot write 1 MiB to " + path.string() + ".large: File too large");
}

// Files that belong together are all new or all old: a write that fails past the first
// file (here the third, at a file size limit) leaves every one as it was, with no
// temporary file behind.
TEST(FilesTest, FilesWrittenTogetherAreAllNewOrAllOld) {
  std::unique_ptr<TempDir> dir = *TempDir::Make("meridian-files-test");
  const std::filesystem::path d(dir->path());
  ASSERT_TRUE(WriteFilesTogether({{d / "node.key", "old key", 0600}, {d / "node.crt", "old crt"}, {d / "ca.crt", "old ca"}})
                  .ok());
  Status failed;
  {
    testing::FileSizeLimit limit(64);
    ASSERT_TRUE(limit.ok());
    failed = WriteFilesTogether(
        {{d / "node.key", "new key", 0600}, {d / "node.crt", "new crt"}, {d / "ca.crt", std::string(100, 'c')}});
  }
  EXPECT_EQ(failed.message(), "cannot write 100 B to " + (d / "ca.crt").string() + ".tmp: File too large");
  EXPECT_EQ(Read(d / "node.key"), "old key");
  EXPECT_EQ(Read(d / "node.crt"), "old crt");
  EXPECT_EQ(Read(d / "ca.crt"), "old ca");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d)) ++entries;
  EXPECT_EQ(entries, 3);  // no .tmp left
  ASSERT_TRUE(WriteFilesTogether({{d / "node.key", "new key", 0600}, {d / "node.crt", "new crt"}}).ok());
  EXPECT_EQ(Read(d / "node.key"), "new key");
  EXPECT_EQ(ModeOf(d / "node.key"), 0600u);
  EXPECT_EQ(Read(d / "node.crt"), "new crt");
}

// A file the user names is written as cp writes it: a FIFO (or a device: /dev/null,
// /dev/stdout) where it is, a link's file through the link. They were once replaced by a
// regular file renamed over them: `objects get ID -o /dev/null`, run as root, put a
// file where /dev/null was. (A FIFO stands for the devices here: a test that got this
// wrong must not take /dev/null from the machine it runs on.)
TEST(FilesTest, AnOutputFileIsWrittenWhereItsPathPointsNeverReplaced) {
  std::unique_ptr<TempDir> dir = *TempDir::Make("meridian-files-test");
  const std::filesystem::path d(dir->path());
  const std::filesystem::path fifo = d / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = Read(fifo); });
  const Status to_fifo = WriteOutputFile(fifo, "through the pipe");
  reader.join();
  EXPECT_TRUE(to_fifo.ok()) << to_fifo.ToString();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  // A link: the file it names gets the bytes, keeping its mode; the link stays a link.
  const std::filesystem::path target = d / "target", link = d / "link";
  ASSERT_TRUE(WriteFileWhole(target, "old", 0600).ok());
  std::filesystem::create_symlink(target, link);
  ASSERT_TRUE(WriteOutputFile(link, "new").ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(Read(target), "new");
  EXPECT_EQ(ModeOf(target), 0600u);
  // A link to nothing is refused and left as it is (before, it was replaced by a file).
  const std::filesystem::path dangling = d / "dangling";
  std::filesystem::create_symlink(d / "nowhere", dangling);
  EXPECT_EQ(WriteOutputFile(dangling, "x").message(),
            dangling.string() + ": a link to " + (d / "nowhere").string() + ", which does not exist; not written through it");
  EXPECT_TRUE(std::filesystem::is_symlink(dangling));
  EXPECT_FALSE(std::filesystem::exists(d / "nowhere"));
  // A new file, and a directory refused.
  ASSERT_TRUE(WriteOutputFile(d / "fresh", "fresh").ok());
  EXPECT_EQ(Read(d / "fresh"), "fresh");
  EXPECT_EQ(WriteOutputFile(d, "x").message(), d.string() + ": a directory, not a file");
}

}  // namespace
}  // namespace meridian
