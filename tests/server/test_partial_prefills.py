"""vLLM's --max-num-partial-prefills / --max-long-partial-prefills / --long-prefill-token-threshold
on `kvasir serve`: vLLM's config rules refuse bad combinations at start with its messages, and a
server under the limits serves long and short prompts side by side (the per-step limits are
pinned down by src/sched/scheduler_partial_prefill_test.cpp)."""
import concurrent.futures
import json
import subprocess

import httpx
import pytest

from conftest import MODEL_NAME, Server, kvasir_bin

CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "max_position_embeddings": 1024, "tie_word_embeddings": True,
          "eos_token_id": 2, "bos_token_id": 1}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("partial") / "config.json"
    p.write_text(json.dumps(CONFIG))
    return str(p)


@pytest.mark.parametrize("flags, message", [
    (["--max-num-partial-prefills", "2", "--max-long-partial-prefills", "3"],
     "max_long_partial_prefills (3) must be greater than or equal to 1 and less than or equal to "
     "max_num_partial_prefills (2)"),
    (["--max-num-partial-prefills", "0"], "max_num_partial_prefills (0) must be greater than or equal to 1"),
    (["--max-num-partial-prefills", "2", "--long-prefill-token-threshold", "2000"],
     "long_prefill_token_threshold (2000) cannot be greater than the max_model_len (1024)"),
    (["--max-long-partial-prefills", "-1"], "must be in [1, 1048576]"),
])
def test_bad_combinations_are_refused_at_start(config_path, flags, message):
    r = subprocess.run([kvasir_bin(), "serve", "--model", config_path, "--load-format", "dummy", "--device", "cpu",
                        "--threads", "1", "--port", "1", *flags], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_long_and_short_prompts_are_served_under_the_limits(config_path):
    s = Server("--model", config_path, "--load-format", "dummy", "--device", "cpu", "--threads", "1",
               "--max-num-partial-prefills", "3", "--max-long-partial-prefills", "1",
               "--long-prefill-token-threshold", "64", max_model_len=1024)
    try:
        def complete(n):
            body = {"model": MODEL_NAME, "prompt": [5 + i % 400 for i in range(n)], "max_tokens": 4,
                    "ignore_eos": True}
            r = httpx.post(s.base + "/v1/completions", json=body, timeout=300)
            assert r.status_code == 200, r.text
            return r.json()["usage"]
        lens = [600, 500, 20, 700, 8, 30, 400, 3]
        with concurrent.futures.ThreadPoolExecutor(len(lens)) as pool:
            usages = list(pool.map(complete, lens))
        assert [u["prompt_tokens"] for u in usages] == lens
        assert all(u["completion_tokens"] == 4 for u in usages)
    finally:
        rc = s.stop()
    assert rc == 0, s.logs()
