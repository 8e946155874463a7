"""Tool calling through the official `openai` client against a server started with a tool-capable
chat template and `--enable-auto-tool-choice --tool-call-parser hermes`: every tool_choice (none,
auto, required, named), streamed tool calls put back together, and a tool result sent back.

vLLM's semantics: `required` and a named tool are enforced by constrained decoding (the arguments
always match the tool's schema); `auto` lets the model choose and the parser extracts calls;
`none` never returns calls. finish_reason is "tool_calls" for auto and required calls; for a
named tool vLLM (and OpenAI) say "stop", so both are accepted there."""
import json

import pytest

from client_util import MODEL_NAME, TOOLS, WEATHER_MESSAGES, check_tool_call, reassemble_tool_calls

NAMED = {"type": "function", "function": {"name": "get_weather"}}


def create(client, **kw):
    kw.setdefault("max_tokens", 200)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL_NAME, messages=WEATHER_MESSAGES, tools=TOOLS, **kw)


def test_tool_choice_none_returns_no_calls(tool_client):
    r = create(tool_client, tool_choice="none", max_tokens=32)
    msg = r.choices[0].message
    assert not msg.tool_calls
    assert isinstance(msg.content, str) and msg.content
    assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_choice_auto_returns_text_or_valid_calls(tool_client):
    r = create(tool_client, tool_choice="auto")
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls"
        for call in c.message.tool_calls:
            assert call.type == "function" and call.id
            check_tool_call(call.function.name, call.function.arguments)
    else:
        assert isinstance(c.message.content, str)
        assert c.finish_reason in ("stop", "length")


def test_tools_without_tool_choice_default_to_auto(tool_client):
    r = create(tool_client, max_tokens=32)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_tool_choice_required_calls_a_tool_with_valid_arguments(tool_client):
    r = create(tool_client, tool_choice="required")
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert c.message.tool_calls, c.message
    ids = set()
    for call in c.message.tool_calls:
        assert call.type == "function" and call.id and call.id not in ids
        ids.add(call.id)
        check_tool_call(call.function.name, call.function.arguments)
    assert not c.message.content


def test_tool_choice_named_calls_exactly_that_tool(tool_client):
    r = create(tool_client, tool_choice=NAMED)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "tool_calls"), c
    assert len(c.message.tool_calls) == 1, c.message
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id
    check_tool_call(call.function.name, call.function.arguments)
    assert not c.message.content


@pytest.mark.parametrize("tool_choice", ["required", NAMED], ids=["required", "named"])
def test_streamed_tool_calls_reassemble_into_valid_calls(tool_client, tool_choice):
    stream = create(tool_client, tool_choice=tool_choice, stream=True)
    calls, content, finish = reassemble_tool_calls(list(stream))
    assert calls, "no tool call deltas"
    assert sorted(calls) == list(range(len(calls))), "tool call indexes count from 0"
    for call in calls.values():
        assert call["id"], call
        assert call["type"] in (None, "function")
        check_tool_call(call["name"], call["arguments"])
    if tool_choice == NAMED:
        assert [c["name"] for c in calls.values()] == ["get_weather"]
        assert finish in ("stop", "tool_calls")
    else:
        assert finish == "tool_calls"
    assert not content


def test_streamed_and_plain_named_calls_agree(tool_client):
    # Greedy decoding under the same constraint: the same arguments either way.
    plain = create(tool_client, tool_choice=NAMED).choices[0].message.tool_calls[0]
    calls, _, _ = reassemble_tool_calls(list(create(tool_client, tool_choice=NAMED, stream=True)))
    assert json.loads(calls[0]["arguments"]) == json.loads(plain.function.arguments)


def test_parallel_tool_calls_false_is_accepted(tool_client):
    r = create(tool_client, tool_choice="required", parallel_tool_calls=False)
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1
    check_tool_call(calls[0].function.name, calls[0].function.arguments)


def test_tool_result_round_trip(tool_client):
    first = create(tool_client, tool_choice=NAMED).choices[0].message
    call = first.tool_calls[0]
    messages = WEATHER_MESSAGES + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21, "sky": "clear"})},
    ]
    r = tool_client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS, tool_choice="none",
                                            max_tokens=32, temperature=0)
    msg = r.choices[0].message
    assert isinstance(msg.content, str) and msg.content
    assert not msg.tool_calls


def test_unknown_named_tool_is_400(tool_http):
    body = {"model": MODEL_NAME, "messages": WEATHER_MESSAGES, "tools": TOOLS, "max_tokens": 8,
            "tool_choice": {"type": "function", "function": {"name": "no_such_tool"}}}
    r = tool_http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    ok = tool_http.post("/v1/chat/completions", json={**body, "tool_choice": "none"})
    assert ok.status_code == 200, ok.text


def test_required_without_tools_is_400(tool_http):
    body = {"model": MODEL_NAME, "messages": WEATHER_MESSAGES, "max_tokens": 8, "tool_choice": "required"}
    r = tool_http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text

