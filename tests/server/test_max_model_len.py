"""max_model_len and the KV cache (issue 14, finding 6): without --max-model-len the model's length
is capped to what the cache holds (and /v1/models says so), an explicit --max-model-len past the
cache refuses to start, and a request the cache could never hold is refused at admission (400)
instead of running until the cache runs out and failing with 500.
"""
import os
import re
import signal
import subprocess
import time

import httpx
import pytest

import gguf_mutate
from conftest import MODEL, MODEL_NAME, Server, assert_error_envelope, free_port, kvasir_bin

C = "/v1/completions"


def kv_blocks_from_log(server):
    m = re.search(r"max_model_len (\d+), (\d+) KV blocks", server.logs())
    assert m, server.logs()
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def small_cache():
    # 8 MiB holds 11 blocks of 16 tokens; the model declares 8,192 tokens of context.
    s = Server("--kv-cache-memory", "8MiB", max_model_len=None)
    yield s
    assert s.stop() == 0, s.logs()


def test_max_model_len_is_capped_to_the_kv_cache_and_reported(small_cache):
    logged_len, num_blocks = kv_blocks_from_log(small_cache)
    capacity = (num_blocks - 1) * 16  # every block but the null one
    assert capacity < 8192 and logged_len == capacity
    assert "max_model_len capped from 8192" in small_cache.logs()
    models = httpx.get(small_cache.base + "/v1/models", timeout=10).json()
    assert models["data"][0]["max_model_len"] == capacity


def test_a_request_the_cache_cannot_hold_is_refused_at_admission(small_cache):
    capacity = (kv_blocks_from_log(small_cache)[1] - 1) * 16
    # Past the cache by 3 tokens, far inside the model's 8,192: it used to run ~150 steps, then 500.
    too_long = {"model": MODEL_NAME, "prompt": [1, 2, 3], "max_tokens": capacity, "ignore_eos": True}
    with httpx.Client(base_url=small_cache.base, timeout=120) as http:
        err = assert_error_envelope(http.post(C, json=too_long), 400)
        assert f"maximum context length is {capacity}" in err["message"], err
        with http.stream("POST", C, json={**too_long, "stream": True}) as r:  # 400, not 200 and an SSE error
            assert r.status_code == 400
            r.read()
            assert_error_envelope(r, 400)
        # The longest request that fits runs to its end.
        r = http.post(C, json={**too_long, "max_tokens": capacity - 3})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] == "length"
        assert r.json()["usage"]["total_tokens"] == capacity


def test_an_explicit_max_model_len_past_the_cache_refuses_to_start():
    args = [kvasir_bin(), "serve", MODEL, "--port", "0", "--kv-cache-memory", "8MiB", "--max-model-len", "8192"]
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("kvasir serve started with --max-model-len past what its KV cache holds")
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 1, out[-2000:]
    msg = out[out.rindex("kvasir serve:"):].strip()
    assert re.search(r"max_model_len 8192 is larger than the maximum number of tokens that can be stored in "
                     r"KV cache \(\d+", msg), msg


def test_a_models_declared_context_past_any_cache_is_capped(tmp_path):
    # A GGUF may declare 2^31 - 1 tokens of context: served, it is capped like the flag (2^24)
    # and then to the cache, never advertised as is.
    layout = gguf_mutate.Layout(MODEL)
    ctx = next(v for k, v in layout.kvs.items() if k.endswith(".context_length"))
    path = str(tmp_path / "huge_context.gguf")
    gguf_mutate.write_mutated(MODEL, path, [(ctx["value_at"], gguf_mutate.scalar(ctx, (1 << 31) - 1))])
    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        p = subprocess.Popen([kvasir_bin(), "serve", path, "--port", str(port), "--kv-cache-memory", "8MiB"],
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            assert p.poll() is None, log_path.read_text(errors="replace")[-2000:]
            assert time.time() < deadline, "kvasir serve did not become healthy"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        served = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()["data"][0]["max_model_len"]
        m = re.search(r"max_model_len (\d+), (\d+) KV blocks", log_path.read_text(errors="replace"))
        assert m and served == int(m.group(1)) == (int(m.group(2)) - 1) * 16, (served, m and m.group(0))
        assert "capped from the model's 2147483647 to 16777216" in log_path.read_text(errors="replace")
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, log_path.read_text(errors="replace")[-2000:]
        os.unlink(path)


def kv_cache_tokens_from_log(server):
    m = re.search(r"KV cache size: (\d+) tokens \((\d+) blocks of 16, (\S+),", server.logs())
    assert m, server.logs()
    return int(m.group(1)), m.group(3)


@pytest.mark.parametrize("dtype,element", [("fp8", "f8_e4m3"), ("fp8_e5m2", "f8_e5m2")])
def test_fp8_kv_cache_serves_and_reports_the_tokens_it_holds(dtype, element):
    # The same 8 MiB: float16 holds twice float32's tokens, FP8 twice float16's.
    tokens = {}
    for kv in ("float32", "float16", dtype):
        s = Server("--kv-cache-memory", "8MiB", "--kv-cache-dtype", kv, max_model_len=None)
        try:
            tokens[kv], logged = kv_cache_tokens_from_log(s)
            if kv == dtype:
                assert logged == element
                body = {"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 8,
                        "temperature": 0, "ignore_eos": True}
                r = httpx.post(s.base + C, json=body, timeout=60)
                assert r.status_code == 200, r.text
                assert r.json()["usage"]["completion_tokens"] == 8
        finally:
            assert s.stop() == 0, s.logs()
    # Whole blocks (one is the null block): within a block of the exact ratio.
    assert abs(tokens["float16"] - 2 * tokens["float32"]) <= 32, tokens
    assert abs(tokens[dtype] - 2 * tokens["float16"]) <= 32, tokens


def test_calculate_kv_scales_needs_an_fp8_cache():
    # vLLM accepts the flag and does nothing without an FP8 cache; a flag with no effect is refused.
    r = subprocess.run([kvasir_bin(), "serve", MODEL, "--port", "0", "--calculate-kv-scales"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--calculate-kv-scales needs an FP8 KV cache" in r.stderr, r.stderr


def test_calculate_kv_scales_serves_with_an_fp8_cache():
    # The scales come from the first batch's K and V (the golden tests check their values and the
    # logits); here the flag reaches the engine and requests are served.
    s = Server("--kv-cache-memory", "8MiB", "--kv-cache-dtype", "fp8", "--calculate-kv-scales", max_model_len=None)
    try:
        for prompt in ("The capital of France is", "Count: one, two,"):
            body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
            r = httpx.post(s.base + C, json=body, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] == 8
    finally:
        assert s.stop() == 0, s.logs()
