"""`--load-format dummy` with vLLM's `--tokenizer`: random weights of a tiny llama shape that keep
SmolLM2's real vocabulary (models/smollm2-hf), so text prompts become tokens (the dummy config's
own placeholder vocabulary turns text into none). A streamed completion works end to end, and
`kvasir bench serve --dataset-name random` drives the server with prompts whose token counts, as
the server reports them, are exactly the lengths asked for."""
import glob
import json
import os
import subprocess

import httpx
import pytest

from conftest import REPO, MODEL_NAME, Server, kvasir_bin

TOKENIZER = os.path.join(REPO, "models", "smollm2-hf")
# SmolLM2's 49,152 tokens over a model small enough to start in a second on one thread.
CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 49152, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "max_position_embeddings": 1024, "tie_word_embeddings": True,
          "eos_token_id": 2, "bos_token_id": 1}


@pytest.fixture(scope="module")
def dummy_server(tmp_path_factory):
    if not os.path.isdir(TOKENIZER):
        pytest.skip(f"{TOKENIZER} not present")
    d = tmp_path_factory.mktemp("dummy_llama")
    (d / "config.json").write_text(json.dumps(CONFIG))
    s = Server("--model", str(d / "config.json"), "--load-format", "dummy", "--tokenizer", TOKENIZER,
               "--device", "cpu", "--threads", "1", max_model_len=1024)
    yield s
    rc = s.stop()
    assert rc == 0, f"kvasir serve exited with {rc}:\n{s.logs()}"


def stream_completion(base, body):
    """Posts a streamed completion; returns (text pieces, the usage chunk)."""
    pieces, usage = [], None
    with httpx.stream("POST", base + "/v1/completions", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                if c.get("text"):
                    pieces.append(c["text"])
    return pieces, usage


def test_text_prompt_becomes_tokens_and_streams_a_completion(dummy_server):
    prompt = "The quick brown fox jumps over the lazy dog."
    tok = httpx.post(dummy_server.base + "/tokenize", json={"model": MODEL_NAME, "prompt": prompt}, timeout=30)
    assert tok.status_code == 200, tok.text
    ids = tok.json()["tokens"]
    assert 5 <= len(ids) <= 20 and max(ids) < 49152, ids  # SmolLM2's BPE, not bytes or nothing
    back = httpx.post(dummy_server.base + "/detokenize", json={"model": MODEL_NAME, "tokens": ids}, timeout=30)
    assert back.json()["prompt"] == prompt
    pieces, usage = stream_completion(dummy_server.base, {
        "model": MODEL_NAME, "prompt": prompt, "max_tokens": 12, "ignore_eos": True,
        "stream_options": {"include_usage": True}})
    assert usage is not None
    assert usage["prompt_tokens"] == len(ids)
    assert usage["completion_tokens"] == 12
    assert pieces and "".join(pieces)


def run_bench(server, tmp_path, *extra):
    cmd = [kvasir_bin(), "bench", "serve", "--base-url", server.base, "--model", MODEL_NAME,
           "--tokenizer", TOKENIZER, "--dataset-name", "random", "--ignore-eos", "--save-detailed",
           "--save-result", "--result-dir", str(tmp_path), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = glob.glob(str(tmp_path / "*.json"))
    assert len(files) == 1, files
    return proc, files[0], json.loads(open(files[0]).read())


def test_bench_serve_random_prompts_have_the_exact_token_lengths(dummy_server, tmp_path):
    proc, path, res = run_bench(dummy_server, tmp_path, "--num-prompts", "8", "--max-concurrency", "4",
                                "--random-input-len", "40", "--random-prefix-len", "10",
                                "--random-output-len", "6", "--seed", "3",
                                "--goodput", "ttft:600000", "tpot:600000", "e2el:600000",
                                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99")
    # vLLM's file name: backend, rate, concurrency, model, date.
    assert os.path.basename(path).startswith(f"openai-infqps-concurrency4-{MODEL_NAME}-"), path
    assert res["completed"] == 8 and res["failed"] == 0
    # The server's own prompt token counts: the prefix plus the input length, every request.
    assert res["input_lens"] == [50] * 8
    assert res["output_lens"] == [6] * 8 and res["num_output_len_mismatch"] == 0
    assert res["request_goodput"] == pytest.approx(res["request_throughput"])
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p50", "p99"):
            assert res[f"{stat}_{metric}_ms"] > 0, (metric, stat)
    for line in ("Request goodput (req/s):", "P99 TPOT (ms):", "Median ITL (ms):", "P50 E2EL (ms):"):
        assert line in proc.stdout, proc.stdout


def test_bench_serve_range_ratio_spreads_the_lengths(dummy_server, tmp_path):
    _, path, res = run_bench(dummy_server, tmp_path, "--num-prompts", "12", "--max-concurrency", "6",
                             "--random-input-len", "60", "--random-range-ratio", "0.5",
                             "--random-output-len", "4", "--result-filename", "spread.json")
    assert os.path.basename(path) == "spread.json"
    assert res["completed"] == 12 and res["failed"] == 0
    assert all(30 <= n <= 90 for n in res["input_lens"]), res["input_lens"]
    assert len(set(res["input_lens"])) > 3, res["input_lens"]
    # The ratio spreads the output lengths too (2..6); --ignore-eos makes each one exact.
    assert all(2 <= n <= 6 for n in res["output_lens"]) and res["num_output_len_mismatch"] == 0


def test_offline_bench_tokenizes_text_prompts_with_the_tokenizer(tmp_path):
    """`kvasir bench throughput` (the LLM API) over text prompts: with --tokenizer they are
    SmolLM2's tokens; without it the dummy vocabulary makes them empty, and the bench says so."""
    if not os.path.isdir(TOKENIZER):
        pytest.skip(f"{TOKENIZER} not present")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    prompts = ["Tell me a story about a cat.", "What is the capital of France?"]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    base = [kvasir_bin(), "bench", "throughput", "--model", str(tmp_path / "config.json"), "--load-format", "dummy",
            "--device", "cpu", "--threads", "1", "--kv-cache-memory", "32MiB", "--prompts-file",
            str(tmp_path / "p.jsonl"), "--num-prompts", "4", "--output-len", "5"]
    out = tmp_path / "tp.json"
    r = subprocess.run([*base, "--tokenizer", TOKENIZER, "--output-json", str(out)], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    counts = []
    for p in prompts:  # what the engine adds (--add-special), as LLM.generate encodes text
        t = subprocess.run([kvasir_bin(), "tokenize", "--model", TOKENIZER, "--text", p, "--add-special"],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
        assert t.returncode == 0, t.stderr
        counts.append(len(t.stdout.split()))
    assert all(c >= 5 for c in counts), counts
    assert res["input_tokens"] == 2 * sum(counts), (res, counts)
    assert res["output_tokens"] == 4 * 5
    r = subprocess.run(base, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode != 0 and "empty" in (r.stdout + r.stderr), r.stdout + r.stderr
