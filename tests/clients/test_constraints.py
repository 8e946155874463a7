"""Regex, choice and grammar constraints (vLLM's `structured_outputs` and its older `guided_*`
fields) hold on what the server generates, checked independently of the server's grammar engine:
regexes with Python's `re.fullmatch`, choices exactly, every GBNF grammar in shared/testdata with
the small recognizer in gbnf.py (JSON grammars are also json-parsed). An output cut by max_tokens
must still be a prefix of some sentence of the grammar; a finished one must be a whole sentence.
A malformed schema, regex and grammar each get a 400 and the next request succeeds."""
import json
import os
import re

import jsonschema
import pytest
import regex

from client_util import MODEL_NAME, SHARED, assert_error_envelope, is_json_prefix
from gbnf import Grammar

GRAMMAR_DIR = os.path.join(SHARED, "grammars")
GRAMMARS = sorted(f[:-5] for f in os.listdir(GRAMMAR_DIR) if f.endswith(".gbnf")) if os.path.isdir(GRAMMAR_DIR) else []
# A prompt that fits each grammar, so the tiny model has a chance to finish a sentence.
GRAMMAR_PROMPTS = {
    "arithmetic": "Write some equations, one per line, like x=1:",
    "c": "Write a small C function:",
    "chess": "Write the first moves of a chess game in algebraic notation:",
    "english": "Write one English sentence:",
    "japanese": "日本語で一文を書いてください:",
    "json": "Write a JSON object describing a book:",
    "json_arr": "Write a JSON array of three numbers:",
    "list": "Write a shopping list:",
}
JSON_GRAMMARS = {"json", "json_arr"}
SEED = 1234


def chat(http, extra, content="Answer briefly.", max_tokens=64, n=1, temperature=0, **kw):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "n": n, "temperature": temperature, "seed": SEED, **extra, **kw}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return [(c["message"]["content"], c["finish_reason"]) for c in r.json()["choices"]]


def complete(http, extra, prompt, max_tokens=64, n=1, temperature=0):
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "n": n, "temperature": temperature,
            "seed": SEED, **extra}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return [(c["text"], c["finish_reason"]) for c in r.json()["choices"]]


# ---------------------------------------------------------------- regex

REGEXES = [
    r"(yes|no)",
    r"[0-9]{3}-[0-9]{4}",
    r"\d+(\.\d+)?",
    r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?",
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)",
    r"[a-z0-9._]+@[a-z]+\.(com|org|net)",
]


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_output_fullmatches(http, pattern):
    # Unbounded patterns (\d+) let the 135M model run on to max_tokens: a cut output must still be
    # the start of a match (the `regex` package's partial matching), a finished one a whole match.
    outs = chat(http, {"structured_outputs": {"regex": pattern}}, "Give an example.", n=3, temperature=0.8)
    for text, finish in outs:
        if finish == "length":
            assert regex.fullmatch(pattern, text, partial=True), (pattern, text)
            continue
        assert finish == "stop", (pattern, text, finish)
        assert re.fullmatch(pattern, text), (pattern, text)


def test_guided_regex_on_completions(http):
    pattern = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    for text, finish in complete(http, {"guided_regex": pattern}, "Today's date is", n=2, temperature=0.8):
        assert finish == "stop" and re.fullmatch(pattern, text), text


# ---------------------------------------------------------------- choice

CHOICES = ["Positive", "Negative", "Neutral"]


@pytest.mark.parametrize("field", ["structured_outputs", "guided_choice"])
def test_choice_output_is_one_of_them(http, field):
    extra = {"structured_outputs": {"choice": CHOICES}} if field == "structured_outputs" else {"guided_choice": CHOICES}
    outs = chat(http, extra, "Classify the sentiment: I love this movie!", n=4, temperature=1.0)
    for text, finish in outs:
        assert text in CHOICES, text
        assert finish == "stop"


def test_choice_with_shared_prefixes_and_unicode(http):
    choices = ["cat", "catalog", "caté ☕", "dog"]
    for text, finish in complete(http, {"structured_outputs": {"choice": choices}}, "A word:", n=6, temperature=1.0):
        assert text in choices and finish == "stop", text


# ---------------------------------------------------------------- json (vLLM fields)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
          "required": ["city", "population"]}


@pytest.mark.parametrize("extra", [{"structured_outputs": {"json": SCHEMA}}, {"guided_json": SCHEMA},
                                   {"structured_outputs": {"json": json.dumps(SCHEMA)}}],
                         ids=["structured_outputs", "guided_json", "schema-as-string"])
def test_vllm_json_fields(http, extra):
    for text, finish in chat(http, extra, "Describe a city as JSON.", max_tokens=200):
        assert finish == "stop", text
        jsonschema.validate(json.loads(text), SCHEMA)


def test_json_object_field(http):
    outs = chat(http, {"structured_outputs": {"json_object": True}}, "Any JSON object.", max_tokens=200, n=4,
                temperature=1.0)
    for text, finish in outs:
        if finish == "stop":
            assert isinstance(json.loads(text), dict), text
        else:
            assert finish == "length" and is_json_prefix(text), text
    assert any(finish == "stop" for _, finish in outs), outs


# ---------------------------------------------------------------- grammars

@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_constrains_generation(http, name):
    with open(os.path.join(GRAMMAR_DIR, name + ".gbnf"), encoding="utf-8") as f:
        text = f.read()
    grammar = Grammar(text)
    field = "guided_grammar" if name in ("list", "chess") else None  # the old name too, on two of them
    extra = {field: text} if field else {"structured_outputs": {"grammar": text}}
    outs = complete(http, extra, GRAMMAR_PROMPTS.get(name, "Write:"), max_tokens=96, n=3, temperature=0.7)
    for out, finish in outs:
        if finish == "stop":
            assert grammar.matches(out), (name, out)
            if name in JSON_GRAMMARS:
                json.loads(out)
        else:
            assert finish == "length"
            # A cut inside a multi-byte character may end in U+FFFD: the bytes so far, not a char.
            assert grammar.is_prefix(out.rstrip("\ufffd")), (name, out)


def test_grammar_on_chat_endpoint(http):
    g = 'root ::= "The answer is " ("yes" | "no") "."'
    for text, finish in chat(http, {"structured_outputs": {"grammar": g}}, "Is water wet?", n=2, temperature=1.0):
        assert finish == "stop" and Grammar(g).matches(text), text


# ---------------------------------------------------------------- structural tag

def test_structural_tag_constrains_the_tagged_part(http):
    # vLLM's response_format structural_tag: free text, but once a trigger appears the tagged
    # part must be the schema's JSON and the end tag. The model may never write the trigger; when
    # it does, the part between the tags must validate.
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    fmt = {"type": "structural_tag", "triggers": ["<function="],
           "structures": [{"begin": "<function=get_weather>", "schema": schema, "end": "</function>"}]}
    outs = chat(http, {"response_format": fmt}, "Call <function=get_weather> for Paris.", max_tokens=96, n=2,
                temperature=1.0)
    for text, finish in outs:
        for m in re.finditer(r"<function=", text):
            rest = text[m.start():]
            if not rest.startswith("<function=get_weather>"):
                pytest.fail(f"trigger not followed by a declared tag: {text!r}")
            body = rest[len("<function=get_weather>"):]
            end = body.find("</function>")
            if end < 0:
                assert finish == "length", text
                continue
            jsonschema.validate(json.loads(body[:end]), schema)


# ---------------------------------------------------------------- malformed -> 400

MALFORMED = {
    "schema": {"structured_outputs": {"json": {"type": "object", "properties": {"a": {"type": "frobnicate"}}}}},
    "schema-json-text": {"guided_json": "{not json"},
    "regex": {"structured_outputs": {"regex": "(ab"}},
    "grammar": {"structured_outputs": {"grammar": 'root ::= "a" undefined_rule'}},
    "grammar-syntax": {"guided_grammar": "root ::= ( \"a\""},
    "two-constraints": {"structured_outputs": {"regex": "a", "choice": ["a"]}},
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_constraint_is_400_and_the_next_request_succeeds(http, name):
    body = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 8, **MALFORMED[name]}
    assert_error_envelope(http.post("/v1/completions", json=body), 400)
    chat_body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                 **MALFORMED[name]}
    assert_error_envelope(http.post("/v1/chat/completions", json=chat_body), 400)
    ok = complete(http, {"structured_outputs": {"regex": "(yes|no)"}}, "Hello", max_tokens=8)
    assert ok[0][0] in ("yes", "no")
