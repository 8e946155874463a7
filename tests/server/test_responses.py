"""POST /v1/responses (and GET/DELETE /v1/responses/{id}) driven by the official `openai` client:
the response object and the typed event stream checked against the OpenAI spec, instructions,
previous_response_id over the in-memory store, function tools (auto through the hermes parser;
"required" and text.format json_schema need the engine's grammar and skip until it exists), and
the 400s for what the server does not implement."""
import json

import httpx
import openai
import pytest

from conftest import MODEL_NAME, assert_error_envelope
from openai_spec import require_grammar, validate
from test_tool_calls import tool_client, tool_server  # noqa: F401 (module fixtures)

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_create_returns_an_openai_response(client, http):
    r = client.responses.create(model=MODEL_NAME, input="Name a color.", max_output_tokens=8, temperature=0)
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status in ("completed", "incomplete")
    assert r.model == MODEL_NAME
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output[0].content[0].type == "output_text"
    assert r.output_text
    assert r.usage.input_tokens > 0 and 1 <= r.usage.output_tokens <= 8
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    raw = http.post("/v1/responses", json={"model": MODEL_NAME, "input": "Name a color.", "max_output_tokens": 8,
                                           "temperature": 0}).json()
    validate(raw, "Response")
    assert raw["output"][0]["content"][0]["text"] == r.output_text  # greedy: the same text


def test_max_output_tokens_makes_it_incomplete(client):
    r = client.responses.create(model=MODEL_NAME, input="Tell me a long story.", max_output_tokens=3,
                                extra_body={"ignore_eos": True})
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_stream_events_follow_the_spec(client, http):
    kw = dict(model=MODEL_NAME, input="Name a color.", max_output_tokens=8, temperature=0)
    events = list(client.responses.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          events[-1].type]
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text
    assert text == client.responses.create(**kw).output_text
    assert events[-1].response.usage.output_tokens >= 1
    # The raw SSE: an `event:` line per event, each data object valid against its spec schema.
    schema_of = {"response.created": "ResponseCreatedEvent", "response.in_progress": "ResponseInProgressEvent",
                 "response.output_item.added": "ResponseOutputItemAddedEvent",
                 "response.content_part.added": "ResponseContentPartAddedEvent",
                 "response.output_text.delta": "ResponseTextDeltaEvent",
                 "response.output_text.done": "ResponseTextDoneEvent",
                 "response.content_part.done": "ResponseContentPartDoneEvent",
                 "response.output_item.done": "ResponseOutputItemDoneEvent",
                 "response.completed": "ResponseCompletedEvent", "response.incomplete": "ResponseIncompleteEvent"}
    with http.stream("POST", "/v1/responses", json={**kw, "stream": True}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        body = resp.read().decode()
    frames = [f for f in body.split("\n\n") if f.strip()]
    for f in frames:
        event_line, data_line = f.split("\n")
        data = json.loads(data_line[len("data: "):])
        assert event_line == "event: " + data["type"]
        validate(data, schema_of[data["type"]])


def test_instructions_are_a_system_message(client):
    r = client.responses.create(model=MODEL_NAME, input="Hi", instructions="Always answer in French.",
                                max_output_tokens=2)
    assert r.instructions == "Always answer in French."
    chat = client.chat.completions.create(model=MODEL_NAME, max_tokens=2, messages=[
        {"role": "system", "content": "Always answer in French."}, {"role": "user", "content": "Hi"}])
    assert r.usage.input_tokens == chat.usage.prompt_tokens  # the same prompt


def test_previous_response_id_continues_the_conversation(client):
    first = client.responses.create(model=MODEL_NAME, input="My name is Ada.", instructions="Be brief.",
                                    max_output_tokens=6, temperature=0)
    second = client.responses.create(model=MODEL_NAME, input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=6, temperature=0)
    assert second.previous_response_id == first.id
    alone = client.responses.create(model=MODEL_NAME, input="What is my name?", max_output_tokens=6)
    # The earlier turn (its input and its answer) is in the prompt; its instructions are not.
    assert second.usage.input_tokens >= alone.usage.input_tokens + first.usage.output_tokens + 4
    assert second.usage.input_tokens < first.usage.input_tokens + first.usage.output_tokens + alone.usage.input_tokens
    third = client.responses.create(model=MODEL_NAME, input="Thanks.", previous_response_id=second.id,
                                    max_output_tokens=2)
    assert third.usage.input_tokens > second.usage.input_tokens


def test_stored_responses_can_be_fetched_and_deleted(client, http):
    r = client.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=3)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    d = http.delete(f"/v1/responses/{r.id}")
    assert d.status_code == 200 and d.json() == {"id": r.id, "object": "response", "deleted": True}
    assert_error_envelope(http.get(f"/v1/responses/{r.id}"), 404)
    assert http.put(f"/v1/responses/{r.id}", json={}).status_code == 405


def test_unknown_or_unstored_previous_response_is_404(client, http):
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL_NAME, input="Hi", previous_response_id="resp_nope", max_output_tokens=2)
    assert e.value.status_code == 404
    err = assert_error_envelope(http.post("/v1/responses", json={"input": "Hi", "previous_response_id": "resp_nope"}),
                                404)
    assert err["param"] == "previous_response_id" and err["code"] == "previous_response_not_found"
    unstored = client.responses.create(model=MODEL_NAME, input="Hi", store=False, max_output_tokens=2)
    assert_error_envelope(http.get(f"/v1/responses/{unstored.id}"), 404)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL_NAME, input="Hi", previous_response_id=unstored.id, max_output_tokens=2)


def test_input_items_with_function_call_history(client):
    r = client.responses.create(model=MODEL_NAME, max_output_tokens=6, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "20 C"},
        {"role": "user", "content": "Thanks. Summarize."}], tools=[WEATHER], tool_choice="none")
    assert r.status in ("completed", "incomplete") and r.output[0].type == "message"


def test_unsupported_fields_are_400_naming_them(http):
    cases = [
        ({"tools": [{"type": "web_search"}]}, "web_search"),
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
         "input_image"),
        ({"tools": [WEATHER]}, "--enable-auto-tool-choice"),  # "auto" with tools needs a parser
        ({"text": {"format": {"type": "json_schema"}}}, "schema"),
    ]
    for extra, needle in cases:
        err = assert_error_envelope(http.post("/v1/responses", json={"input": "Hi", **extra}), 400)
        assert needle in err["message"], (extra, err)


# ---- tools ----

FEW_SHOT_ITEMS = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "20 C"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "It is 20 C in Paris."}]},
    {"role": "user", "content": "What is the weather in Berlin?"},
    {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city": "Berlin"}'},
    {"type": "function_call_output", "call_id": "call_2", "output": "15 C"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "It is 15 C in Berlin."}]},
    {"role": "user", "content": "What is the weather in Rome?"},
]


def test_auto_function_call_then_its_output_continues(tool_client):
    r = tool_client.responses.create(model=MODEL_NAME, input=FEW_SHOT_ITEMS, tools=[WEATHER], max_output_tokens=60,
                                     temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1
    assert calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Rome"}
    assert calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_")
    validate(r.model_dump(exclude_unset=True), "Response")
    # Answer the call in the next turn: the stored conversation carries the call.
    nxt = tool_client.responses.create(model=MODEL_NAME, previous_response_id=r.id, tools=[WEATHER],
                                       tool_choice="none", max_output_tokens=8, temperature=0,
                                       input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                               "output": "25 C"}])
    assert nxt.output[0].type == "message"
    assert nxt.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens


def test_streamed_function_call_events(tool_client):
    events = list(tool_client.responses.create(model=MODEL_NAME, input=FEW_SHOT_ITEMS, tools=[WEATHER],
                                               max_output_tokens=60, temperature=0, stream=True))
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types
    added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert len(added) == 1 and added[0].item.name == "get_weather"
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"][0]
    assert done.arguments == deltas and json.loads(deltas) == {"city": "Rome"}
    assert events[-1].type == "response.completed"
    final_calls = [o for o in events[-1].response.output if o.type == "function_call"]
    assert final_calls[0].arguments == deltas


def test_required_function_tool_is_called(client, server):
    require_grammar(server)
    r = client.responses.create(model=MODEL_NAME, input="What is the weather in Rome?", tools=[WEATHER],
                                tool_choice="required", max_output_tokens=60, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments).get("city"), str)


def test_text_format_json_schema(client, server):
    # Bounded values: greedy SmolLM2 would otherwise write digits or a name until max_output_tokens.
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                               "population": {"type": "integer", "minimum": 0, "maximum": 99999999}},
              "required": ["city", "population"], "additionalProperties": False}
    fmt = {"format": {"type": "json_schema", "name": "city_info", "schema": schema, "strict": True}}
    r = client.responses.create(model=MODEL_NAME, input="Describe Paris as JSON.", text=fmt, max_output_tokens=120,
                                temperature=0)
    assert r.text.format.type == "json_schema" and r.text.format.name == "city_info"
    require_grammar(server)
    data = json.loads(r.output_text)
    assert set(data) == {"city", "population"} and isinstance(data["population"], int)


def test_reasoning_becomes_a_reasoning_item():
    """deepseek_r1 reads SmolLM2's whole answer as reasoning (it never closes a think block)."""
    from conftest import Server
    s = Server("--reasoning-parser", "deepseek_r1")
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        kw = dict(model=MODEL_NAME, input="Hi", max_output_tokens=6, temperature=0)
        r = c.responses.create(**kw)
        assert [o.type for o in r.output] == ["reasoning"]
        text = r.output[0].content[0].text
        assert text and r.output[0].content[0].type == "reasoning_text"
        assert r.usage.output_tokens_details.reasoning_tokens > 0
        validate(r.model_dump(exclude_unset=True), "Response")
        events = list(c.responses.create(stream=True, **kw))
        assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == text
        done = [e for e in events if e.type == "response.reasoning_text.done"]
        assert len(done) == 1 and done[0].text == text
        assert [o.type for o in events[-1].response.output] == ["reasoning"]
        with httpx.stream("POST", s.base + "/v1/responses", json={**kw, "stream": True}, timeout=60) as resp:
            body = resp.read().decode()
        schema_of = {"response.reasoning_text.delta": "ResponseReasoningTextDeltaEvent",
                     "response.reasoning_text.done": "ResponseReasoningTextDoneEvent",
                     "response.content_part.added": "ResponseContentPartAddedEvent",
                     "response.output_item.done": "ResponseOutputItemDoneEvent"}
        for frame in (f for f in body.split("\n\n") if f.strip()):
            data = json.loads(frame.split("\n")[1][len("data: "):])
            if data["type"] in schema_of:
                validate(data, schema_of[data["type"]])
    finally:
        assert s.stop() == 0
