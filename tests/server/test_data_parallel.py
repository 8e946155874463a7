"""Data parallelism (--data-parallel-size 2): two whole engine replicas behind one server.

Routing: a prompt whose prefix one replica's prefix cache holds goes to that replica (shown by the
per-replica series engine="i" of /metrics: its prefix-cache hits grow, the other's do not); prompts
with nothing cached spread over both (least loaded, ties alternating). n > 1, client disconnects
(KV freed on the right replica), the totals beside the per-replica series, a replica's fault
failing the group (/health 503), and the flag's refusals. The rest of the suite runs against two
replicas with KVASIR_TEST_DATA_PARALLEL=2 (conftest.py; scripts/test.sh runs a named subset).
"""
import concurrent.futures
import json
import subprocess
import time

import httpx
import pytest

from conftest import MODEL, MODEL_NAME, Server, assert_error_envelope, kvasir_bin

C = "/v1/completions"
ENGINES = (0, 1)


@pytest.fixture(scope="module")
def dp():
    s = Server("--data-parallel-size", "2")
    yield s
    rc = s.stop()
    assert rc == 0, f"kvasir serve exited with {rc}:\n{s.logs()}"


def per_engine(server, name, extra=""):
    """[replica 0's, replica 1's] value of series `name` (labels beyond model_name in `extra`)."""
    m = server.metrics(per_engine=True)
    out = []
    for i in ENGINES:
        key = f'{name}{{model_name="{MODEL_NAME}",engine="{i}"{extra}}}'
        assert key in m, (key, sorted(k for k in m if k.startswith(name)))
        out.append(m[key])
    return out


def finished(server):
    """Requests finished per replica (every finish reason)."""
    return [sum(v) for v in zip(*(per_engine(server, "kvasir:request_success_total", f',finished_reason="{r}"')
                                   for r in ("stop", "length", "abort", "error")))]


def delta(after, before):
    return [a - b for a, b in zip(after, before)]


def complete(server, prompt, max_tokens=2, **kw):
    r = httpx.post(server.base + C, json={"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens,
                                          "temperature": 0, **kw}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def long_prefix(tag):
    # ~250 tokens: many full 16-token blocks, distinct per test so no test sees another's cache.
    words = " ".join(f"{tag}{i}" for i in range(80))
    return f"Document {tag}: {words}. "


def test_shared_long_prefixes_go_to_the_replica_that_caches_them(dp):
    prefix = long_prefix("alpha")
    hits0, done0 = per_engine(dp, "kvasir:prefix_cache_hits_total"), finished(dp)
    for q in range(5):
        complete(dp, prefix + f"Question {q}: what is item {q}?")
    hits, done = delta(per_engine(dp, "kvasir:prefix_cache_hits_total"), hits0), delta(finished(dp), done0)
    home = 0 if done[0] else 1
    assert sorted(done) == [0, 5], f"every request with the shared prefix on one replica: {done}"
    # Requests 2..5 found the prefix there (its full blocks, ~250 tokens each time); the other
    # replica found nothing.
    assert hits[home] >= 4 * 160, hits
    assert hits[1 - home] == 0, hits


def test_two_prefixes_can_live_on_different_replicas_and_each_keeps_its_own(dp):
    a, b = long_prefix("bravo"), long_prefix("charlie")
    done0 = finished(dp)
    complete(dp, a + "first")
    where_a = [i for i, d in enumerate(delta(finished(dp), done0)) if d]
    complete(dp, b + "first")
    d1 = finished(dp)
    where_b = [i for i, d in enumerate(delta(d1, done0)) if d and i not in where_a] or where_a
    for _ in range(3):
        complete(dp, a + "again")
    assert delta(finished(dp), d1)[where_a[0]] == 3, "prefix a stays on its replica"
    d2 = finished(dp)
    for _ in range(3):
        complete(dp, b + "again")
    assert delta(finished(dp), d2)[where_b[0]] == 3, "prefix b stays on its replica"


def test_distinct_prompts_spread_over_both_replicas(dp):
    words = ["Apples", "Rivers", "Mountains", "Violins", "Engines", "Forests", "Oceans", "Lanterns"]
    done0 = finished(dp)
    for w in words:  # one at a time: ties between idle replicas alternate
        complete(dp, f"{w} are", max_tokens=2)
    sequential = delta(finished(dp), done0)
    assert sequential[0] >= 3 and sequential[1] >= 3, sequential
    done1 = finished(dp)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # at once: the least loaded replica
        list(pool.map(lambda w: complete(dp, f"Tell me about {w.lower()}", max_tokens=8), words))
    together = delta(finished(dp), done1)
    assert together[0] >= 2 and together[1] >= 2, together


def test_n_children_stay_on_one_replica_and_share_the_prompt(dp):
    done0 = finished(dp)
    out = complete(dp, long_prefix("delta") + "Continue:", max_tokens=4, n=3, temperature=1.0, seed=7)
    assert len(out["choices"]) == 3
    d = delta(finished(dp), done0)
    assert sorted(d) == [0, 3], d


def test_totals_are_the_sum_of_the_replica_series(dp):
    complete(dp, "Totals check", max_tokens=2)
    totals = dp.metrics()
    for name in ("kvasir:prompt_tokens_total", "kvasir:generation_tokens_total", "kvasir:prefix_cache_queries_total"):
        total = totals[f'{name}{{model_name="{MODEL_NAME}"}}']
        assert total == sum(per_engine(dp, name)) and total > 0, name
    m = dp.metrics(per_engine=True)
    for i in ENGINES:
        assert f'kvasir:num_requests_running{{model_name="{MODEL_NAME}",engine="{i}"}}' in m
        assert f'kvasir:e2e_request_latency_seconds_count{{model_name="{MODEL_NAME}",engine="{i}"}}' in m
    assert totals[f'kvasir:e2e_request_latency_seconds_count{{model_name="{MODEL_NAME}"}}'] == sum(
        per_engine(dp, "kvasir:e2e_request_latency_seconds_count"))


def test_a_client_that_hangs_up_frees_its_replicas_blocks(dp):
    aborted0 = per_engine(dp, "kvasir:request_success_total", ',finished_reason="abort"')
    with httpx.Client(base_url=dp.base, timeout=60) as c:
        with c.stream("POST", C, json={"model": MODEL_NAME, "prompt": "Write a long story:", "max_tokens": 400,
                                       "temperature": 0, "ignore_eos": True, "stream": True}) as r:
            assert r.status_code == 200
            for n, _ in enumerate(r.iter_lines()):
                if n >= 3:
                    break  # leave mid-stream: the connection closes here
    deadline = time.time() + 30
    while time.time() < deadline:
        usage = per_engine(dp, "kvasir:kv_cache_usage_perc")
        running = per_engine(dp, "kvasir:num_requests_running")
        if usage == [0, 0] and running == [0, 0]:
            break
        time.sleep(0.1)
    assert usage == [0, 0] and running == [0, 0], (usage, running)
    assert sum(delta(per_engine(dp, "kvasir:request_success_total", ',finished_reason="abort"'), aborted0)) == 1


def test_tokenize_and_models_answer_as_with_one_engine(dp):
    r = httpx.post(dp.base + "/tokenize", json={"model": MODEL_NAME, "prompt": "Hello world"}, timeout=30)
    assert r.status_code == 200 and r.json()["count"] > 0, r.text
    assert httpx.get(dp.base + "/v1/models", timeout=30).json()["data"][0]["id"] == MODEL_NAME


def test_greedy_text_equals_one_engines(dp):
    one = Server()
    try:
        for p in ("The capital of France is", long_prefix("foxtrot") + "Summary:"):
            want = complete(one, p, max_tokens=12)["choices"][0]["text"]
            for _ in range(2):  # both replicas (the second lands on the cached one, or alternates)
                assert complete(dp, p, max_tokens=12)["choices"][0]["text"] == want
    finally:
        assert one.stop() == 0


def test_one_replica_failing_fails_the_group():
    # Both replicas count their own steps; the first to reach 12 fails and takes the other down.
    s = Server("--data-parallel-size", "2", env={"KVASIR_TEST_FAULT_AFTER_STEPS": "12"})
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda i: httpx.post(s.base + C, json={
                "model": MODEL_NAME, "prompt": f"Story number {i}:", "max_tokens": 60, "temperature": 0,
                "ignore_eos": True}, timeout=120), range(4)))
        assert all(r.status_code == 500 for r in outs), [r.status_code for r in outs]
        for r in outs:
            msg = r.json()["error"]["message"]
            assert "KVASIR_TEST_FAULT_AFTER_STEPS" in msg, msg
        deadline = time.time() + 5
        while time.time() < deadline and httpx.get(s.base + "/health", timeout=5).status_code != 503:
            time.sleep(0.05)
        h = httpx.get(s.base + "/health", timeout=5)
        assert h.status_code == 503 and "data-parallel replica" in h.text, h.text
        err = assert_error_envelope(httpx.post(s.base + C, json={"model": MODEL_NAME, "prompt": "x", "max_tokens": 2},
                                               timeout=10), 503)
        assert "data-parallel replica" in err["message"]
        m = s.metrics(per_engine=True)
        assert m[f'kvasir:request_success_total{{model_name="{MODEL_NAME}",finished_reason="error"}}'] == 4
    finally:
        assert s.stop(timeout=30) == 0, s.logs()


def run_serve(*args):
    return subprocess.run([kvasir_bin(), "serve", *args], capture_output=True, text=True, timeout=60)


def test_flag_refusals_and_help():
    p = run_serve("--help")
    assert p.returncode == 0 and "--data-parallel-size N" in p.stdout + p.stderr
    assert "least loaded" in p.stdout + p.stderr
    for bad in ("0", "65"):
        p = run_serve(MODEL, "--data-parallel-size", bad)
        assert p.returncode != 0 and "--data-parallel-size must be in [1, 64]" in p.stderr, p.stderr[-2000:]
    p = run_serve(MODEL, "--data-parallel-size", "2", "--tensor-parallel-size", "3")
    assert p.returncode != 0
    assert "--data-parallel-size with --tensor-parallel-size > 1 is not supported yet" in p.stderr, p.stderr[-2000:]
    assert "tensor-parallel worker" not in p.stderr
    p = run_serve(MODEL, "--data-parallel-size", "2", "--device", "cuda")
    assert p.returncode != 0 and "CPU backend only" in p.stderr, p.stderr[-2000:]
