"""openai-agents: an Agent with a function tool on OpenAIChatCompletionsModel against the server
(tracing off, so nothing leaves the machine). With tool_choice="required" and
tool_use_behavior="stop_on_first_tool" the tool must really run, with schema-valid arguments,
and its result is the run's final output. A second run lets the model answer after the tool
result (the SDK resets tool_choice to auto after a tool call)."""
import jsonschema
import pytest

from client_util import MODEL_NAME, openai_client

agents = pytest.importorskip("agents")
agents.set_tracing_disabled(True)

CITY_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def weather_tool(calls):
    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city name, e.g. Paris.
        """
        jsonschema.validate({"city": city}, CITY_SCHEMA)
        calls.append(city)
        return f"The weather in {city} is sunny, 21 C."
    return get_weather


def make_agent(tool_server, tool, **settings):
    model = agents.OpenAIChatCompletionsModel(model=MODEL_NAME, openai_client=openai_client(tool_server, async_=True))
    return agents.Agent(name="weather", instructions="You answer weather questions with the get_weather tool.",
                        tools=[tool], model=model,
                        model_settings=agents.ModelSettings(temperature=0, max_tokens=128, **settings.pop("ms", {})),
                        **settings)


def test_required_tool_is_called_and_its_result_is_the_output(tool_server):
    calls = []
    agent = make_agent(tool_server, weather_tool(calls), ms={"tool_choice": "required"},
                       tool_use_behavior="stop_on_first_tool")
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=3)
    assert len(calls) == 1, calls
    assert result.final_output == f"The weather in {calls[0]} is sunny, 21 C."
    kinds = [item.type for item in result.new_items]
    assert "tool_call_item" in kinds and "tool_call_output_item" in kinds, kinds


def test_model_answers_after_the_tool_result(tool_server):
    calls = []
    agent = make_agent(tool_server, weather_tool(calls), ms={"tool_choice": "required"})
    try:
        result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    except agents.MaxTurnsExceeded:
        # Under auto the tiny model may keep calling the tool; each call was valid and ran.
        assert len(calls) >= 2, calls
        return
    assert calls, "the tool never ran"
    assert isinstance(result.final_output, str)
    # The run went model -> tool -> model: two model responses at least.
    assert len(result.raw_responses) >= 2
