"""Structured outputs through the official `openai` client: response_format json_object and
json_schema (plain, streamed, n > 1), and `chat.completions.parse` with a Pydantic model."""
import json
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel

from client_util import MODEL_NAME, is_json_prefix

PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
PERSON_MESSAGES = [{"role": "user", "content": "Describe a person called Ada who is 36 years old, as JSON."}]


class Pet(BaseModel):
    name: str
    species: Literal["cat", "dog", "bird"]
    age: int


def schema_format(schema, name="person", strict=True):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


def test_json_object_is_a_json_object(client):
    # Any object is allowed, so the 135M model may ramble past max_tokens: a cut output must still
    # be the start of JSON, a finished one an object, and some samples must finish.
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Give me a JSON object describing a cat."}],
        response_format={"type": "json_object"}, max_tokens=256, temperature=1.0, seed=5, n=4)
    finished = 0
    for c in r.choices:
        if c.finish_reason == "stop":
            finished += 1
            assert isinstance(json.loads(c.message.content), dict), c.message.content
        else:
            assert c.finish_reason == "length" and is_json_prefix(c.message.content), c.message.content
    assert finished >= 1


def test_json_schema_output_validates(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=PERSON_MESSAGES,
                                       response_format=schema_format(PERSON_SCHEMA), max_tokens=256, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "stop", (c.finish_reason, c.message.content)
    jsonschema.validate(json.loads(c.message.content), PERSON_SCHEMA)
    assert r.usage.completion_tokens >= 1


def test_json_schema_every_sampled_choice_validates(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=PERSON_MESSAGES, n=4, seed=11, temperature=1.0,
                                       response_format=schema_format(PERSON_SCHEMA), max_tokens=256)
    assert len(r.choices) == 4
    for c in r.choices:
        if c.finish_reason == "length":
            continue  # cut by max_tokens: not valid, not a constraint violation either
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), PERSON_SCHEMA)
    assert any(c.finish_reason == "stop" for c in r.choices), [c.message.content for c in r.choices]


def test_json_schema_streamed_validates(client):
    stream = client.chat.completions.create(model=MODEL_NAME, messages=PERSON_MESSAGES, stream=True,
                                            response_format=schema_format(PERSON_SCHEMA), max_tokens=256,
                                            temperature=0)
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop", (finish, text)
    jsonschema.validate(json.loads(text), PERSON_SCHEMA)


def test_json_schema_on_completions_endpoint(client):
    # vLLM takes response_format on /v1/completions too.
    r = client.completions.create(model=MODEL_NAME, prompt="A person as JSON:", max_tokens=256, temperature=0,
                                  extra_body={"response_format": schema_format(PERSON_SCHEMA)})
    c = r.choices[0]
    assert c.finish_reason == "stop", (c.finish_reason, c.text)
    jsonschema.validate(json.loads(c.text), PERSON_SCHEMA)


def _parse(client):
    beta = getattr(client, "beta", None)
    beta_chat = getattr(beta, "chat", None) if beta else None
    if beta_chat is not None and hasattr(beta_chat.completions, "parse"):
        return beta_chat.completions.parse
    return client.chat.completions.parse


def test_parse_with_a_pydantic_model(client):
    r = _parse(client)(model=MODEL_NAME, messages=[{"role": "user", "content": "Describe a pet as JSON."}],
                       response_format=Pet, max_tokens=256, temperature=0)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", msg.content
    assert isinstance(msg.parsed, Pet), msg
    assert msg.parsed.species in ("cat", "dog", "bird")
    assert Pet.model_validate_json(msg.content) == msg.parsed
    assert not msg.refusal


def test_schema_name_and_description_are_accepted(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "person_v2", "description": "A person.",
                                                  "schema": PERSON_SCHEMA}}
    r = client.chat.completions.create(model=MODEL_NAME, messages=PERSON_MESSAGES, response_format=fmt,
                                       max_tokens=256, temperature=0)
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON_SCHEMA)


@pytest.mark.parametrize("response_format", [
    {"type": "json_schema"},                                       # no json_schema object
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}},
    {"type": "xml"},                                               # unknown type
])
def test_bad_response_format_is_400_and_next_request_works(http, response_format):
    body = {"model": MODEL_NAME, "messages": PERSON_MESSAGES, "max_tokens": 8, "response_format": response_format}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"]
    ok = http.post("/v1/chat/completions", json={"model": MODEL_NAME, "messages": PERSON_MESSAGES, "max_tokens": 4})
    assert ok.status_code == 200, ok.text
