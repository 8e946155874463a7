"""Helpers shared by the tool-calling and Responses API tests: validation of our JSON against the
OpenAI OpenAPI spec in shared/testdata/openai, and a probe for whether the engine enforces
structured outputs (grammar) yet."""
import functools
import os

import httpx
import pytest

SHARED = os.environ.get("KVASIR_SHARED_TESTDATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "testdata")
SPEC = os.path.join(SHARED, "openai", "openapi.yaml")
CHAT_TEMPLATES = os.environ.get("KVASIR_CHAT_TEMPLATES") or os.path.join(SHARED, "chat_templates")


@functools.lru_cache(maxsize=1)
def _schemas():
    try:
        import jsonschema  # noqa: F401
        import yaml
    except ImportError:
        return None
    if not os.path.exists(SPEC):
        return None
    with open(SPEC, "rb") as f:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return yaml.load(f, Loader=loader)


def validate(obj, schema_name):
    """Validates `obj` against components.schemas[schema_name] (skips when the spec or jsonschema
    is missing)."""
    spec = _schemas()
    if spec is None:
        pytest.skip("OpenAI spec or jsonschema/yaml not available")
    import jsonschema
    schema = {"$ref": f"#/components/schemas/{schema_name}", "components": spec["components"]}
    jsonschema.validate(obj, schema, cls=jsonschema.Draft202012Validator)


# A schema only an enforcing grammar makes a 135M model follow.
_PROBE = {"type": "string", "enum": ["zebra-quokka-42"]}


@functools.lru_cache(maxsize=None)
def _grammar_enforced(base):
    r = httpx.post(base + "/v1/responses", timeout=120, json={
        "input": "Say anything.", "max_output_tokens": 16, "temperature": 0,
        "text": {"format": {"type": "json_schema", "name": "probe", "schema": _PROBE}}})
    if r.status_code != 200:
        return False
    out = r.json()["output"]
    texts = [p["text"] for item in out if item["type"] == "message" for p in item["content"]]
    return texts == ['"zebra-quokka-42"']


def require_grammar(server):
    """Skips the calling test until the engine enforces structured outputs: SamplingParams::
    structured_outputs is set by these requests, and is ignored by an engine without a grammar."""
    if not _grammar_enforced(server.base):
        pytest.skip("needs the engine's structured-output (grammar) enforcement")
