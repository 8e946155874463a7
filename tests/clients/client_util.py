"""What the real-client tests share: the `kvasir serve` wrapper from tests/server/conftest.py, the
paths to the shared test data, the tool definitions and small validation helpers. Imported by
conftest.py and by the test modules (pytest puts this folder on sys.path)."""
import importlib.util
import json
import os
import re

import jsonschema
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

_spec = importlib.util.spec_from_file_location("kvasir_server_conftest",
                                               os.path.join(REPO, "tests", "server", "conftest.py"))
_server_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_server_conftest)
Server = _server_conftest.Server
MODEL = _server_conftest.MODEL
MODEL_NAME = _server_conftest.MODEL_NAME
assert_error_envelope = _server_conftest.assert_error_envelope
kvasir_bin = _server_conftest.kvasir_bin

# shared/ sits beside the checkout, or where $KVASIR_SHARED_TESTDATA says (scripts/test.sh sets it).
SHARED = os.environ.get("KVASIR_SHARED_TESTDATA") or os.path.join(REPO, "..", "shared", "testdata")
CHAT_TEMPLATES = os.environ.get("KVASIR_CHAT_TEMPLATES") or os.path.join(SHARED, "chat_templates")
# Qwen2.5's template (Apache-2.0) renders `tools` and asks for Hermes-style <tool_call> JSON blocks.
TOOL_TEMPLATE = os.path.join(CHAT_TEMPLATES, "Qwen-Qwen2.5-7B-Instruct.jinja")

# The tool template's system prompt plus a few tool schemas is ~400 tokens; leave room to answer.
# One request's bound: a hung server fails a test in minutes, not hours.
REQUEST_TIMEOUT_S = 180
COMMON_ARGS = ("--max-model-len", "4096", "--kv-cache-memory", "512MiB", "--max-num-seqs", "64")


def shared_path(*parts):
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        pytest.skip(f"{path} not present (set KVASIR_SHARED_TESTDATA)")
    return path


def start_server(*extra):
    return Server(*COMMON_ARGS, *extra)


def tool_server_args(parser="hermes"):
    if not os.path.exists(TOOL_TEMPLATE):
        pytest.skip(f"{TOOL_TEMPLATE} not present (set KVASIR_SHARED_TESTDATA)")
    return ("--chat-template", TOOL_TEMPLATE, "--enable-auto-tool-choice", "--tool-call-parser", parser)


def openai_client(server, async_=False):
    import openai
    cls = openai.AsyncOpenAI if async_ else openai.OpenAI
    return cls(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=REQUEST_TIMEOUT_S)


# ---------------------------------------------------------------- tools

WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
}
TIME_PARAMS = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "description": "An IANA time zone, e.g. Europe/Paris"}},
    "required": ["timezone"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
                                      "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "get_time", "description": "Get the current time in a time zone.",
                                      "parameters": TIME_PARAMS}},
]
TOOL_PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
WEATHER_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant. Use the tools when they help."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def check_tool_call(name, arguments, params=None):
    """A tool call names a declared tool and its arguments are a JSON object valid for its schema.
    Returns the parsed arguments."""
    params = params or TOOL_PARAMS
    assert name in params, f"unknown tool {name!r}"
    assert isinstance(arguments, str), arguments
    args = json.loads(arguments)
    assert isinstance(args, dict), arguments
    jsonschema.validate(args, params[name])
    return args


def reassemble_tool_calls(chunks):
    """OpenAI's streamed tool calls, put together by index: the first delta of a call carries its
    id, type and function name; later ones append to function.arguments. Returns
    ({index: {"id", "type", "name", "arguments"}}, content text, finish_reason)."""
    calls, content, finish = {}, "", None
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        if delta.content:
            content += delta.content
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": None, "type": None, "name": "", "arguments": ""})
            if tc.id:
                assert call["id"] is None, "a tool call id is sent once, on its first delta"
                call["id"] = tc.id
            if tc.type:
                call["type"] = tc.type
            if tc.function and tc.function.name:
                call["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
        if choice.finish_reason:
            finish = choice.finish_reason
    return calls, content, finish


def is_json_prefix(text):
    """Whether `text` can still be completed into one JSON value (RFC 8259, any whitespace): what
    an output cut by max_tokens under a JSON constraint must be. A scanner of its own, sharing
    nothing with the server's grammar engine."""
    stack = []          # "{" or "[" per open container
    expect = "value"    # value | key | colon | comma_or_end | end | key_or_end | value_or_end
    i, n = 0, len(text)
    ws = " \t\n\r"
    while i < n:
        c = text[i]
        if c in ws:
            i += 1
            continue
        if expect in ("value", "value_or_end"):
            if expect == "value_or_end" and c == "]":
                stack.pop()
                expect = "comma_or_end" if stack else "end"
                i += 1
                continue
            if c == "{":
                stack.append("{")
                expect = "key_or_end"
                i += 1
                continue
            if c == "[":
                stack.append("[")
                expect = "value_or_end"
                i += 1
                continue
            if c == '"':
                j = _scan_string(text, i)
                if j is None:
                    return False
                if j == n:
                    return True  # inside the string
                i = j
                expect = "comma_or_end" if stack else "end"
                continue
            m = re.match(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", text[i:])
            if c in "-0123456789":
                tail = text[i:]
                end = len(m.group(0)) if m and m.group(0) not in ("", "-") else 0
                if i + end == n or (end == 0 and tail == "-"):
                    return True
                # A number that stops early may still be a prefix of one (1. / 1e / 1e+).
                if re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]*)?([eE][+-]?[0-9]*)?", tail):
                    return True
                if end == 0:
                    return False
                i += end
                expect = "comma_or_end" if stack else "end"
                continue
            for lit in ("true", "false", "null"):
                if text[i:i + len(lit)] == lit:
                    i += len(lit)
                    break
                if lit.startswith(text[i:]):
                    return True
            else:
                return False
            expect = "comma_or_end" if stack else "end"
            continue
        if expect in ("key", "key_or_end"):
            if expect == "key_or_end" and c == "}":
                stack.pop()
                expect = "comma_or_end" if stack else "end"
                i += 1
                continue
            if c != '"':
                return False
            j = _scan_string(text, i)
            if j is None:
                return False
            if j == n:
                return True
            i = j
            expect = "colon"
            continue
        if expect == "colon":
            if c != ":":
                return False
            expect = "value"
            i += 1
            continue
        if expect == "comma_or_end":
            top = stack[-1]
            if c == ",":
                expect = "key" if top == "{" else "value"
            elif (c == "}" and top == "{") or (c == "]" and top == "["):
                stack.pop()
                expect = "comma_or_end" if stack else "end"
            else:
                return False
            i += 1
            continue
        return False  # text after a complete value
    return True


def _scan_string(text, i):
    """From the opening quote at i: the index after the closing quote, len(text) when the string
    is still open at the end, None when it breaks JSON's string rules."""
    j, n = i + 1, len(text)
    while j < n:
        c = text[j]
        if c == '"':
            return j + 1
        if c == "\\":
            if j + 1 >= n:
                return n
            e = text[j + 1]
            if e in '"\\/bfnrt':
                j += 2
                continue
            if e == "u":
                hexpart = text[j + 2:j + 6]
                if not re.fullmatch(r"[0-9a-fA-F]*", hexpart):
                    return None
                if len(hexpart) < 4:
                    return n if j + 2 + len(hexpart) == n else None
                j += 6
                continue
            return None
        if ord(c) < 0x20:
            return None
        j += 1
    return n
