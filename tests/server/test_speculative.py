"""Speculative decoding on the server (issue 16): --speculative-config with vLLM's keys, a bad or
unbuilt config refuses to start naming what is wrong, greedy answers equal a server without
speculation, the spec_decode counters move in /metrics, and a structured-output request is a 400
naming the combination. The "draft_model" method (vLLM's 'model' shorthand, the same GGUF as its
own draft) gives the plain server's greedy text with drafts accepted; a draft with another
vocabulary refuses to start.
"""
import os
import subprocess

import httpx
import pytest

from conftest import MODEL, MODEL_NAME, Server, assert_error_envelope, kvasir_bin

C = "/v1/completions"
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
PROMPT = ('Repeat exactly: "The quick brown fox jumps over the lazy dog. A stitch in time saves nine."\nRepeat: "The')


@pytest.fixture(scope="module")
def spec_server():
    s = Server("--speculative-config", NGRAM)
    yield s
    assert s.stop() == 0, s.logs()


def complete(server, **kw):
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 40, "temperature": 0, **kw}
    r = httpx.post(server.base + C, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_greedy_text_equals_the_plain_server_and_metrics_move(server, spec_server):
    before = spec_server.metrics()
    drafts_key = next(k for k in before if k.startswith("kvasir:spec_decode_num_drafts_total"))
    accepted_key = next(k for k in before if k.startswith("kvasir:spec_decode_num_accepted_tokens_total"))
    plain = complete(server)
    spec = complete(spec_server)
    assert spec["text"] == plain["text"] and spec["finish_reason"] == plain["finish_reason"]
    after = spec_server.metrics()
    assert after[drafts_key] > before[drafts_key]
    assert after[accepted_key] > before[accepted_key]
    assert any(k.startswith("kvasir:spec_decode_num_draft_tokens_total") for k in after)
    assert any('position="0"' in k for k in after if k.startswith("kvasir:spec_decode_num_accepted_tokens_per_pos"))


def test_logprobs_and_n_work_with_speculation(server, spec_server):
    kw = {"temperature": 0.8, "seed": 5, "n": 2, "logprobs": 2, "max_tokens": 16}
    plain = httpx.post(server.base + C, json={"model": MODEL_NAME, "prompt": PROMPT, **kw}, timeout=120).json()
    spec = httpx.post(spec_server.base + C, json={"model": MODEL_NAME, "prompt": PROMPT, **kw}, timeout=120).json()
    assert [c["text"] for c in spec["choices"]] == [c["text"] for c in plain["choices"]]
    for c in spec["choices"]:
        assert len(c["logprobs"]["tokens"]) == len(c["logprobs"]["token_logprobs"]) > 0


def test_structured_outputs_with_speculation_is_a_400_naming_it(spec_server):
    r = httpx.post(spec_server.base + C, json={"model": MODEL_NAME, "prompt": "yes or no?", "max_tokens": 4,
                                               "structured_outputs": {"choice": ["yes", "no"]}}, timeout=60)
    err = assert_error_envelope(r, 400)
    assert "structured outputs with speculative decoding" in err["message"]


@pytest.mark.parametrize("config, message", [
    ('{"method": "eagle3", "num_speculative_tokens": 3}', 'method "eagle3" is not supported yet'),
    ('{"method": "mtp", "num_speculative_tokens": 3}', 'method "mtp" is not supported yet'),
    ('{"method": "suffix", "prompt_lookup_max": 3}', 'belong to the "ngram" method'),
    ('{"method": "suffix", "suffix_decoding_min_token_prob": 1.5}', "min_token_prob"),
    ('{"method": "ngram"}', "'num_speculative_tokens' is required"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "'num_speculative_tokens' must be in [1, 64]"),
    ('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2}',
     "prompt_lookup_min (5) must be <= prompt_lookup_max (2)"),
    ("not json", "must be a JSON object"),
    ('{"model": "draft.gguf", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}',
     "'draft_tensor_parallel_size' 2 is not supported"),
    ('{"method": "draft_model", "num_speculative_tokens": 3}', "needs 'model'"),
])
def test_a_bad_config_refuses_to_start_naming_the_field(config, message):
    args = [kvasir_bin(), "serve", MODEL, "--port", "0", "--speculative-config", config]
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    assert p.returncode != 0, out[-2000:]
    assert message in out, out[-2000:]


def test_draft_model_through_serve_equals_the_plain_server(server):
    before_text = complete(server)
    draft = Server("--speculative-config", '{"model": "%s", "num_speculative_tokens": 3}' % MODEL)
    try:
        before = draft.metrics()
        accepted_key = next(k for k in before if k.startswith("kvasir:spec_decode_num_accepted_tokens_total"))
        spec = complete(draft)
        assert spec["text"] == before_text["text"] and spec["finish_reason"] == before_text["finish_reason"]
        assert draft.metrics()[accepted_key] > before[accepted_key]
    finally:
        assert draft.stop() == 0, draft.logs()


@pytest.mark.parametrize("flags", [("--pipeline-parallel-size", "2"), ("--distributed-executor-backend", "mp")])
def test_a_draft_model_in_a_group_or_worker_processes_is_refused(flags):
    config = '{"method": "draft_model", "model": "%s", "num_speculative_tokens": 3}' % MODEL
    p = subprocess.run([kvasir_bin(), "serve", MODEL, "--port", "0", "--speculative-config", config, *flags],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    assert p.returncode != 0, out[-2000:]
    assert "draft_model\" with --pipeline-parallel-size > 1 or --distributed-executor-backend mp is not supported yet" \
        in out, out[-2000:]


def test_a_draft_with_another_vocabulary_refuses_to_start():
    gemma = os.path.join(os.path.dirname(MODEL), "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(gemma):
        pytest.skip("gemma model missing")
    config = '{"method": "draft_model", "model": "%s", "num_speculative_tokens": 3}' % gemma
    p = subprocess.run([kvasir_bin(), "serve", MODEL, "--port", "0", "--speculative-config", config],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    assert p.returncode != 0, out[-2000:]
    assert "does not share the target's vocabulary" in out, out[-2000:]
