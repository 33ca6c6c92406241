#include "common/mapped_file.h"

#include <fstream>

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
}

}  // namespace
}  // namespace meridian
