"""Fixtures for the real-client suite: unchanged third-party clients (openai, langchain-openai,
instructor, openai-agents) against a `kvasir serve` this suite starts on loopback.

Two servers, both on the default model (SmolLM2-135M-Instruct): `server` with no extra flags
(structured outputs, Responses API, completions scoring), and `tool_server` with a tool-capable
chat template (Qwen2.5's, which asks for Hermes-style <tool_call> blocks) and
`--enable-auto-tool-choice --tool-call-parser hermes`. The model is tiny, so tests check shapes and
validity (the output parses into the schema, the tool was called with schema-valid arguments),
never the model's judgement.

Marker `sweep`: the full JSON-Schema-Test-Suite sweep, which runs only with KVASIR_SCHEMA_SWEEP=1
(scripts/structured_output_sweep.sh); everything else is bounded for CI.
"""
import os

import httpx
import pytest

from client_util import REQUEST_TIMEOUT_S, openai_client, start_server, tool_server_args


def pytest_configure(config):
    config.addinivalue_line("markers", "sweep: the full JSON-Schema-Test-Suite sweep (KVASIR_SCHEMA_SWEEP=1)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KVASIR_SCHEMA_SWEEP"):
        return
    skip = pytest.mark.skip(reason="full sweep: set KVASIR_SCHEMA_SWEEP=1 (scripts/structured_output_sweep.sh)")
    for item in items:
        if "sweep" in item.keywords:
            item.add_marker(skip)


def _stopped(s):
    rc = s.stop()
    assert rc == 0, f"kvasir serve exited with {rc}:\n{s.logs()}"


@pytest.fixture(scope="session")
def server():
    s = start_server()
    yield s
    _stopped(s)


@pytest.fixture(scope="session")
def tool_server():
    s = start_server(*tool_server_args("hermes"))
    yield s
    _stopped(s)


@pytest.fixture(scope="session")
def client(server):
    return openai_client(server)


@pytest.fixture(scope="session")
def tool_client(tool_server):
    return openai_client(tool_server)


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.base, timeout=REQUEST_TIMEOUT_S) as c:
        yield c


@pytest.fixture(scope="session")
def tool_http(tool_server):
    with httpx.Client(base_url=tool_server.base, timeout=REQUEST_TIMEOUT_S) as c:
        yield c


def pytest_terminal_summary(terminalreporter):
    import sys
    mod = sys.modules.get("test_json_schema_suite")
    if not mod or not mod.RESULTS:
        return
    import schema_sweep
    table = schema_sweep.summary_table(mod.RESULTS)
    terminalreporter.write_sep("=", "JSON-Schema-Test-Suite as response_format")
    terminalreporter.write_line(table)
    path = os.environ.get("KVASIR_SWEEP_REPORT") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "json_schema_sweep.md")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(table + "\n")
        terminalreporter.write_line(f"(written to {os.path.abspath(path)})")
    except OSError as e:
        terminalreporter.write_line(f"(could not write {path}: {e})")
