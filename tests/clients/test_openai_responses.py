"""The Responses API (`POST /v1/responses`) through the official `openai` client: a plain response,
instructions and message input, typed streaming events that add up to the final response,
structured output with `responses.parse`, and a function tool."""
import json
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from client_util import MODEL_NAME, WEATHER_PARAMS, check_tool_call


class City(BaseModel):
    # Bounded strings: a greedy 135M model can otherwise repeat a name until max_output_tokens.
    name: str = Field(max_length=24)
    country: str = Field(max_length=24)
    size: Literal["small", "medium", "large"]


def check_response_shape(r, max_output_tokens):
    assert r.object == "response"
    assert r.id
    assert r.model == MODEL_NAME
    assert r.status in ("completed", "incomplete"), r.status
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    messages = [item for item in r.output if item.type == "message"]
    assert len(messages) == 1, r.output
    msg = messages[0]
    assert msg.role == "assistant"
    texts = [part.text for part in msg.content if part.type == "output_text"]
    assert texts and all(isinstance(t, str) for t in texts)
    assert r.output_text == "".join(texts)
    assert r.output_text
    assert r.usage.input_tokens > 0
    assert 1 <= r.usage.output_tokens <= max_output_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_plain_response(client):
    r = client.responses.create(model=MODEL_NAME, input="Say hello.", max_output_tokens=24, temperature=0)
    check_response_shape(r, 24)


def test_instructions_and_message_input(client):
    r = client.responses.create(model=MODEL_NAME, instructions="Answer in one word.",
                                input=[{"role": "user", "content": "What color is the sky?"}],
                                max_output_tokens=16, temperature=0)
    check_response_shape(r, 16)
    plain = client.responses.create(model=MODEL_NAME, input=[{"role": "user", "content": "What color is the sky?"}],
                                    max_output_tokens=16, temperature=0)
    # The instructions replaced the template's default system prompt (SmolLM2 has one), so the
    # prompts differ; the response echoes them as OpenAI's does.
    assert plain.usage.input_tokens != r.usage.input_tokens
    assert r.instructions == "Answer in one word."


def test_same_answer_as_chat_completions(client):
    # Same prompt through both APIs, greedy: the same text.
    msgs = [{"role": "user", "content": "Name a fruit."}]
    chat = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=12, temperature=0)
    resp = client.responses.create(model=MODEL_NAME, input=msgs, max_output_tokens=12, temperature=0)
    assert resp.output_text == chat.choices[0].message.content


def test_streamed_events_add_up_to_the_response(client):
    events = list(client.responses.create(model=MODEL_NAME, input="Count to five.", max_output_tokens=24,
                                          temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created", types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    for needed in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                   "response.output_text.done", "response.content_part.done", "response.output_item.done"):
        assert needed in types, (needed, types)
    assert types.index("response.output_item.added") < types.index("response.output_text.delta") \
        < types.index("response.output_text.done") < types.index("response.output_item.done")
    seq = [e.sequence_number for e in events]
    assert seq == sorted(seq) and len(set(seq)) == len(seq), seq
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == deltas
    final = events[-1].response
    assert final.output_text == deltas
    check_response_shape(final, 24)
    assert events[0].response.id == final.id
    # Unstreamed, the same request gives the same text.
    plain = client.responses.create(model=MODEL_NAME, input="Count to five.", max_output_tokens=24, temperature=0)
    assert plain.output_text == deltas


def test_parse_with_a_pydantic_model(client):
    r = client.responses.parse(model=MODEL_NAME, input="Describe a city as JSON.", text_format=City,
                               max_output_tokens=200, temperature=0)
    assert r.status == "completed", r
    assert isinstance(r.output_parsed, City), r.output_text
    assert City.model_validate_json(r.output_text) == r.output_parsed


def test_text_format_json_schema(client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    r = client.responses.create(model=MODEL_NAME, input="What is 2 + 2? Answer as JSON.", max_output_tokens=64,
                                temperature=0,
                                text={"format": {"type": "json_schema", "name": "sum", "schema": schema,
                                                 "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)


def test_function_tool_required(tool_client):
    tool = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
            "parameters": WEATHER_PARAMS}
    r = tool_client.responses.create(model=MODEL_NAME, input="What is the weather in Paris?", tools=[tool],
                                     tool_choice="required", max_output_tokens=200, temperature=0)
    calls = [item for item in r.output if item.type == "function_call"]
    assert calls, r.output
    for call in calls:
        assert call.name == "get_weather" and call.call_id
        check_tool_call(call.name, call.arguments)


@pytest.mark.parametrize("body", [{"input": "hi", "max_output_tokens": -1}, {}])
def test_bad_requests_are_400(http, body):
    r = http.post("/v1/responses", json={"model": MODEL_NAME, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"]
