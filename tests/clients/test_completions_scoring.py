"""Prompt scoring on /v1/completions, as lm-eval-harness does it: `echo=true, logprobs=1,
max_tokens=0` returns the prompt itself with one logprob per prompt token (the first one null, as
vLLM), and `prompt_logprobs` (vLLM's per-choice list of {token_id: {logprob, rank, decoded_token}})
agrees with it token for token.

usage.completion_tokens is not pinned: vLLM generates (and counts) one hidden token for
max_tokens=0, an engine that generates none reports 0; both are accepted."""
import math

import pytest

from client_util import MODEL_NAME

PROMPT = "The capital of France is Paris, and the capital of Italy is Rome."
TOL = 1e-3  # prefix caching may serve the prompt from cache on one path and not the other


def tokenize(http, text):
    return http.post("/tokenize", json={"prompt": text}).json()["tokens"]


def score(client, prompt, **kw):
    return client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=0, echo=True, logprobs=1,
                                     temperature=0, **kw)


def test_echo_max_tokens_0_returns_the_prompt_and_its_logprobs(client, http):
    ids = tokenize(http, PROMPT)
    r = score(client, PROMPT)
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.text == PROMPT
    assert c.finish_reason in ("length", "stop")
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == len(lp.top_logprobs) == len(ids)
    assert "".join(lp.tokens) == PROMPT
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for t, x in zip(lp.tokens[1:], lp.token_logprobs[1:]):
        assert isinstance(x, float) and x <= 0 and math.isfinite(x), (t, x)
    offset = 0
    for tok, off in zip(lp.tokens, lp.text_offset):
        assert off == offset
        offset += len(tok)
    for tok, x, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        # logprobs=1: the top token, plus the prompt's own token when it is not the top one.
        assert 1 <= len(top) <= 2, top
        assert abs(top[tok] - x) < 1e-6, (tok, top, x)
        assert max(top.values()) >= x
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens in (0, 1)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_prompt_logprobs_agree_with_echoed_logprobs(client, http):
    ids = tokenize(http, PROMPT)
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 1,
            "prompt_logprobs": 2, "temperature": 0}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["text"] == PROMPT
    plp = c.get("prompt_logprobs")
    assert isinstance(plp, list), c.keys()
    assert len(plp) == len(ids)
    assert plp[0] is None
    lp = c["logprobs"]
    for i in range(1, len(ids)):
        entry = plp[i]
        assert isinstance(entry, dict) and str(ids[i]) in entry, (i, entry)
        # prompt_logprobs=2: the top 2 plus the prompt's own token when it is outside them.
        assert 1 <= len(entry) <= 3, entry
        mine = entry[str(ids[i])]
        assert abs(mine["logprob"] - lp["token_logprobs"][i]) < TOL, (i, mine, lp["token_logprobs"][i])
        assert mine["decoded_token"] == lp["tokens"][i]
        ranks = sorted(e["rank"] for e in entry.values())
        assert ranks[0] == 1 and mine["rank"] >= 1
        best = max(e["logprob"] for e in entry.values())
        assert all(e["logprob"] <= best for e in entry.values())
        assert (mine["rank"] == 1) == (abs(mine["logprob"] - best) < 1e-6)


def test_scoring_agrees_with_echo_that_generates(client):
    scored = score(client, PROMPT).choices[0].logprobs
    generated = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=1, echo=True, logprobs=1,
                                          temperature=0).choices[0].logprobs
    n = len(scored.tokens)
    assert generated.tokens[:n] == scored.tokens
    assert len(generated.tokens) == n + 1
    assert generated.token_logprobs[0] is None
    for a, b in zip(scored.token_logprobs[1:], generated.token_logprobs[1:n]):
        assert abs(a - b) < TOL


def test_batch_of_prompts_and_token_id_prompts(client, http):
    prompts = ["One, two, three, four.", "Roses are red, violets are blue."]
    r = score(client, prompts)
    texts = sorted((c.index, c.text) for c in r.choices)
    assert [t for _, t in texts] == prompts
    ids = tokenize(http, prompts[1])
    by_ids = score(client, ids).choices[0]
    assert by_ids.text == prompts[1]
    assert by_ids.logprobs.token_logprobs[0] is None
    ref = next(c for c in r.choices if c.index == 1).logprobs.token_logprobs
    for a, b in zip(by_ids.logprobs.token_logprobs[1:], ref[1:]):
        assert abs(a - b) < TOL


def test_streamed_scoring_echoes_the_prompt(client):
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1,
                                            temperature=0, stream=True))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == PROMPT
    lps = [x for ch in chunks if ch.choices and ch.choices[0].logprobs for x in ch.choices[0].logprobs.token_logprobs]
    assert lps and lps[0] is None and all(isinstance(x, float) for x in lps[1:])


@pytest.mark.parametrize("body", [{"max_tokens": 0}, {"max_tokens": 0, "echo": False}])
def test_max_tokens_0_without_echo_is_400(http, body):
    r = http.post("/v1/completions", json={"model": MODEL_NAME, "prompt": PROMPT, **body})
    assert r.status_code == 400, r.text
