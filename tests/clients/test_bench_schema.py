"""`kvasir bench serve --extra-body` carries a structured-output constraint into every request,
so a schema-constrained load (vLLM's structured-output benchmark) runs with the native bench:
    kvasir bench serve --endpoint /v1/chat/completions --max-concurrency 64 --num-prompts 256 \\
        --extra-body '{"response_format": {"type": "json_schema", "json_schema": {"name": "rpg",
                       "schema": <schema>}}}'
Here: a few requests against the suite's server; every text that ended before max_tokens must
validate (the bench records texts and lengths, not finish reasons). No --ignore-eos: after the
schema's JSON is complete only EOS is allowed, so ignoring it would only measure EOS spam."""
import json
import subprocess

import jsonschema

from client_util import MODEL, MODEL_NAME, kvasir_bin, shared_path

MAX_TOKENS = 512


def test_bench_serve_with_a_schema_in_extra_body(server, tmp_path):
    schema = json.load(open(shared_path("json_schema", "realistic", "vllm-structured_schema_1.json")))
    extra = {"response_format": {"type": "json_schema", "json_schema": {"name": "rpg", "schema": schema}},
             "temperature": 0.8, "seed": 5}
    out = tmp_path / "result.json"
    cmd = [kvasir_bin(), "bench", "serve", "--base-url", server.base, "--model", MODEL_NAME, "--endpoint",
           "/v1/chat/completions", "--num-prompts", "4", "--max-concurrency", "4", "--random-input-len", "32",
           "--random-output-len", str(MAX_TOKENS), "--tokenizer", MODEL, "--seed", "3",
           "--extra-body", json.dumps(extra), "--output-json", str(out), "--save-detailed"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(out.read_text())
    assert res["completed"] == 4 and res["failed"] == 0, res.get("errors")
    finished = 0
    for text, n in zip(res["generated_texts"], res["output_lens"]):
        if n < MAX_TOKENS:
            finished += 1
            jsonschema.validate(json.loads(text), schema)
    assert finished >= 1, res["output_lens"]

