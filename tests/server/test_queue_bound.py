"""The queue bound (--max-num-queued-reqs) counts sequences, prompts x n, not requests (issue 14,
finding 5): a request that alone exceeds it can never be admitted (400); one that does not fit
beside the sequences already waiting gets 429 with Retry-After; nothing of a refused request is
queued.
"""
import time

import httpx
import pytest

from conftest import MODEL_NAME, Server, assert_error_envelope

C = "/v1/completions"
CH = "/v1/chat/completions"
QUEUE_BOUND = 16


@pytest.fixture(scope="module")
def one_seq():
    # One running sequence at a time, so the sequences of later requests stay waiting. One engine
    # even under KVASIR_TEST_DATA_PARALLEL: --max-num-seqs is per replica, and a second replica
    # would run what these tests need waiting.
    s = Server("--max-num-seqs", "1", "--max-num-queued-reqs", str(QUEUE_BOUND), "--data-parallel-size", "1")
    yield s
    assert s.stop() == 0, s.logs()


def wait_for_no_waiting(server, timeout=60):
    deadline = time.time() + timeout
    while server.metric("kvasir:server_waiting_sequences") != 0:
        assert time.time() < deadline, "sequences stayed counted as waiting"
        time.sleep(0.1)


def refused_stream(http, body):
    """Posts a streaming request that must be refused; a 200 fails at once (its stream is not read:
    it could run for as long as its sequences take)."""
    with http.stream("POST", C, json={**body, "stream": True}) as r:
        assert r.status_code != 200, f"admitted: {body.get('n')} x {len(body['prompt'])} prompts"
        r.read()
        return r


def test_a_request_larger_than_the_whole_queue_bound_is_400(one_seq):
    rejected_before = one_seq.metric("kvasir:server_rejected_queue_full_total")
    with httpx.Client(base_url=one_seq.base, timeout=60) as http:
        # The shape: 1,024 prompts x n = 128 in a ~14 KB body would queue 131,072
        # sequences. Streamed, so that a server which admits it answers 200 at once.
        r = refused_stream(http, {"model": MODEL_NAME, "prompt": ["Hello"] * 1024, "n": 128, "max_tokens": 1})
        err = assert_error_envelope(r, 400)
        assert err["type"] == "invalid_request_error"
        assert "131072 sequences" in err["message"] and "--max-num-queued-reqs" in err["message"], err
        assert "retry-after" not in r.headers  # retrying cannot help
        # Small shapes too: 4 prompts x n = 8 on completions, n = 17 on chat.
        r = refused_stream(http, {"model": MODEL_NAME, "prompt": ["a", "b", "c", "d"], "n": 8, "max_tokens": 1})
        assert "32 sequences" in assert_error_envelope(r, 400)["message"]
        r = http.post(CH, json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
                                "n": QUEUE_BOUND + 1, "max_tokens": 1})
        assert_error_envelope(r, 400)
        # Exactly the bound fits an empty queue.
        r = http.post(C, json={"model": MODEL_NAME, "prompt": ["a", "b"], "n": 8, "max_tokens": 1})
        assert r.status_code == 200, r.text
        assert len(r.json()["choices"]) == QUEUE_BOUND
    assert one_seq.metric("kvasir:server_rejected_queue_full_total") == rejected_before  # no 429 counted
    wait_for_no_waiting(one_seq)


def test_the_bound_counts_the_sequences_already_waiting(one_seq):
    def stream(http, **kw):
        return http.stream("POST", C, json={"model": MODEL_NAME, "max_tokens": 1, "stream": True, **kw})

    def body(**kw):
        return {"model": MODEL_NAME, "max_tokens": 1, **kw}

    with httpx.Client(base_url=one_seq.base, timeout=60) as http:
        # A occupies the one running slot for hundreds of steps.
        with stream(http, prompt="Once upon a time", max_tokens=480, ignore_eos=True) as a:
            assert a.status_code == 200
            a_lines = a.iter_lines()  # kept: a dropped generator closes the connection (and aborts A)
            next(line for line in a_lines if line.startswith("data: "))  # A runs: none of it waits
            # B: 5 prompts x n = 2 wait behind A. Its headers come once it is admitted.
            with stream(http, prompt=["x"] * 5, n=2) as b:
                assert b.status_code == 200
                assert one_seq.metric("kvasir:server_waiting_sequences") == 10
                # C: 8 more sequences fit the bound alone but not beside B's 10.
                c = refused_stream(http, body(prompt=["y"], n=8))
                err = assert_error_envelope(c, 429)
                assert c.headers.get("retry-after") == "1"
                assert err["code"] == "rate_limit_exceeded" and "10 waiting" in err["message"], err
                # 6 fill the bound exactly.
                with stream(http, prompt="y", n=6) as d:
                    assert d.status_code == 200
                    assert one_seq.metric("kvasir:server_waiting_sequences") == QUEUE_BOUND
        # Closing the streams aborts A, B and D; nothing stays counted as waiting.
        wait_for_no_waiting(one_seq)
        r = http.post(C, json={"model": MODEL_NAME, "prompt": "y", "n": QUEUE_BOUND, "max_tokens": 1})
        assert r.status_code == 200, r.text
