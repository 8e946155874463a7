"""`kvasir render-template` prints exactly the prompt the server renders (no trailing newline)."""
import json
import subprocess

import httpx

from conftest import MODEL, kvasir_bin

SMOL_PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
               "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def render(tmp_path, messages, *args):
    f = tmp_path / "messages.json"
    f.write_text(json.dumps(messages))
    r = subprocess.run([kvasir_bin(), "render-template", "--model", MODEL, "--messages", str(f), *args],
                       capture_output=True, timeout=60)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def test_model_template_exact(tmp_path):
    rc, out, err = render(tmp_path, [{"role": "user", "content": "Hi"}], "--add-generation-prompt")
    assert rc == 0, err
    assert out == SMOL_PROMPT
    rc, out, _ = render(tmp_path, [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    assert out == SMOL_PROMPT[:-len("<|im_start|>assistant\n")]


def test_custom_template_vars_and_tools(tmp_path):
    t = tmp_path / "t.jinja"
    t.write_text("{{ greeting }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                 "{{ tools | length }}{% if add_generation_prompt %}>{% endif %}")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "f"}}]))
    rc, out, err = render(tmp_path, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                          "--chat-template", str(t), "--tools", str(tools), "--var", 'greeting="yo"',
                          "--add-generation-prompt")
    assert rc == 0, err
    assert out == "yo[user:a][assistant:b]1>"


def test_errors(tmp_path):
    rc, _, err = render(tmp_path, [])
    assert rc != 0 and "messages" in err
    rc, _, err = render(tmp_path, [{"role": "user", "content": "x"}], "--var", "novalue")
    assert rc != 0


def test_matches_server_tokenize(tmp_path, http):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hello there"}]
    rc, out, _ = render(tmp_path, msgs, "--add-generation-prompt")
    assert rc == 0
    served = http.post("/tokenize", json={"messages": msgs}).json()["tokens"]
    direct = http.post("/tokenize", json={"prompt": out, "add_special_tokens": False}).json()["tokens"]
    assert served == direct
