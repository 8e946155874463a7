"""`kvasir bench serve` against a real `kvasir serve`: a few streamed requests on both endpoints,
then the JSON result must count them right (no failures, exact token totals with --ignore-eos)."""
import json
import os
import subprocess

import pytest

from conftest import MODEL, MODEL_NAME, kvasir_bin

# shared/ sits beside the checkout, or where $KVASIR_SHARED_TESTDATA says (scripts/test.sh sets it).
_SHARED = os.environ.get("KVASIR_SHARED_TESTDATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "testdata")
PROMPTS = os.path.join(_SHARED, "prompts", "vicuna_bench_questions.jsonl")


def run_bench(server, tmp_path, *extra):
    out = tmp_path / "result.json"
    cmd = [kvasir_bin(), "bench", "serve", "--base-url", server.base, "--model", MODEL_NAME,
           "--output-json", str(out), "--save-detailed", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_random_completions_counts_exact_tokens(server, tmp_path):
    proc, res = run_bench(server, tmp_path, "--num-prompts", "6", "--random-input-len", "24",
                          "--random-output-len", "8", "--max-concurrency", "3", "--ignore-eos",
                          "--tokenizer", MODEL, "--seed", "7")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    assert res["completed"] == 6 and res["failed"] == 0
    assert res["total_output_tokens"] == 6 * 8
    assert res["output_lens"] == [8] * 6
    assert res["num_output_len_mismatch"] == 0
    # With --tokenizer the random prompts are exactly --random-input-len tokens (the server's usage).
    assert res["input_lens"] == [24] * 6 and res["total_input_tokens"] == 6 * 24
    assert res["max_concurrency"] == 3 and res["request_rate"] == "inf"
    # One chunk per token (8 tokens, 7 gaps), except that a token ending inside a multi-byte
    # character adds no text until the character completes, so non-ASCII output (sampled, so it
    # varies run to run) may arrive in fewer chunks.
    for itl, text in zip(res["itls"], res["generated_texts"]):
        if text.isascii():
            assert len(itl) == 7, (itl, text)
        else:
            assert 1 <= len(itl) <= 7, (itl, text)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p90", "p99"):
            assert res[f"{stat}_{metric}_ms"] > 0, (metric, stat)
    assert res["mean_e2el_ms"] >= res["mean_ttft_ms"]
    assert res["duration"] > 0 and res["request_throughput"] > 0


def test_prompts_file_on_chat_endpoint_with_poisson_arrivals(server, tmp_path):
    if not os.path.exists(PROMPTS):
        pytest.skip(f"{PROMPTS} not present")
    proc, res = run_bench(server, tmp_path, "--endpoint", "/v1/chat/completions", "--dataset-name", "prompts",
                          "--dataset-path", PROMPTS, "--num-prompts", "4", "--prompts-output-len", "6",
                          "--ignore-eos", "--request-rate", "20", "--goodput", "ttft:600000", "e2el:600000",
                          "--metric-percentiles", "50,99.9", "--percentile-metrics", "ttft,e2el")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert res["completed"] == 4 and res["failed"] == 0
    assert res["total_output_tokens"] == 4 * 6
    assert res["request_goodput"] > 0
    assert "p99.9_ttft_ms" in res and "p50_e2el_ms" in res and "mean_tpot_ms" not in res
    assert res["total_input_tokens"] > 4 * 10  # chat-templated prompts, counted by the server


def test_unreachable_server_fails_fast(tmp_path):
    proc = subprocess.run([kvasir_bin(), "bench", "serve", "--base-url", "http://127.0.0.1:1", "--num-prompts", "1",
                           "--random-input-len", "4", "--random-output-len", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "initial test run failed" in proc.stderr


def test_help_lists_the_vllm_flags():
    proc = subprocess.run([kvasir_bin(), "bench", "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    for flag in ("--base-url", "--endpoint", "--dataset-name", "--random-input-len", "--request-rate",
                 "--max-concurrency", "--ignore-eos", "--goodput", "--percentile-metrics", "--metric-percentiles",
                 "--output-json", "--save-result", "--result-dir", "--result-filename", "--random-prefix-len",
                 "--random-range-ratio"):
        assert flag in proc.stdout, flag
