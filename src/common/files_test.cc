#include "common/files.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/temp_dir.h"

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
  struct rlimit before = {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  struct rlimit limit = before;
  limit.rlim_cur = 64;
  const sighandler_t was = signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  const Status small = WriteFileAtomically(path, std::string(100, 's'));
  const Status large = WriteFileWhole(path.string() + ".large", std::string(1 << 20, 'l'));
  setrlimit(RLIMIT_FSIZE, &before);
  signal(SIGXFSZ, was);
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
  struct rlimit before = {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  struct rlimit limit = before;
  limit.rlim_cur = 64;
  const sighandler_t was = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  const Status failed = WriteFilesTogether(
      {{d / "node.key", "new key", 0600}, {d / "node.crt", "new crt"}, {d / "ca.crt", std::string(100, 'c')}});
  setrlimit(RLIMIT_FSIZE, &before);
  signal(SIGXFSZ, was);
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

}  // namespace
}  // namespace meridian
