"""Bad input: every request gets the right 4xx with the OpenAI error envelope, and a good request
right after it still succeeds (nothing leaked, nothing wedged)."""
import json

import httpx
import pytest

from conftest import MODEL_NAME, assert_error_envelope

C = "/v1/completions"
CH = "/v1/chat/completions"
GOOD_MSGS = [{"role": "user", "content": "hi"}]


def good(**kw):
    return {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2, **kw}


def chat(**kw):
    return {"model": MODEL_NAME, "messages": GOOD_MSGS, "max_tokens": 2, **kw}


RAW_CASES = [
    ("malformed_json", C, b'{"prompt": "x",', 400),
    ("truncated_json", CH, b'{"messages": [', 400),
    ("non_object_array", C, b"[1, 2, 3]", 400),
    ("non_object_string", CH, b'"hello"', 400),
    ("empty_body", C, b"", 400),
    ("nan_literal", C, b'{"prompt": "x", "max_tokens": 2, "temperature": NaN}', 400),
    ("infinity_literal", C, b'{"prompt": "x", "max_tokens": 2, "top_p": Infinity}', 400),
    ("huge_exponent_inf", C, b'{"prompt": "x", "max_tokens": 2, "temperature": 1e999}', 400),
    ("invalid_utf8", C, b'{"prompt": "\xff\xfe", "max_tokens": 2}', 400),
]

JSON_CASES = [
    # wrong types
    ("prompt_number", C, good(prompt=5), 400, "prompt"),
    ("prompt_mixed", C, good(prompt=[1, "a"]), 400, "prompt"),
    ("prompt_empty_list", C, good(prompt=[]), 400, "prompt"),
    ("max_tokens_string", C, good(max_tokens="5"), 400, "max_tokens"),
    ("max_tokens_float", C, good(max_tokens=2.5), 400, "max_tokens"),
    ("temperature_string", C, good(temperature="hot"), 400, "temperature"),
    ("stream_string", C, good(stream="yes"), 400, "stream"),
    ("stop_number", C, good(stop=5), 400, "stop"),
    ("logit_bias_list", C, good(logit_bias=[1, 2]), 400, "logit_bias"),
    ("messages_string", CH, chat(messages="hi"), 400, "messages"),
    ("message_no_role", CH, chat(messages=[{"content": "x"}]), 400, None),
    ("content_number", CH, chat(messages=[{"role": "user", "content": 5}]), 400, None),
    ("image_part", CH, chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
     400, None),
    ("model_number", C, good(model=3), 400, "model"),
    ("stream_options_without_stream", C, good(stream_options={"include_usage": True}), 400, None),
    # out-of-range sampling values
    ("temperature_negative", C, good(temperature=-1), 400, "temperature"),
    ("top_p_zero", C, good(top_p=0), 400, "top_p"),
    ("top_p_above_one", CH, chat(top_p=1.5), 400, "top_p"),
    ("top_k_negative", C, good(top_k=-5), 400, "top_k"),
    ("min_p_above_one", C, good(min_p=2), 400, "min_p"),
    ("repetition_penalty_zero", C, good(repetition_penalty=0), 400, "repetition_penalty"),
    ("presence_penalty_big", CH, chat(presence_penalty=3), 400, "presence_penalty"),
    ("frequency_penalty_small", CH, chat(frequency_penalty=-2.5), 400, "frequency_penalty"),
    ("max_tokens_zero", C, good(max_tokens=0), 400, "max_tokens"),
    ("max_tokens_negative", CH, chat(max_tokens=-5), 400, "max_tokens"),
    ("max_tokens_past_context", C, good(max_tokens=100000), 400, None),
    ("n_zero", C, good(n=0), 400, "n"),
    ("n_huge", CH, chat(n=100000), 400, "n"),
    ("logprobs_negative", C, good(logprobs=-1), 400, "logprobs"),
    ("logprobs_too_many", C, good(logprobs=1000), 400, None),
    ("top_logprobs_too_many", CH, chat(logprobs=True, top_logprobs=1000), 400, None),
    ("top_logprobs_without_logprobs", CH, chat(top_logprobs=2), 400, None),
    ("logit_bias_value", C, good(logit_bias={"5": 1000}), 400, None),
    ("min_tokens_above_max", C, good(min_tokens=5, max_tokens=2), 400, "min_tokens"),
    ("seed_float", C, good(seed=1.5), 400, "seed"),
    # token ids outside the vocabulary
    ("prompt_token_oov", C, good(prompt=[1, 99999999]), 400, None),
    ("prompt_token_negative", C, good(prompt=[-1]), 400, None),
    ("prompt_token_lists_oov", C, good(prompt=[[1, 2], [50000000]]), 400, None),
    ("logit_bias_oov", C, good(logit_bias={"99999999": 1}), 400, None),
    ("logit_bias_key_not_int", C, good(logit_bias={"abc": 1}), 400, None),
    ("stop_token_ids_oov", CH, chat(stop_token_ids=[99999999]), 400, None),
    # lengths, emptiness, unsupported
    ("prompt_too_long", C, good(prompt="hello " * 1000), 400, None),
    ("messages_too_long", CH, chat(messages=[{"role": "user", "content": "hello " * 1000}]), 400, None),
    ("empty_messages", CH, chat(messages=[]), 400, "messages"),
    ("missing_messages", CH, {"model": MODEL_NAME}, 400, "messages"),
    ("missing_prompt", C, {"model": MODEL_NAME}, 400, "prompt"),
    ("suffix", C, good(suffix="end"), 400, None),
    ("both_generation_flags", CH, chat(add_generation_prompt=True, continue_final_message=True), 400, None),
    ("json_schema_without_schema", CH, chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}), 400, None),
]


@pytest.fixture
def still_healthy(http):
    yield
    r = http.post(C, json=good())
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] is not None


@pytest.mark.parametrize("name,path,raw,status", RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_raw_bodies(http, still_healthy, name, path, raw, status):
    r = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert_error_envelope(r, status)


@pytest.mark.parametrize("name,path,body,status,param", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_json_bodies(http, still_healthy, name, path, body, status, param):
    r = http.post(path, json=body)
    err = assert_error_envelope(r, status)
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err


def test_unknown_model(http, still_healthy):
    for path, body in ((C, good(model="gpt-9")), (CH, chat(model="gpt-9"))):
        err = assert_error_envelope(http.post(path, json=body), 404)
        assert err["code"] == "model_not_found" and err["param"] == "model"


def test_detokenize_oov(http, still_healthy):
    assert_error_envelope(http.post("/detokenize", json={"tokens": [99999999]}), 400)
    assert_error_envelope(http.post("/detokenize", json={"tokens": "abc"}), 400)
    assert_error_envelope(http.post("/tokenize", json={"prompt": 5}), 400)


def test_unknown_route_and_method(http, still_healthy):
    assert_error_envelope(http.get("/v1/nothing"), 404)
    r = http.get(C)
    assert_error_envelope(r, 405)
    assert r.headers.get("allow") == "POST"
    assert_error_envelope(http.delete("/v1/models"), 405)


def test_oversized_headers(server, still_healthy):
    # The transport refuses these before routing (431); the server must keep serving.
    r = httpx.get(server.base + "/v1/models", headers={"x-big": "a" * 64 * 1024}, timeout=30)
    assert r.status_code == 431


def test_oversized_body(server, still_healthy):
    # The test server runs with --max-body-bytes 1 MiB.
    body = json.dumps(good(prompt="a" * (2 << 20))).encode()
    try:
        r = httpx.post(server.base + C, content=body, headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == 413
    except httpx.HTTPError:
        pass  # the server may close before the client finished sending; what matters is it stays up


# A prompt longer than max_model_len x the longest token (in bytes) cannot fit the context: it is
# refused before the tokenizer builds anything for it (the test server: max_model_len 512, a
# 1 MiB body limit), on every route that tokenizes, /tokenize included.
TOO_LONG = "lorem ipsum " * 80000  # 960,000 bytes

TOO_LONG_CASES = [
    ("tokenize", "/tokenize", {"prompt": TOO_LONG}),
    ("tokenize_messages", "/tokenize", {"messages": [{"role": "user", "content": TOO_LONG}]}),
    ("completions", C, good(prompt=TOO_LONG)),
    ("completions_second_prompt", C, good(prompt=["hi", TOO_LONG])),
    ("chat", CH, chat(messages=[{"role": "user", "content": TOO_LONG}])),
    ("responses", "/v1/responses", {"model": MODEL_NAME, "input": TOO_LONG, "max_output_tokens": 2}),
]


@pytest.mark.parametrize("name,path,body", TOO_LONG_CASES, ids=[c[0] for c in TOO_LONG_CASES])
def test_prompt_too_long_for_any_context_is_refused_before_tokenizing(http, still_healthy, name, path, body):
    err = assert_error_envelope(http.post(path, json=body), 400)
    assert "bytes can fit in this model's context of 512 tokens" in err["message"], err


def test_long_prompt_within_the_byte_bound_is_tokenized(http):
    r = http.post("/tokenize", json={"prompt": "lorem ipsum " * 1000, "add_special_tokens": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == len(body["tokens"]) > 512 and body["token_strs"] is None
    assert body["max_model_len"] == 512
    strs = http.post("/tokenize", json={"prompt": "lorem ipsum", "return_token_strs": True}).json()
    assert len(strs["token_strs"]) == strs["count"] and all(isinstance(t, str) for t in strs["token_strs"])
