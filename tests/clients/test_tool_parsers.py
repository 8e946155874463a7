"""Each `--tool-call-parser` extracts a call from its own wire format, plain and streamed.

The 135M model would rarely write a tool call by itself, so the output is forced: the request
carries `structured_outputs: {"choice": [<the call in the parser's format>]}` next to
`tool_choice: "auto"` (vLLM keeps an explicit structured output under auto), and the parser must
turn that text into `tool_calls` with finish_reason "tool_calls" and no leftover content.

vLLM refuses to start the mistral and deepseek_v3 parsers on a tokenizer without their special
tokens (SmolLM2 has none); a server that does the same is skipped here, with its reason shown.
Forced outputs may take more tokens than the text's own tokenization (a constrained greedy model can
spell a marker byte by byte), so max_tokens leaves room for that.
One server per parser, started and stopped per module parameter."""
import json

import pytest

from client_util import (MODEL_NAME, TOOLS, WEATHER_MESSAGES, check_tool_call, openai_client,
                         reassemble_tool_calls, start_server, tool_server_args)

ARGS = {"city": "Paris"}
FORMATS = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "llama3_json": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    "pythonic": '[get_weather(city="Paris")]',
    "deepseek_v3": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                    '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
}


@pytest.fixture(scope="module", params=sorted(FORMATS))
def parser_server(request):
    parser = request.param
    try:
        s = start_server(*tool_server_args(parser))
    except RuntimeError as e:
        text = str(e)
        if "unknown flag" in text or "unknown" in text.lower() and "parser" in text.lower():
            raise  # not implemented: a failure, not a skip
        pytest.skip(f"server refused --tool-call-parser {parser}: {text[-300:]}")
    yield parser, s
    rc = s.stop()
    assert rc == 0, s.logs()


def forced(parser):
    return {"structured_outputs": {"choice": [FORMATS[parser]]}}


def test_parser_extracts_the_forced_call(parser_server):
    parser, s = parser_server
    r = openai_client(s).chat.completions.create(model=MODEL_NAME, messages=WEATHER_MESSAGES, tools=TOOLS,
                                                 tool_choice="auto", max_tokens=320, temperature=0,
                                                 extra_body=forced(parser))
    c = r.choices[0]
    assert c.message.tool_calls, (parser, c.message)
    assert len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.id
    assert call.function.name == "get_weather"
    assert check_tool_call(call.function.name, call.function.arguments) == ARGS
    assert c.finish_reason == "tool_calls"
    assert not (c.message.content or "").strip()


def test_parser_extracts_the_forced_call_streamed(parser_server):
    parser, s = parser_server
    stream = openai_client(s).chat.completions.create(model=MODEL_NAME, messages=WEATHER_MESSAGES, tools=TOOLS,
                                                      tool_choice="auto", max_tokens=320, temperature=0,
                                                      stream=True, extra_body=forced(parser))
    calls, content, finish = reassemble_tool_calls(list(stream))
    assert list(calls) == [0], (parser, calls, content)
    assert calls[0]["id"] and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == ARGS
    assert finish == "tool_calls"
    assert not content.strip(), content


def test_plain_text_is_content_not_a_call(parser_server):
    parser, s = parser_server
    r = openai_client(s).chat.completions.create(model=MODEL_NAME, messages=WEATHER_MESSAGES, tools=TOOLS,
                                                 tool_choice="auto", max_tokens=16, temperature=0,
                                                 extra_body={"structured_outputs": {"choice": ["It is sunny."]}})
    c = r.choices[0]
    assert not c.message.tool_calls
    assert c.message.content == "It is sunny."
    assert c.finish_reason == "stop"
