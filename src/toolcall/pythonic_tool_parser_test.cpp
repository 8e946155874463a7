// pythonic on outputs written the way Llama 3.2/4 and ToolACE write Python call lists.
#include "toolcall/tool_parser_test_util.h"

namespace kvasir::toolcall_test {
namespace {

TEST(PythonicToolParser, CallListBecomesJsonWithPythonSpacing) {
  expect_parses("pythonic", "[get_weather(city='San Francisco', metric=\"celsius\"), get_time(tz='PST')]",
                {"", {{"get_weather", R"({"city": "San Francisco", "metric": "celsius"})"}, {"get_time", R"({"tz": "PST"})"}},
                 true});
}

TEST(PythonicToolParser, EveryLiteralKindConverts) {
  std::string text =
      "[f(a=1, b=-2.5, c=True, d=None, e=[1, 'two', (3, 4)], g={'k': {'n': 1e3}, 5: False}, "
      "h='''multi\nline''', i=r'C:\\path', j='caf\\xe9 \\u00e9 \xF0\x9F\x98\x80', k=\"it's \\\"q\\\"\", l=0x1F, "
      "m=1_000, n=(), o=(7,), p='a' 'b')]";
  expect_parses("pythonic", text,
                {"",
                 {{"f", "{\"a\": 1, \"b\": -2.5, \"c\": true, \"d\": null, \"e\": [1, \"two\", [3, 4]], "
                        "\"g\": {\"k\": {\"n\": 1000.0}, \"5\": false}, \"h\": \"multi\\nline\", \"i\": \"C:\\\\path\", "
                        "\"j\": \"caf\xC3\xA9 \xC3\xA9 \xF0\x9F\x98\x80\", \"k\": \"it's \\\"q\\\"\", \"l\": 31, "
                        "\"m\": 1000, \"n\": [], \"o\": [7], \"p\": \"ab\"}"}},
                 true});
}

TEST(PythonicToolParser, NoArgumentsLlama4WrapperAndStringsWithBrackets) {
  expect_parses("pythonic", "[get_time()]", {"", {{"get_time", "{}"}}, true});
  expect_parses("pythonic", "<|python_start|>[f(x=1)]<|python_end|>", {"", {{"f", R"({"x": 1})"}}});
  expect_parses("pythonic", "\n [search(q=\"f(x), [y] = {z}\", n=2,), noop(),]\nDone.",
                {"Done.", {{"search", R"({"q": "f(x), [y] = {z}", "n": 2})"}, {"noop", "{}"}}});
}

TEST(PythonicToolParser, OutputThatIsNotACallListIsContent) {
  const char* texts[] = {
      "The answer is 42.", "[1, 2, 3]", "[Note](http://example.com)", "[]", "[f(1, 2)]", "[f(x=undefined_name)]",
      "[f(x=b'bytes')]", "[f x=1]", "  [f(", "[f(x=float('inf'))]", "[f(x={1, 2})]", "Sure: [f(x=1)]",
  };
  for (const char* text : texts) expect_parses("pythonic", text, content_only(text));
}

TEST(PythonicToolParser, ACallListThatBreaksIsContentWhenParsedWhole) {
  for (std::string text : {std::string("[f(x=1), g(y=@)]"), std::string("[f(x=1, y="),
                           std::string("[f(x=1, x=2)]"), std::string("[f(x='unterminated)]")}) {
    auto p = make("pythonic");
    ParsedToolCalls whole = p->parse_complete(text);
    EXPECT_FALSE(whole.tools_called()) << text;
    EXPECT_EQ(whole.content, text);
    bool broken = false;
    ParsedToolCalls s = stream_split("pythonic", text, {4, 9}, &broken);
    if (text == "[f(x='unterminated)]") {
      EXPECT_FALSE(broken);  // the first argument never completed: nothing streamed
      EXPECT_EQ(s.content, text);
    } else {
      EXPECT_TRUE(broken) << text;
      EXPECT_EQ(s.tool_calls.size(), 1u);
    }
  }
}

}  // namespace
}  // namespace kvasir::toolcall_test
