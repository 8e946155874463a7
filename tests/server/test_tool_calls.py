"""Tool calling in /v1/chat/completions with vLLM's semantics, driven by the official `openai`
client: the 400 for tool_choice "auto" without a tool parser, request validation, tool_choice
"auto" through the hermes parser (non-streaming and streamed deltas), the assistant-tool_calls /
tool-message round trip through a tool-use chat template, "required" and named functions
(grammar-forced: the tests that need the engine's enforcement skip until it exists), and
--reasoning-parser output fields.

The 135M model does not call tools on its own; two worked examples in the history (rendered by the
Hermes tool-use template) make greedy decoding produce a well-formed <tool_call> every time."""
import json
import os

import openai
import pytest

from conftest import MODEL_NAME, Server, assert_error_envelope
from openai_spec import CHAT_TEMPLATES, require_grammar, validate

HERMES = os.path.join(CHAT_TEMPLATES, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time in a timezone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
TOOLS = [WEATHER, TIME]


def call(cid, city):
    return {"id": cid, "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


# Two worked tool calls, then a new question: the model continues the pattern.
FEW_SHOT = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_1", "Paris")]},
    {"role": "tool", "tool_call_id": "call_1", "content": "20 C"},
    {"role": "assistant", "content": "It is 20 C in Paris."},
    {"role": "user", "content": "What is the weather in Berlin?"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_2", "Berlin")]},
    {"role": "tool", "tool_call_id": "call_2", "content": "15 C"},
    {"role": "assistant", "content": "It is 15 C in Berlin."},
    {"role": "user", "content": "What is the weather in Rome?"},
]
ASK = [{"role": "user", "content": "What is the weather in Rome?"}]


@pytest.fixture(scope="module")
def tool_server():
    if not os.path.exists(HERMES):
        pytest.skip(f"chat template not found: {HERMES}")
    s = Server("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", HERMES,
               "--max-model-len", "1024")
    yield s
    rc = s.stop()
    assert rc == 0, f"kvasir serve exited with {rc}:\n{s.logs()}"


@pytest.fixture(scope="module")
def tool_client(tool_server):
    return openai.OpenAI(base_url=tool_server.base + "/v1", api_key="unused", max_retries=0, timeout=120)


# ---- the default server: no tool parser ----

def test_tools_with_auto_choice_need_the_parser_flags(client, http):
    for extra in ({}, {"tool_choice": "auto"}):
        r = http.post("/v1/chat/completions", json={"messages": ASK, "tools": TOOLS, "max_tokens": 4, **extra})
        err = assert_error_envelope(r, 400)
        assert "--enable-auto-tool-choice" in err["message"] and "--tool-call-parser" in err["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, max_tokens=4)


def test_tool_choice_none_answers_in_text(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="none",
                                       max_tokens=6, temperature=0)
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason in ("stop", "length")
    assert isinstance(r.choices[0].message.content, str)


def test_bad_tool_requests_are_400(http):
    def post(**body):
        return http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, **body})

    err = assert_error_envelope(post(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), 400)
    assert "does not match any of the specified `tools`" in err["message"]
    err = assert_error_envelope(post(tool_choice="required"), 400)
    assert "`tools` must be set" in err["message"]
    assert_error_envelope(post(tools=TOOLS, tool_choice="sometimes"), 400)
    assert_error_envelope(post(tools=[{"type": "function"}], tool_choice="none"), 400)
    assert_error_envelope(post(tools=[{"type": "function", "function": {"name": 7}}], tool_choice="none"), 400)
    err = assert_error_envelope(post(tools=[{"type": "web_search"}], tool_choice="none"), 400)
    assert "web_search" in err["message"]
    assert_error_envelope(post(tools=TOOLS, tool_choice="none", parallel_tool_calls="no"), 400)
    bad_history = [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}] + ASK
    err = assert_error_envelope(http.post("/v1/chat/completions", json={"messages": bad_history, "max_tokens": 4}), 400)
    assert "arguments" in err["message"]


def test_named_function_output_becomes_the_call(client):
    """Shape only (true with or without the grammar): the output is that function's arguments."""
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, max_tokens=8, temperature=0,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}})
    msg = r.choices[0].message
    assert msg.content is None
    assert len(msg.tool_calls) == 1 and msg.tool_calls[0].function.name == "get_time"
    assert msg.tool_calls[0].id.startswith("call_") and msg.tool_calls[0].type == "function"
    assert r.choices[0].finish_reason in ("stop", "length")  # a forced function is not "tool_calls"


# ---- tool_choice "auto" through the hermes parser ----

def test_auto_tool_call_is_parsed(tool_client, tool_server):
    r = tool_client.chat.completions.create(model=MODEL_NAME, messages=FEW_SHOT, tools=TOOLS, max_tokens=60,
                                            temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    tc = choice.message.tool_calls[0]
    assert tc.type == "function" and tc.id.startswith("call_")
    assert tc.function.name == "get_weather"
    assert json.loads(tc.function.arguments) == {"city": "Rome"}
    validate(r.model_dump(exclude_unset=True), "CreateChatCompletionResponse")


def test_auto_tool_call_streams_as_openai_deltas(tool_client):
    kw = dict(model=MODEL_NAME, messages=FEW_SHOT, tools=TOOLS, max_tokens=60, temperature=0)
    whole = tool_client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    calls, finish, content = {}, None, ""
    chunks = list(tool_client.chat.completions.create(stream=True, **kw))
    for chunk in chunks:
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                if d.index not in calls:
                    assert d.id and d.type == "function" and d.function.name, d  # first delta names the call
                    calls[d.index] = {"name": d.function.name, "arguments": ""}
                else:
                    assert d.id is None and not d.function.name
                calls[d.index]["arguments"] += d.function.arguments or ""
            if ch.finish_reason:
                finish = ch.finish_reason
    assert finish == "tool_calls"
    assert content.strip() == ""
    assert calls == {0: {"name": whole.function.name, "arguments": whole.function.arguments}}
    arg_chunks = sum(1 for c in chunks for ch in c.choices for d in (ch.delta.tool_calls or []) if d.function.arguments)
    assert arg_chunks > 1  # the arguments arrive in pieces


def test_auto_without_a_call_is_plain_content(tool_client):
    r = tool_client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hello."}],
                                            tools=TOOLS, max_tokens=8, temperature=0)
    if r.choices[0].message.tool_calls:
        pytest.skip("the model called a tool unprompted")
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_messages_round_trip_into_the_template(tool_server):
    import httpx
    msgs = FEW_SHOT[:4] + [{"role": "user", "content": "And in Rome?"}]
    with httpx.Client(base_url=tool_server.base, timeout=60) as h:
        toks = h.post("/tokenize", json={"messages": msgs, "tools": TOOLS}).json()["tokens"]
        prompt = h.post("/detokenize", json={"tokens": toks}).json()["prompt"]
        # The arguments (sent as a JSON string) reach the template as an object, as vLLM passes them.
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
        assert "<tool_response>\n20 C\n</tool_response>" in prompt
        assert '"name": "get_time"' in prompt  # the tools themselves
        r = h.post("/v1/chat/completions", json={"messages": msgs, "tools": TOOLS, "tool_choice": "none",
                                                 "max_tokens": 4})
        assert r.status_code == 200, r.text


# ---- "required" and named functions: grammar-forced ----

def test_required_forces_valid_calls(tool_client, tool_server):
    require_grammar(tool_server)
    kw = dict(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=80, temperature=0)
    r = tool_client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content is None and msg.tool_calls
    for tc in msg.tool_calls:
        assert tc.function.name in ("get_weather", "get_time")
        assert isinstance(json.loads(tc.function.arguments), dict)
    # Streamed: the same calls, arguments in pieces.
    calls = {}
    for chunk in tool_client.chat.completions.create(stream=True, **kw):
        for d in chunk.choices[0].delta.tool_calls or []:
            calls.setdefault(d.index, {"name": d.function.name, "arguments": ""})
            calls[d.index]["arguments"] += d.function.arguments or ""
    assert [c["name"] for c in calls.values()] == [tc.function.name for tc in msg.tool_calls]
    assert [c["arguments"] for c in calls.values()] == [tc.function.arguments for tc in msg.tool_calls]


def test_required_without_parallel_calls_makes_one(tool_client, tool_server):
    require_grammar(tool_server)
    r = tool_client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                            parallel_tool_calls=False, max_tokens=80, temperature=0)
    assert len(r.choices[0].message.tool_calls) == 1


def test_named_function_arguments_match_its_schema(client, server):
    require_grammar(server)
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, max_tokens=40, temperature=0,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    tc = r.choices[0].message.tool_calls[0]
    assert tc.function.name == "get_weather"
    args = json.loads(tc.function.arguments)
    assert isinstance(args.get("city"), str)


# ---- --reasoning-parser ----

@pytest.mark.parametrize("parser", ["deepseek_r1", "qwen3"])
def test_reasoning_parser_fields(parser):
    """SmolLM2 never writes <think>: deepseek_r1 (whose template opens the think block) reads it all
    as reasoning; qwen3 (which needs the opening tag) reads it all as content."""
    s = Server("--reasoning-parser", parser)
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                      temperature=0)
        msg = r.choices[0].message.model_dump()
        assert "reasoning" in msg and "reasoning_content" in msg
        text = "".join(ch.choices[0].delta.model_dump().get("reasoning") or "" for ch in c.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=6, temperature=0, stream=True)
            if ch.choices)
        if parser == "deepseek_r1":
            assert msg["reasoning"] and msg["content"] is None
            assert msg["reasoning_content"] == msg["reasoning"]
            assert text == msg["reasoning"]
        else:
            assert msg["reasoning"] is None and msg["content"]
            assert text == ""
    finally:
        assert s.stop() == 0


def test_unknown_parser_names_refuse_to_start(tmp_path):
    import subprocess
    from conftest import MODEL, kvasir_bin
    for flags in (["--tool-call-parser", "nope"], ["--reasoning-parser", "nope"], ["--enable-auto-tool-choice"]):
        p = subprocess.run([kvasir_bin(), "serve", MODEL, "--port", "0", *flags], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode != 0
        assert ("tool-call-parser" in p.stderr) or ("reasoning-parser" in p.stderr), p.stderr
