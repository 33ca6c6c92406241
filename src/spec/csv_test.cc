#include "spec/csv.h"

#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meridian::spec {
namespace {

TEST(CsvTableTest, FieldsSurviveMovesAndCopiesOfShortTexts) {
  // A text short enough to sit inline in a std::string: the table's views once pointed
  // into the moved-from string and read garbage after a move.
  StatusOr<CsvTable> parsed = CsvTable::Parse("a,b\n1,22\n", "t.csv");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  CsvTable moved = std::move(*parsed);
  *parsed = *CsvTable::Parse("x,y\n9,9\n", "u.csv");  // reuse the moved-from storage
  CsvTable copy = moved;
  for (const CsvTable* t : {&moved, &copy}) {
    EXPECT_EQ(t->header(), (std::vector<std::string_view>{"a", "b"}));
    ASSERT_EQ(t->rows(), 1u);
    EXPECT_EQ(t->field(0, 0), "1");
    EXPECT_EQ(t->field(0, 1), "22");
    EXPECT_EQ(*t->Int(0, 1), 22);
  }
}

TEST(CsvTableTest, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(CsvTable::Parse("a,b\n1\n", "t.csv").status().message(), "t.csv:2: expected 2 fields as in the header, got 1");
  StatusOr<CsvTable> t = CsvTable::Parse("a,b\n1,x\n", "t.csv");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Int(0, 1).status().message(), "t.csv:2: b: expected an integer, got 'x'");
}

}  // namespace
}  // namespace meridian::spec
