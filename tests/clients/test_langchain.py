"""langchain-openai's ChatOpenAI against the server: with_structured_output in its three methods
(json_schema, json_mode, function_calling), bind_tools with a forced tool call, and a plain
invoke over the Responses API."""
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from client_util import MODEL_NAME, REQUEST_TIMEOUT_S, WEATHER_PARAMS

langchain_openai = pytest.importorskip("langchain_openai")


class Movie(BaseModel):
    """A movie."""
    title: str = Field(description="The movie's title")
    year: int = Field(description="The year it came out")
    genre: Literal["drama", "comedy", "action", "horror"]


def chat_model(server, **kw):
    kw.setdefault("use_responses_api", False)
    kw.setdefault("max_tokens", 200)
    return langchain_openai.ChatOpenAI(base_url=server.base + "/v1", api_key="unused", model=MODEL_NAME,
                                       temperature=0, max_retries=0, timeout=REQUEST_TIMEOUT_S, **kw)


PROMPT = "Tell me about a famous movie."


def test_structured_output_json_schema(server):
    out = chat_model(server).with_structured_output(Movie, method="json_schema").invoke(PROMPT)
    assert isinstance(out, Movie), out


def test_structured_output_json_schema_include_raw(server):
    out = chat_model(server).with_structured_output(Movie, method="json_schema", include_raw=True).invoke(PROMPT)
    assert out["parsing_error"] is None, out
    assert isinstance(out["parsed"], Movie)
    assert out["raw"].response_metadata["finish_reason"] == "stop"


def test_structured_output_json_mode(server):
    # json_mode only promises some JSON object (response_format json_object), so ask for a dict.
    # A short object is asked for and a frequency penalty keeps the greedy 135M model from
    # repeating one string value until max_tokens (json_mode bounds nothing inside strings).
    out = chat_model(server, frequency_penalty=1.0, max_tokens=400).with_structured_output(None, method="json_mode").invoke(
        "Return a JSON object with the title and year of a movie.")
    assert isinstance(out, dict), out


def test_structured_output_function_calling(tool_server):
    # A named tool_choice with parallel_tool_calls=false: the arguments must parse into Movie.
    out = chat_model(tool_server).with_structured_output(Movie, method="function_calling").invoke(PROMPT)
    assert isinstance(out, Movie), out


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Get the current weather in a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize("tool_choice", ["required", "any", "get_weather"])
def test_bind_tools_makes_a_tool_call(tool_server, tool_choice):
    # langchain maps "any" to OpenAI's "required" and a bare name to a named tool_choice.
    msg = chat_model(tool_server).bind_tools([get_weather], tool_choice=tool_choice).invoke(
        "What is the weather in Paris?")
    assert msg.tool_calls, msg
    call = msg.tool_calls[0]
    assert call["name"] == "get_weather" and call["id"]
    jsonschema.validate(call["args"], WEATHER_PARAMS)
    assert not msg.invalid_tool_calls


def test_bind_tools_streamed(tool_server):
    model = chat_model(tool_server).bind_tools([get_weather], tool_choice="get_weather")
    full = None
    for chunk in model.stream("What is the weather in Paris?"):
        full = chunk if full is None else full + chunk
    assert full.tool_calls, full
    assert full.tool_calls[0]["name"] == "get_weather"
    jsonschema.validate(full.tool_calls[0]["args"], WEATHER_PARAMS)


def test_invoke_over_the_responses_api(server):
    msg = chat_model(server, use_responses_api=True, max_tokens=16).invoke("Say hello.")
    assert isinstance(msg.text, str) and msg.text
