"""Speculative decoding on the server (issue 16): --speculative-config with vLLM's keys, a bad or
unbuilt config refuses to start naming what is wrong, greedy answers equal a server without
speculation, the spec_decode counters move in /metrics, structured outputs (choice, regex, a JSON
schema) equal the plain server's constrained outputs. The "draft_model" method (vLLM's 'model' shorthand, the same GGUF as its
own draft) gives the plain server's greedy text with drafts accepted; a draft with another
vocabulary refuses to start. The "eagle3" and "eagle" (EAGLE-1/2) methods with a random-weight
head of SmolLM2's shape (written here in the checkpoint formats vLLM loads) give the plain
server's greedy text while the head drafts; a head for another hidden size refuses to start
naming both sizes, and a head config.json with a key that would change the head's computation
(mlp_bias true) refuses to start naming it.
"""
import json
import os
import struct
import subprocess

import httpx
import pytest

from conftest import MODEL, MODEL_NAME, Server, kvasir_bin

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


def test_structured_outputs_with_speculation_equal_plain_constrained_outputs(server, spec_server):
    text = ("Alice Johnson lives in Paris. She said: \"the quick brown fox jumps over the lazy dog\". "
            "Her phone number is 555-1234.\n")
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "quote": {"type": "string"}},
              "required": ["name", "quote"], "additionalProperties": False}
    cases = [
        {"prompt": text + "Her city:", "structured_outputs": {"choice": ["Paris", "London"]}},
        {"prompt": text + "Her phone number:", "structured_outputs": {"regex": "[0-9]{3}-[0-9]{4}"}},
        {"prompt": text + "Her name and quote as JSON:",
         "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}},
    ]
    for case in cases:
        body = {"model": MODEL_NAME, "max_tokens": 48, "temperature": 0, **case}
        plain = httpx.post(server.base + C, json=body, timeout=120)
        spec = httpx.post(spec_server.base + C, json=body, timeout=120)
        assert plain.status_code == 200 and spec.status_code == 200, (plain.text, spec.text)
        assert spec.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]
    out = json.loads(spec.json()["choices"][0]["text"])
    assert set(out) == {"name", "quote"}


@pytest.mark.parametrize("config, message", [
    ('{"method": "eagle", "num_speculative_tokens": 3}', "method \"eagle\" needs 'model': the EAGLE-1/2 head"),
    ('{"method": "eagle", "model": "h", "num_speculative_tokens": 3, "speculative_token_tree": "[(0,)]"}',
     "'speculative_token_tree' is not supported"),
    ('{"method": "eagle3", "num_speculative_tokens": 3}', "method \"eagle3\" needs 'model': the EAGLE-3 head"),
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


def write_eagle3_head(path, hidden=576, draft_vocab=1024, seed=3):
    """A random EAGLE-3 head (config.json + model.safetensors) for SmolLM2-135M (9 heads / 3 KV
    heads of 64, 30 layers: vLLM's default aux layers 2, 15, 27)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    heads, kv, hd, ffn, vocab = 9, 3, 64, 128, 49152
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
                   "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
                   "intermediate_size": ffn, "vocab_size": vocab, "draft_vocab_size": draft_vocab,
                   "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 8192,
                   "num_hidden_layers": 1}, f)
    def m(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
    t = {"fc.weight": m(hidden, 3 * hidden), "norm.weight": np.ones(hidden, np.float32),
         "lm_head.weight": m(draft_vocab, hidden),
         "midlayer.input_layernorm.weight": np.ones(hidden, np.float32),
         "midlayer.hidden_norm.weight": np.ones(hidden, np.float32),
         "midlayer.post_attention_layernorm.weight": np.ones(hidden, np.float32),
         "midlayer.self_attn.q_proj.weight": m(heads * hd, 2 * hidden),
         "midlayer.self_attn.k_proj.weight": m(kv * hd, 2 * hidden),
         "midlayer.self_attn.v_proj.weight": m(kv * hd, 2 * hidden),
         "midlayer.self_attn.o_proj.weight": m(hidden, heads * hd),
         "midlayer.mlp.gate_proj.weight": m(ffn, hidden), "midlayer.mlp.up_proj.weight": m(ffn, hidden),
         "midlayer.mlp.down_proj.weight": m(hidden, ffn),
         "d2t": (np.sort(rng.choice(vocab, draft_vocab, replace=False)) - np.arange(draft_vocab)).astype(np.int64)}
    header, blobs, off = {}, [], 0
    for name, a in t.items():
        b = a.tobytes()
        header[name] = {"dtype": "I64" if a.dtype == np.int64 else "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_eagle_head(path, hidden=576, seed=4, extra=None):
    """A random EAGLE-1/2 head (vLLM's EagleLlamaForCausalLM: config.json + model.safetensors with
    fc [hidden, 2 x hidden] + fc.bias and layers.0.* without input_layernorm) for SmolLM2-135M."""
    import numpy as np
    rng = np.random.default_rng(seed)
    heads, kv, hd, ffn, vocab = 9, 3, 64, 128, 49152
    os.makedirs(path, exist_ok=True)
    config = {"architectures": ["EagleLlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
              "intermediate_size": ffn, "vocab_size": vocab, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
              "max_position_embeddings": 8192, "num_hidden_layers": 1, "bias": True}
    config.update(extra or {})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    def m(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
    t = {"fc.weight": m(hidden, 2 * hidden), "fc.bias": m(hidden),
         "layers.0.post_attention_layernorm.weight": np.ones(hidden, np.float32),
         "layers.0.self_attn.q_proj.weight": m(heads * hd, hidden),
         "layers.0.self_attn.k_proj.weight": m(kv * hd, hidden),
         "layers.0.self_attn.v_proj.weight": m(kv * hd, hidden),
         "layers.0.self_attn.o_proj.weight": m(hidden, heads * hd),
         "layers.0.mlp.gate_proj.weight": m(ffn, hidden), "layers.0.mlp.up_proj.weight": m(ffn, hidden),
         "layers.0.mlp.down_proj.weight": m(hidden, ffn)}
    header, blobs, off = {}, [], 0
    for name, a in t.items():
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_head(method, path, hidden=576):
    if method == "eagle3":
        write_eagle3_head(path, hidden=hidden, draft_vocab=1024 if hidden == 576 else 16)
    else:
        write_eagle_head(path, hidden=hidden)


HEAD_LOG = {"eagle3": "EAGLE-3 head", "eagle": "EAGLE head"}


@pytest.mark.parametrize("method", ["eagle3", "eagle"])
def test_eagle_heads_through_serve_equal_the_plain_server(server, tmp_path, method):
    pytest.importorskip("numpy")
    head = str(tmp_path / "head")
    write_head(method, head)
    plain = complete(server)
    eagle = Server("--speculative-config",
                   '{"method": "%s", "model": "%s", "num_speculative_tokens": 3}' % (method, head))
    try:
        before = eagle.metrics()
        drafts_key = next(k for k in before if k.startswith("kvasir:spec_decode_num_drafts_total"))
        spec = complete(eagle)
        assert spec["text"] == plain["text"] and spec["finish_reason"] == plain["finish_reason"]
        assert eagle.metrics()[drafts_key] > before[drafts_key]
        assert HEAD_LOG[method] + " " + head in eagle.logs()
    finally:
        assert eagle.stop() == 0, eagle.logs()


def refused_start(config):
    p = subprocess.run([kvasir_bin(), "serve", MODEL, "--port", "0", "--speculative-config", config],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    assert p.returncode != 0, out[-2000:]
    return out


@pytest.mark.parametrize("method", ["eagle3", "eagle"])
def test_an_eagle_head_for_another_model_refuses_to_start(tmp_path, method):
    pytest.importorskip("numpy")
    head = str(tmp_path / "wide")
    write_head(method, head, hidden=64)
    out = refused_start('{"method": "%s", "model": "%s", "num_speculative_tokens": 3}' % (method, head))
    assert "hidden_size 64 differs from the target's hidden_size 576" in out, out[-2000:]


@pytest.mark.parametrize("method", ["eagle3", "eagle"])
def test_an_eagle_head_config_key_it_would_ignore_refuses_to_start(tmp_path, method):
    pytest.importorskip("numpy")
    head = str(tmp_path / "mlp_bias")
    write_head(method, head)
    with open(os.path.join(head, "config.json")) as f:
        config = json.load(f)
    config["mlp_bias"] = True
    with open(os.path.join(head, "config.json"), "w") as f:
        json.dump(config, f)
    out = refused_start('{"method": "%s", "model": "%s", "num_speculative_tokens": 3}' % (method, head))
    assert "'mlp_bias': true is not supported" in out, out[-2000:]


def test_an_eagle3_head_given_as_method_eagle_refuses_to_start(tmp_path):
    pytest.importorskip("numpy")
    head = str(tmp_path / "e3")
    write_eagle3_head(head)
    out = refused_start('{"method": "eagle", "model": "%s", "num_speculative_tokens": 3}' % head)
    assert 'is an EAGLE-3 head: speculative method \"eagle3\"' in out, out[-2000:]
