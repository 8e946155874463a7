"""JSON-Schema-Test-Suite schemas as response_format json_schema (see schema_sweep.py for the
rules: a refusal must name a keyword present in the schema; accepted schemas get 20 samples, each
validated with `jsonschema`; cut samples never count valid). CI runs schema_sweep.SUBSET; the full
sweep is marked `sweep` and runs with KVASIR_SCHEMA_SWEEP=1 (scripts/structured_output_sweep.sh).
The summary table is printed at the end of the run and written to $KVASIR_SWEEP_REPORT
(default build/json_schema_sweep.md)."""
import httpx
import pytest

import schema_sweep
from client_util import MODEL_NAME

RESULTS = []  # read by conftest.pytest_terminal_summary


@pytest.fixture(scope="module")
def sweep_http(server):
    # n=20 samples of up to 1,024 tokens on 2 CPU cores: longer than one ordinary request.
    with httpx.Client(base_url=server.base, timeout=900) as c:
        yield c

try:
    ALL = schema_sweep.load_cases()
except FileNotFoundError:
    ALL = []
SUBSET_IDS = [c.id for c in ALL if c.id in schema_sweep.SUBSET]


def _run(http, case_id):
    if not ALL:
        pytest.skip(f"{schema_sweep.SUITE} not present")
    case = next(c for c in ALL if c.id == case_id)
    res = schema_sweep.run_case(http, case, MODEL_NAME)
    RESULTS.append(res)
    assert res.ok, f"{case.id} ({case.description}): {res.why()}"


def test_subset_is_complete():
    if ALL:
        assert sorted(SUBSET_IDS) == sorted(schema_sweep.SUBSET)


@pytest.mark.parametrize("case_id", SUBSET_IDS)
def test_schema_subset(sweep_http, case_id):
    _run(sweep_http, case_id)


@pytest.mark.sweep
@pytest.mark.parametrize("case_id", [c.id for c in ALL])
def test_schema_sweep(sweep_http, case_id):
    _run(sweep_http, case_id)


# ---------------------------------------------------------------- the judge itself (no server)

def test_keywords_are_schema_keys_not_property_names_or_data():
    schema = {"type": "object", "properties": {"minimum": {"type": "string", "pattern": "^a"}},
              "enum": [{"not": 1}], "$defs": {"x": {"uniqueItems": True}}, "allOf": [{"maxLength": 3}]}
    kws = schema_sweep.keywords_in(schema)
    assert {"type", "properties", "pattern", "enum", "$defs", "uniqueItems", "allOf", "maxLength"} <= kws
    assert "minimum" not in kws and "not" not in kws and "x" not in kws


def test_refusal_must_name_a_present_keyword():
    kws = schema_sweep.keywords_in({"type": "string", "$ref": "#/x", "minContains": 1})
    assert schema_sweep.names_keyword("unsupported JSON schema keyword 'minContains'", kws) == "minContains"
    assert schema_sweep.names_keyword("keyword $ref with a remote URI", kws) == "$ref"
    assert schema_sweep.names_keyword("unsupported keyword 'not'", kws) is None
    assert schema_sweep.names_keyword("'minContainsX' is unsupported", kws) is None
    assert schema_sweep.names_keyword("unsupported keywords: `minContains`", kws) == "minContains"
    # A bare word is not a named keyword: this is the message of a server with no structured output.
    assert schema_sweep.names_keyword("response_format type 'json_schema' is not supported", kws) is None
