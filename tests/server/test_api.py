"""The OpenAI-compatible API driven by the official `openai` client: shapes, streaming, n > 1,
logprobs, stop, seeds, usage, models, tokenize/detokenize and metrics."""
import json

import httpx
import pytest

from conftest import MODEL_NAME

PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "Name three colors."}]


def test_health_version_models(server, client, http):
    assert http.get("/health").status_code == 200
    assert http.get("/version").json()["version"]
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert models.data[0].object == "model"
    assert http.get(f"/v1/models/{MODEL_NAME}").json()["id"] == MODEL_NAME
    assert http.get("/v1/models/other").status_code == 404


def test_completion_shape_and_usage(client, http):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=5, temperature=0)
    assert r.id.startswith("cmpl-")
    assert r.object == "text_completion"
    assert r.model == MODEL_NAME
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.choices[0].finish_reason in ("stop", "length")
    n_prompt = http.post("/tokenize", json={"prompt": PROMPT}).json()["count"]
    assert r.usage.prompt_tokens == n_prompt
    assert 1 <= r.usage.completion_tokens <= 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_token_prompt_matches_text_prompt(client, http):
    ids = http.post("/tokenize", json={"prompt": PROMPT}).json()["tokens"]
    a = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, temperature=0)
    b = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=6, temperature=0)
    assert a.choices[0].text == b.choices[0].text


def test_completion_many_prompts_and_n(client):
    r = client.completions.create(model=MODEL_NAME, prompt=["One, two,", "Red, green,"], n=2, max_tokens=3,
                                  temperature=0.8, seed=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert 4 <= r.usage.completion_tokens <= 12


def test_completion_max_tokens_length(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=3, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(len(t) >= 2 for t in lp.top_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text
    # Greedy: the chosen token is the most likely one.
    for tok, top, chosen in zip(lp.tokens, lp.top_logprobs, lp.token_logprobs):
        assert max(top.values()) == pytest.approx(chosen, abs=1e-4)


def test_completion_echo(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=3, temperature=0, echo=True)
    assert r.choices[0].text.startswith(PROMPT)
    r2 = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=1)
    lp = r2.choices[0].logprobs
    assert lp.token_logprobs[0] is None
    assert len(lp.tokens) == r2.usage.prompt_tokens + r2.usage.completion_tokens


def test_completion_stream_matches_non_stream(client):
    kw = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=1.0, seed=1234)
    full = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert all(c.id == chunks[0].id for c in chunks)


def test_chat_shape(client, http):
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8, temperature=0)
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    m = r.choices[0].message
    assert m.role == "assistant" and isinstance(m.content, str) and m.content
    assert r.choices[0].finish_reason in ("stop", "length")
    n_prompt = http.post("/tokenize", json={"messages": MESSAGES}).json()["count"]
    assert r.usage.prompt_tokens == n_prompt
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_matches_non_stream(client):
    kw = dict(model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=8, temperature=1.0, seed=77)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [full.choices[0].finish_reason]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_chat_n_and_seed_reproducible(client):
    kw = dict(model=MODEL_NAME, messages=MESSAGES, max_tokens=6, temperature=1.0, n=3, seed=5)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    others = {client.chat.completions.create(**{**kw, "n": 1, "seed": s}).choices[0].message.content for s in (100, 200, 300)}
    assert len(others | {a.choices[0].message.content}) > 1


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-4)
        assert bytes(e.bytes).decode(errors="replace") == e.token or e.bytes is not None
    s = list(client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=4, temperature=0,
                                            logprobs=True, top_logprobs=1, stream=True,
                                            extra_body={"ignore_eos": True}))
    streamed = [e for c in s if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]


def test_stop_strings(client):
    base = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    stop = base.strip().split()[1] if len(base.split()) > 2 else base[2:4]
    r = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=[stop],
                                  extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.text == base[:base.index(stop)]
    assert c.model_extra.get("stop_reason") == stop
    r2 = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=stop,
                                   extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    assert r2.choices[0].text == base[:base.index(stop) + len(stop)]


def test_vllm_extras_and_openai_knobs(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                                 {"type": "text", "text": "there"}]}],
        max_tokens=4, temperature=0.7, top_p=0.9, frequency_penalty=0.5, presence_penalty=0.5, logit_bias={"42": 5},
        seed=1, stop=["\n\n"],
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 2, "ignore_eos": True,
                    "skip_special_tokens": True, "add_generation_prompt": True,
                    "chat_template_kwargs": {"enable_thinking": False}})
    assert r.usage.completion_tokens >= 2


def test_tools_and_tool_role_accepted(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    msgs = [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    # tool_choice "none": without a tool parser the default "auto" is a 400 (test_tool_calls.py).
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=tools, tool_choice="none", max_tokens=3)
    assert r.choices[0].message.role == "assistant"


def test_request_chat_template_refused(http):
    r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2,
                                                "chat_template": "{{ messages[0].content }}"})
    assert r.status_code == 400
    assert "trust-request-chat-template" in r.json()["error"]["message"]


def test_tokenize_detokenize_round_trip(http):
    text = "Hello world, this is Kvasir. ünïcödé ✓"
    t = http.post("/tokenize", json={"model": MODEL_NAME, "prompt": text, "add_special_tokens": False}).json()
    assert t["count"] == len(t["tokens"]) > 0 and t["max_model_len"] == 512
    d = http.post("/detokenize", json={"model": MODEL_NAME, "tokens": t["tokens"]}).json()
    assert d["prompt"] == text
    m = http.post("/tokenize", json={"messages": MESSAGES, "return_token_strs": True}).json()
    assert len(m["token_strs"]) == m["count"]


def test_metrics_present_and_moving(server, client):
    before = server.metrics()
    for key in ("kvasir:kv_cache_usage_perc", "kvasir:num_requests_running", "kvasir:num_requests_waiting",
                "kvasir:generation_tokens_total", "kvasir:http_requests_total"):
        assert any(k.startswith(key) for k in before), key
    client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=3, extra_body={"ignore_eos": True})
    after = server.metrics()
    gen = lambda m: sum(v for k, v in m.items() if k.startswith("kvasir:generation_tokens_total"))
    assert gen(after) >= gen(before) + 3
    ok = lambda m: sum(v for k, v in m.items()
                       if k.startswith("kvasir:http_requests_total") and 'handler="/v1/completions"' in k
                       and 'status="2xx"' in k)
    assert ok(after) == ok(before) + 1
