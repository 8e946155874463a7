#include "toolcall/python_literal.h"

#include <gtest/gtest.h>

#include <string>

namespace kvasir::toolcall {
namespace {

std::string py_json(std::string_view text) {
  auto v = parse_python_literal(text);
  if (!v.ok()) return "ERROR";
  Json::DumpOptions py;
  py.item_sep = ", ";
  py.key_sep = ": ";
  return v->dump(py);
}

TEST(PythonLiteral, ConvertsAsJsonDumpsWould) {
  EXPECT_EQ(py_json("'a'"), R"("a")");
  EXPECT_EQ(py_json("\"it's\""), R"("it's")");
  EXPECT_EQ(py_json("'\\n\\t\\\\ \\x41\\u00e9\\U0001F600\\101'"), "\"\\n\\t\\\\ A\xC3\xA9\xF0\x9F\x98\x80" "A\"");
  EXPECT_EQ(py_json("r'C:\\new'"), R"("C:\\new")");
  EXPECT_EQ(py_json("'''two\nlines'''"), R"("two\nlines")");
  EXPECT_EQ(py_json("'a' \"b\" r'\\c'"), R"("ab\\c")");
  EXPECT_EQ(py_json("'\\d'"), R"("\\d")");  // unknown escapes keep the backslash
  EXPECT_EQ(py_json("42"), "42");
  EXPECT_EQ(py_json("-7"), "-7");
  EXPECT_EQ(py_json("- 7"), "-7");
  EXPECT_EQ(py_json("0x_ff"), "255");
  EXPECT_EQ(py_json("0o17"), "15");
  EXPECT_EQ(py_json("0b101"), "5");
  EXPECT_EQ(py_json("1_000_000"), "1000000");
  EXPECT_EQ(py_json("-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(py_json("1.5"), "1.5");
  EXPECT_EQ(py_json("1e3"), "1000.0");
  EXPECT_EQ(py_json("0e5"), "0.0");
  EXPECT_EQ(py_json(".5"), "0.5");
  EXPECT_EQ(py_json("5."), "5.0");
  EXPECT_EQ(py_json("007.5"), "7.5");
  EXPECT_EQ(py_json("1e16"), "1e+16");
  EXPECT_EQ(py_json("True"), "true");
  EXPECT_EQ(py_json("None"), "null");
  EXPECT_EQ(py_json("[1, (2, 3), [], (), (4,), (5)]"), "[1, [2, 3], [], [], [4], 5]");
  EXPECT_EQ(py_json("{'a': 1, 2: 'b', 1.5: None, True: [], None: {}, 'a': 3}"),
            R"({"a": 3, "2": "b", "1.5": null, "true": [], "null": {}})");
  EXPECT_EQ(py_json("[\n  1,\n  2,\n]"), "[1, 2]");
}

TEST(PythonLiteral, RefusesWhatIsNotAJsonLiteral) {
  const char* bad[] = {"x", "f()", "b'x'", "f'{x}'", "{1, 2}", "1j", "1e999", "float('inf')", "9223372036854775808",
                       "'\\ud800'", "'\\N{DASH}'", "'unterminated", "'a\nb'", "[1, 2", "{[1]: 2}", "007", "1__0", "0x",
                       "1 2", "", "'\xff'", "# comment"};
  for (const char* text : bad) EXPECT_EQ(py_json(text), "ERROR") << text;
}

TEST(PyLiteralEnd, FindsTheEndOutsideBracketsAndStrings) {
  auto end_of = [](std::string_view text) -> long {
    PyLiteralEnd e;
    size_t n = 0;
    PyLiteralEnd::State s = e.scan(text, true, &n);
    return s == PyLiteralEnd::State::kDone ? static_cast<long>(n) : s == PyLiteralEnd::State::kMore ? -1 : -2;
  };
  EXPECT_EQ(end_of("1, b=2)"), 1);
  EXPECT_EQ(end_of("'a,b)', c=1"), 6);
  EXPECT_EQ(end_of("[1, (2, 3)], x"), 11);
  EXPECT_EQ(end_of("'''a'', \"b\" ''')"), 15);
  EXPECT_EQ(end_of("'it\\'s', z"), 7);
  EXPECT_EQ(end_of("'', y"), 2);
  EXPECT_EQ(end_of("{'k': [1)]}"), -2);
  EXPECT_EQ(end_of("'a\nb', c"), -2);
  EXPECT_EQ(end_of("(1, 2"), -1);
  // Arriving in pieces: a quote waits for the two bytes that tell '' from '''.
  PyLiteralEnd e;
  size_t n = 0;
  EXPECT_EQ(e.scan("x'", false, &n), PyLiteralEnd::State::kMore);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(e.scan("'''a'''", false, &n), PyLiteralEnd::State::kMore);
  EXPECT_EQ(n, 7u);
  EXPECT_EQ(e.scan(", y", false, &n), PyLiteralEnd::State::kDone);
  EXPECT_EQ(n, 0u);
}

}  // namespace
}  // namespace kvasir::toolcall
