"""`kvasir generate` takes the model's sampling defaults from its generation_config.json, as
`kvasir serve --generation-config auto` does: max_new_tokens becomes the default length and the
sampling fields replace generate's own greedy default; flags and a JSONL line's own fields win.
The model is a tiny random-weight llama (--load-format dummy) in a folder with its config."""
import json
import subprocess

import pytest

from conftest import kvasir_bin

CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": True,
          "eos_token_id": 2, "bos_token_id": 1}


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIG))
    return d


def generate(model_dir, lines, *flags):
    """Runs the JSONL mode; returns the token ids of each line's first completion."""
    inp, out = model_dir.parent / "in.jsonl", model_dir.parent / "out.jsonl"
    inp.write_text("".join(json.dumps(l) + "\n" for l in lines))
    r = subprocess.run([kvasir_bin(), "generate", "--model", str(model_dir), "--load-format", "dummy",
                        "--device", "cpu", "--threads", "1", "--kv-cache-memory", "16MiB",
                        "--input", str(inp), "--output", str(out), *flags], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    results = [json.loads(l) for l in out.read_text().splitlines()]
    for res in results:
        assert "error" not in res, res
    return [res["token_ids"] for res in results]


PROMPT = {"prompt_token_ids": [1, 2, 3], "ignore_eos": True}


def test_max_new_tokens_is_the_default_length(model_dir):
    assert [len(t) for t in generate(model_dir, [PROMPT])] == [64]  # generate's own default
    (model_dir / "generation_config.json").write_text(json.dumps({"max_new_tokens": 5}))
    lines = [PROMPT, {**PROMPT, "max_tokens": 3}]
    assert [len(t) for t in generate(model_dir, lines)] == [5, 3]
    assert [len(t) for t in generate(model_dir, lines, "--max-tokens", "7")] == [7, 3]


def test_sampling_fields_replace_the_greedy_default(model_dir):
    line = {**PROMPT, "max_tokens": 12}
    greedy = generate(model_dir, [line])[0]
    (model_dir / "generation_config.json").write_text(json.dumps({"temperature": 1.0}))
    sampled = generate(model_dir, [line])[0]
    # Random weights at temperature 1 over 256 tokens: twelve greedy picks in a row would be a
    # fluke (the engine seed is fixed, so this is not flaky once it passes).
    assert sampled != greedy
    assert generate(model_dir, [line], "--temperature", "0")[0] == greedy  # the flag wins
    assert generate(model_dir, [{**line, "temperature": 0}])[0] == greedy  # the line wins
    # Without the file, generate's own greedy default again.
    (model_dir / "generation_config.json").unlink()
    assert generate(model_dir, [line])[0] == greedy
