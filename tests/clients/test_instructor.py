"""instructor on top of the openai client, in its three OpenAI modes: TOOLS (a named tool_choice,
enforced), JSON_SCHEMA (response_format json_schema, enforced) and JSON (response_format
json_object plus the schema in the system prompt: only "some JSON object" is enforced, so that
test uses a model every JSON object satisfies: it checks the plumbing, not the 135M model's
reading of a schema). max_retries=0: a bad answer fails the test instead of being re-asked."""
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict

from client_util import MODEL_NAME, openai_client

instructor = pytest.importorskip("instructor")


class User(BaseModel):
    name: str
    age: int
    role: Literal["admin", "user", "guest"]


class AnyObject(BaseModel):
    model_config = ConfigDict(extra="allow")


MESSAGES = [{"role": "user", "content": "Extract the user: Jason is 25 years old and an admin."}]


def extract(server, mode, model):
    client = instructor.from_openai(openai_client(server), mode=mode)
    return client.chat.completions.create(model=MODEL_NAME, response_model=model, messages=MESSAGES,
                                          max_tokens=200, temperature=0, max_retries=0)


def test_mode_tools(tool_server):
    user = extract(tool_server, instructor.Mode.TOOLS, User)
    assert isinstance(user, User)


def test_mode_json_schema(server):
    user = extract(server, instructor.Mode.JSON_SCHEMA, User)
    assert isinstance(user, User)


def test_mode_json(server):
    obj = extract(server, instructor.Mode.JSON, AnyObject)
    assert isinstance(obj, AnyObject)


def test_create_with_completion_returns_the_raw_response(server):
    client = instructor.from_openai(openai_client(server), mode=instructor.Mode.JSON_SCHEMA)
    user, completion = client.chat.completions.create_with_completion(
        model=MODEL_NAME, response_model=User, messages=MESSAGES, max_tokens=200, temperature=0, max_retries=0)
    assert isinstance(user, User)
    assert completion.choices[0].finish_reason == "stop"
    assert User.model_validate_json(completion.choices[0].message.content).model_dump() == user.model_dump()
