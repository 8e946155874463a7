#!/usr/bin/env python3
"""`kvasir tokenize` / `detokenize` / `render-template` on vocabulary-only GGUF files (ctest:
tokenizer_cli_test). Loading a tokenizer must need only the tokenizer's own fields, so these
work on files of architectures the model code cannot run:

  - every GGUF in ../shared/testdata/tokenizer (bert, falcon, gpt2, mpt, phi3, llama vocab-only
    files): a spread of llama.cpp's test strings must give the ids in the matching .out file
    (all 46 are checked through the library by tokenizer_vocab_test; here the CLI's loading and
    I/O are under test), and the ids must detokenize back where the tokenizer round-trips;
  - vocabulary-only files written here with general.architecture starcoder2 and refact;
  - an unknown tokenizer.ggml.pre is an error with a message, not a crash.

Usage: tokenize_cli_test.py KVASIR_BINARY. Exit 77 (ctest: skipped) without the shared data.
"""
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEP = "\n__ggml_vocab_test__\n"
# llama.cpp test strings to run per file: plain words, umlaut, empty, newline, punctuation,
# multi-space, Vietnamese, digits, and the long mixed whitespace / emoji / code one.
PICK = [0, 1, 2, 7, 11, 13, 26, 33, 40, 43, 45]
ROUND_TRIP = {"llama-spm", "phi-3", "gpt-2", "falcon", "deepseek-coder", "mpt"}  # not bert (lowercases)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, timeout=300)


def testdata_dir():
    env = os.environ.get("KVASIR_SHARED_TESTDATA")
    for d in ([os.path.join(env, "tokenizer")] if env else []) + [
              os.path.join(ROOT, "..", "shared", "testdata", "tokenizer"),
              os.path.join(ROOT, "shared", "testdata", "tokenizer")]:
        if os.path.exists(os.path.join(d, "MANIFEST.md")):
            return d
    return None


def tokenize(binary, model, text, tmp):
    path = os.path.join(tmp, "input.txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    r = run(binary, "tokenize", "--model", model, "--file", path)
    return r, [int(x) for x in r.stdout.split()] if r.returncode == 0 else None


def check_shared_vocabs(binary, tmp):
    d = testdata_dir()
    if d is None:
        return False
    files = sorted(f for f in os.listdir(d) if f.endswith(".gguf"))
    check(len(files) >= 7, f"expected the 7 vocabulary GGUFs in {d}, found {files}")
    for name in files:
        path = os.path.join(d, name)
        with open(path + ".inp", encoding="utf-8", newline="") as f:
            inputs = f.read()[: -len(SEP)].split(SEP)
        with open(path + ".out", encoding="utf-8") as f:
            outputs = [[int(x) for x in line.split()] for line in f.read().split("\n")[:-1]]
        family = name[len("ggml-vocab-"):-len(".gguf")]
        for i in PICK:
            r, ids = tokenize(binary, path, inputs[i], tmp)
            check(r.returncode == 0, f"{name} test {i}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
            check(ids == outputs[i], f"{name} test {i} {inputs[i][:40]!r}: got {ids}, want {outputs[i]}")
            if family in ROUND_TRIP and outputs[i]:
                r = run(binary, "detokenize", "--model", path, *[str(x) for x in outputs[i]])
                check(r.returncode == 0 and r.stdout.decode("utf-8")[:-1] == inputs[i],
                      f"{name} test {i}: detokenize gave {r.stdout[:80]!r} ({r.stderr[:200]!r})")
    return True


# A minimal GGUF v3 writer: metadata only, no tensors.
def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def write_vocab_gguf(path, architecture, pre, tokens, merges):
    kvs = [
        ("general.architecture", struct.pack("<I", 8) + gguf_string(architecture)),
        ("tokenizer.ggml.model", struct.pack("<I", 8) + gguf_string("gpt2")),
        ("tokenizer.ggml.pre", struct.pack("<I", 8) + gguf_string(pre)),
        ("tokenizer.ggml.tokens", struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(gguf_string(t) for t in tokens)),
        ("tokenizer.ggml.merges", struct.pack("<IIQ", 9, 8, len(merges)) + b"".join(gguf_string(m) for m in merges)),
        ("tokenizer.ggml.eos_token_id", struct.pack("<II", 4, len(tokens) - 1)),
    ]
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(gguf_string(k) + v for k, v in kvs)
    data += b"\0" * (-len(data) % 32)
    with open(path, "wb") as f:
        f.write(data)


def byte_level_alphabet():
    """GPT-2's byte -> printable code point table; token i is byte i."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = 0
    table = {}
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def check_unknown_architectures(binary, tmp):
    tokens = byte_level_alphabet() + ["he", "ll", "hell", "hello", "<|endoftext|>"]
    merges = ["h e", "l l", "he ll", "hell o"]
    for arch, pre in (("starcoder2", "starcoder"), ("refact", "refact")):
        path = os.path.join(tmp, f"vocab-{arch}.gguf")
        write_vocab_gguf(path, arch, pre, tokens, merges)
        # \p{N} is split off first, so each digit is a word; "hello" merges to one token.
        r, ids = tokenize(binary, path, "hello 12", tmp)
        check(r.returncode == 0, f"{arch}: tokenize exit {r.returncode}: {r.stderr.decode(errors='replace')}")
        check(ids == [259, 32, 49, 50], f"{arch}: tokenize 'hello 12' gave {ids}, want [259, 32, 49, 50]")
        r = run(binary, "detokenize", "--model", path, "259", "32", "49", "50")
        check(r.returncode == 0 and r.stdout == b"hello 12\n", f"{arch}: detokenize gave {r.stdout!r} {r.stderr!r}")
        # render-template needs only the tokenizer (eos name) and the template.
        tmpl = os.path.join(tmp, "t.jinja")
        msgs = os.path.join(tmp, "m.json")
        with open(tmpl, "w") as f:
            f.write("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ eos_token }}")
        with open(msgs, "w") as f:
            f.write('[{"role": "user", "content": "hi"}]')
        r = run(binary, "render-template", "--model", path, "--chat-template", tmpl, "--messages", msgs)
        check(r.returncode == 0 and r.stdout == b"<user>hi<|endoftext|>",
              f"{arch}: render-template gave {r.stdout!r} {r.stderr!r}")
    # The model itself cannot run; the error says why, it does not crash.
    r = run(binary, "generate", "--model", os.path.join(tmp, "vocab-refact.gguf"), "--prompt", "hi", "--max-tokens", "1")
    check(r.returncode not in (0, -6, -11) and b"refact" in r.stderr,
          f"generate on a vocabulary-only refact file: exit {r.returncode}, {r.stderr[-300:]!r}")
    path = os.path.join(tmp, "vocab-unknown-pre.gguf")
    write_vocab_gguf(path, "starcoder2", "no-such-pre", tokens, merges)
    r, _ = tokenize(binary, path, "hello", tmp)
    check(r.returncode == 1 and b"pre-tokenizer 'no-such-pre' is not supported" in r.stderr,
          f"unknown pre: exit {r.returncode}, {r.stderr!r}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        check_unknown_architectures(binary, tmp)
        shared = check_shared_vocabs(binary, tmp)
    if failures:
        print(f"{len(failures)} failures")
        sys.exit(1)
    if not shared:
        print("no shared/testdata/tokenizer beside the checkout: only the generated files were checked")
        sys.exit(77)
    print("ok")


if __name__ == "__main__":
    main()
