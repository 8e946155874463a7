"""A second server with --api-key, a short --max-model-len and a tiny --max-num-queued-reqs: 401
without or with a wrong key, 200 with the right one; the default max_tokens fills what is left of
the context; a burst past the queue bound gets 429 with Retry-After and the rest succeed."""
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from conftest import MODEL_NAME, Server, assert_error_envelope


@pytest.fixture(scope="module")
def keyed():
    s = Server("--api-key", "s3cret", "--max-model-len", "48", "--max-num-queued-reqs", "2",
               "--trust-request-chat-template")
    yield s
    assert s.stop() == 0, s.logs()


def test_missing_and_wrong_key(keyed):
    body = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}
    err = assert_error_envelope(httpx.post(keyed.base + "/v1/completions", json=body), 401)
    assert err["code"] == "invalid_api_key"
    assert_error_envelope(httpx.post(keyed.base + "/v1/completions", json=body,
                                     headers={"Authorization": "Bearer wrong"}), 401)
    assert_error_envelope(httpx.get(keyed.base + "/v1/models", headers={"Authorization": "s3cret"}), 401)
    bad = openai.OpenAI(base_url=keyed.base + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # Health and metrics stay open for probes.
    assert httpx.get(keyed.base + "/health").status_code == 200


def test_right_key_and_default_max_tokens(keyed):
    c = openai.OpenAI(base_url=keyed.base + "/v1", api_key="s3cret", max_retries=0)
    r = c.completions.create(model=MODEL_NAME, prompt="Once upon a time", extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == 48
    r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert r.usage.completion_tokens <= 2


def test_queue_bound_answers_429(keyed):
    body = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2}
    headers = {"Authorization": "Bearer s3cret"}

    def post(_):
        return httpx.post(keyed.base + "/v1/completions", json=body, headers=headers, timeout=120)

    with ThreadPoolExecutor(40) as pool:
        replies = list(pool.map(post, range(40)))
    codes = [r.status_code for r in replies]
    assert set(codes) <= {200, 429}, codes
    assert 429 in codes and 200 in codes, codes
    limited = next(r for r in replies if r.status_code == 429)
    assert limited.headers.get("retry-after") == "1"
    assert_error_envelope(limited, 429)
    # Nothing stays counted as waiting afterwards.
    assert keyed.metric("kvasir:server_waiting_sequences") == 0
    assert httpx.post(keyed.base + "/v1/completions", json=body, headers=headers, timeout=60).status_code == 200


def test_trusted_request_chat_template(keyed):
    headers = {"Authorization": "Bearer s3cret"}
    body = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 1,
            "chat_template": "{% for m in messages %}<<{{ m.content }}>>{% endfor %}"}
    r = httpx.post(keyed.base + "/v1/chat/completions", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    t = httpx.post(keyed.base + "/tokenize", json={"prompt": "<<hello there>>", "add_special_tokens": False},
                   headers=headers).json()
    assert r.json()["usage"]["prompt_tokens"] == t["count"]
    tok = httpx.post(keyed.base + "/tokenize", json={k: v for k, v in body.items() if k != "max_tokens"},
                     headers=headers).json()
    assert tok["tokens"] == t["tokens"]


# One rule for the key: every path but the probes (/health, /metrics, /version) needs it, as in
# vLLM; /tokenize and /detokenize do work and are no exception.
KEYED_ROUTES = [
    ("POST", "/tokenize", {"prompt": "hi"}),
    ("POST", "/detokenize", {"tokens": [1, 2]}),
    ("POST", "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1}),
    ("POST", "/v1/chat/completions", {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
                                      "max_tokens": 1}),
    ("POST", "/v1/responses", {"model": MODEL_NAME, "input": "hi", "max_output_tokens": 1}),
    ("GET", "/v1/models", None),
    ("HEAD", "/v1/models", None),
    ("GET", "/v1/responses/resp_nothing", None),
    ("GET", "/no/such/path", None),
]


@pytest.mark.parametrize("method,path,body", KEYED_ROUTES, ids=[f"{c[0]} {c[1]}" for c in KEYED_ROUTES])
def test_every_route_but_the_probes_needs_the_key(keyed, method, path, body):
    r = httpx.request(method, keyed.base + path, json=body, timeout=60)
    assert r.status_code == 401, r.text
    if method != "HEAD":
        assert_error_envelope(r, 401)
    ok = httpx.request(method, keyed.base + path, json=body, headers={"Authorization": "Bearer s3cret"}, timeout=60)
    assert ok.status_code != 401, ok.text


@pytest.mark.parametrize("path", ["/health", "/metrics", "/version"])
def test_probes_need_no_key(keyed, path):
    assert httpx.get(keyed.base + path, timeout=10).status_code == 200
    assert httpx.head(keyed.base + path, timeout=10).status_code == 200
