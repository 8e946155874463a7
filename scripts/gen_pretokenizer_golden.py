#!/usr/bin/env python3
"""Golden pre-tokenizer splits from HF `tokenizers`, for src/tokenizer/pre_tokenizer_golden_test.cpp.

Writes tests/data/tokenizer/pretokenizer_golden.json:
  - "corpus": Unicode-heavy texts (scripts, combining marks, emoji ZWJ sequences, digits of many
    scripts, whitespace variants, contractions, code) plus llama.cpp's 46 tokenizer test inputs;
  - "regex_families": for every GGUF `tokenizer.ggml.pre` name Kvasir knows (taken from
    `kvasir tokenize --list-pre-tokenizers`, so the C++ table is the one source), the regexes and
    the pieces HF's Split(Regex, "isolated") sequence cuts each corpus text into;
  - "builtin": the same for HF's ByteLevel(use_regex=True) and Whitespace pre-tokenizers, which
    src/tokenizer/pre_tokenizers.cpp emulates with its own regexes;
  - "encode": for every byte-level BPE and BERT WordPiece GGUF vocabulary in
    ../shared/testdata/tokenizer, the ids a full HF tokenizer (that vocabulary, its regexes and
    ByteLevel, or BertNormalizer/BertPreTokenizer/WordPiece) gives each corpus text. Before
    writing, the same HF tokenizer must reproduce llama.cpp's expected ids (.inp/.out) there, so
    the regexes are checked against the real tokenizers, not only against themselves.

Needs `tokenizers` and `gguf` (pip) at generation time only; CI reads the committed JSON.
Usage: scripts/gen_pretokenizer_golden.py [--kvasir build/tools/kvasir] [--testdata DIR]
"""
import argparse
import json
import os
import subprocess
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "pretokenizer_golden.json")

CORPUS = [
    # Latin with precomposed and combining marks, contractions, case.
    "Hello world! Don't stop: it's 'quoted' and WE'LL see, y'all've O'Neill's.",
    "I'M HERE, you're there; THEY'RE gone. We'D'VE ' s 'S 'll",
    "Cafe\u0301 na\u00efve co\u00f6perate r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u212bngstr\u00f6m Z\u0351\u036b\u0343a\u0310lgo",
    "Stra\u00dfe STRASSE \u0130stanbul \u0131d\u0131 \ufb01ne \ufb00 \u01c5ungla \u1e9e",
    "C\u1eeda Vi\u1ec7t \u0110\u00e0 N\u1eb5ng ti\u1ebfng Vi\u1ec7t",
    # Greek, including the letters NFC folds into others (the deepseek-llm class lists them).
    "\u1f7d\u1fd3\u1fdb\u1fbe \u2126\u212a \u03ce\u0390\u038a\u03b9 \u03a9K \u1f00\u03bb\u03c6\u03b1 \u0391\u0398\u0397\u039d\u0391",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5! \u1f08\u03c1\u03b9\u03c3\u03c4\u03bf\u03c4\u03ad\u03bb\u03b7\u03c2",
    # Cyrillic, Armenian, Georgian, Cherokee.
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0401\u0436\u0438\u043a \u0419\u043e\u0433\u0443\u0440\u0442 \u0531\u0562\u0563 \u10d0\u10d1\u10d2 \u13a0\u13a1\u13a2",
    # CJK, kana, Hangul, full-width forms and CJK punctuation.
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u6211\u7231\u7f16\u7a0b\u3002\u300c\u5f15\u7528\u300d\u3001\u4e2d\u6587\uff08\u62ec\u53f7\uff09",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u30fc\u30fb",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \u1100\u1161\u11a8 \u3131\u314f",
    "\uff21\uff22\uff23\uff41\uff42\uff43 \uff11\uff12\uff13 \uff01\uff1f\uff0f\uff1a\uff5e \u2018single\u2019 \u201cdouble\u201d",
    "\u9fa5\u9fa6\u4e00\u4dff\u0800\u0801 \ud7ff\uac00 \u3040\u309f\u30a0\u30ff",
    # Right-to-left scripts.
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f \u0661\u0662\u0663 \u06f4\u06f5\u06f6\u06d4",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! \u05d0\u05b8\u05dc\u05b6\u05e3\u200f \u05d1\u05bc",
    # Indic, Thai, Khmer, Ethiopic.
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e\u0964 \u0939\u093f\u0928\u094d\u0926\u0940 \u0967\u0968\u0969 \u0915\u094d\u0937",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e51\u0e52\u0e53 \u0e40\u0e14\u0e47\u0e01\u0e46",
    "\u1780\u17b6\u1793\u17cb\u178f\u17c2\u1796\u17b7\u179f\u17c1\u179f \u1230\u120b\u121d \u1369\u136a\u136b",
    # Emoji: ZWJ families, skin tones, flags, keycaps, variation selectors.
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f44d\U0001f3fd \U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5 1\ufe0f\u20e3 \u2764\ufe0f \U0001f3f3\ufe0f\u200d\U0001f308",
    "\U0001f9d1\U0001f3ff\u200d\U0001f4bb coding\U0001f680launch!! \U0001f600\U0001f603 a\U0001f642b",
    # Digits of many scripts, numbers of every length, fractions and superscripts.
    "0 12 345 6789 1234567890 3.14159 -42 1e10 0x1F \u00bd \u00b2\u00b3 \u2167 \u2460 \u0663\u0664 \u096a\u096b \u0e54 \uff14\uff15 \U0001d7ce\U0001d7cf",
    "ied 4 \u00bd months, 12,345.67 and 1/2/2024 at 10:30pm",
    # Whitespace variants: NBSP, ideographic, em space, tabs, CR LF, trailing runs, zero-width.
    "a\u00a0b\u3000c\u2003d\u2009e\u202ff\u205fg\u1680h\u180ei\u200bj\u2028k\u2029l\u0085m",
    "line one\r\nline two\r\n\r\n\tindented\n    spaced   \n\n\n",
    "   leading and trailing   ",
    "\t\t\n \n\u00a0\n\u3000 x",
    "trailing spaces    ",
    "",
    " ",
    "\n",
    # Code.
    "def f(x):\n    return x**2 + 1  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] >> 2; } // C++\n#include <vector>\n",
    "const s = `${a}+${b}`; $var = @array{'key'} || ~0 ^ 1; x != y && z <= w",
    "<html><body class=\"x\">&amp;&lt;</body></html> https://example.com/a?b=c&d=e#f",
    "SELECT * FROM t WHERE id = 42 AND name LIKE '%foo%';",
    # Punctuation and symbols runs.
    "!!!??? ... \u2026 --- \u2014\u2013 \u00bf\u00a1 \u00ab\u00bb \u2039\u203a \u00a7\u00b6 \u2020\u2021 \u20ac$\u00a3\u00a5 \u00a9\u00ae\u2122",
    "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u21d2 \u221a(x\u00b2) = |x| \u2211 \u222b \u2248 \u2260",
    # Mixed and odd.
    "MixedCASEWords camelCaseIdentifier snake_case_name HTTPServer XMLHttpRequest iPhone",
    "a'b 'tis rock'n'roll don\u2019t it\u2019s 'S 'T 'RE 'VE 'M 'LL 'D",
    "\u00e9\u0301\u0302\u0303 \u0308\u0308\u0308 x\u0338 \u20dd\u20de",
    "\ufeffBOM start \ufffd replacement \U0010fffd private \ue000",
]


def llamacpp_inputs(path):
    """The .inp format (testdata MANIFEST.md): every text followed by the separator."""
    data = open(path, encoding="utf-8", newline="").read()
    sep = "\n__ggml_vocab_test__\n"
    assert data.endswith(sep), path
    return data[: -len(sep)].split(sep)


def split_sequence(regexes):
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in regexes])


def splits(pre, corpus):
    return [[piece for piece, _ in pre.pre_tokenize_str(text)] for text in corpus]


def read_gguf_vocab(path):
    import gguf  # generation-time only
    r = gguf.GGUFReader(path)

    def field(name):
        f = r.fields.get(name)
        if f is None:
            return None
        if len(f.data) == 1 and f.types[0] != gguf.GGUFValueType.ARRAY:
            v = f.parts[f.data[0]]
            return bytes(v).decode("utf-8") if f.types[-1] == gguf.GGUFValueType.STRING else v[0]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    types = r.fields.get("tokenizer.ggml.token_type")
    types = [int(types.parts[i][0]) for i in types.data] if types is not None else []
    return field("tokenizer.ggml.model"), field("tokenizer.ggml.pre"), field("tokenizer.ggml.tokens"), \
        field("tokenizer.ggml.merges"), types


def hf_bpe_tokenizer(tokens, merges, types, regexes):
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) if not m.startswith(" ") else (m[:m.index(" ", 1)], m[m.index(" ", 1) + 1:])
             for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    steps = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in regexes]
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    # Control (3) and user-defined (4) tokens are added tokens in the vocabularies' tokenizer.json
    # (GPT-NeoX's runs of spaces among them), matched in the text before the pre-tokenizer.
    specials = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3 and t]
    users = [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == 4 and t]
    tok.add_special_tokens(specials)
    tok.add_tokens(users)
    return tok


def hf_bert_tokenizer(tokens, types):
    """BERT WordPiece from llama.cpp's respelling (word starts marked with U+2581, continuations
    bare) back to HF's ("##" continuations), with HF's BERT normalizer and pre-tokenizer."""
    vocab = {}
    for i, (t, k) in enumerate(zip(tokens, types)):
        vocab.setdefault(t if k == 3 else t[1:] if t.startswith("\u2581") else "##" + t, i)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3])
    return tok


def read_expected(base):
    with open(base + ".out", encoding="utf-8") as f:
        outputs = [[int(x) for x in line.split()] for line in f.read().split("\n")[:-1]]
    return llamacpp_inputs(base + ".inp"), outputs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvasir", default=os.path.join(ROOT, "build", "tools", "kvasir"))
    ap.add_argument("--testdata", default=os.path.join(ROOT, "..", "shared", "testdata", "tokenizer"))
    args = ap.parse_args()

    listing = subprocess.run([args.kvasir, "tokenize", "--list-pre-tokenizers"], check=True,
                             capture_output=True, text=True).stdout
    by_name = json.loads(listing)
    inp = os.path.join(args.testdata, "ggml-vocab-gpt-2.gguf.inp")
    extra = llamacpp_inputs(inp) if os.path.exists(inp) else []
    corpus = CORPUS + [t for t in extra if t not in CORPUS]

    families = []
    seen = {}
    for name, regexes in by_name.items():
        key = json.dumps(regexes)
        if key in seen:
            seen[key]["names"].append(name)
            continue
        entry = {"names": [name], "regexes": regexes, "splits": splits(split_sequence(regexes), corpus)}
        seen[key] = entry
        families.append(entry)

    builtin = [
        {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
         "splits": splits(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), corpus)},
        {"pre_tokenizer": {"type": "Whitespace"}, "splits": splits(pre_tokenizers.Whitespace(), corpus)},
    ]

    encode = []
    for fname in sorted(os.listdir(args.testdata)):
        if not fname.endswith(".gguf"):
            continue
        path = os.path.join(args.testdata, fname)
        model, pre, tokens, merges, types = read_gguf_vocab(path)
        if model == "gpt2":
            tok = hf_bpe_tokenizer(tokens, merges, types, by_name[pre or "default"])
        elif model == "bert":
            tok = hf_bert_tokenizer(tokens, types)
        else:
            continue  # SentencePiece: no split regexes; tokenizer_golden_test covers it
        inputs, outputs = read_expected(path)
        got = [tok.encode(t, add_special_tokens=False).ids for t in inputs]
        bad = [i for i, (g, w) in enumerate(zip(got, outputs)) if g != w]
        if bad:
            sys.exit(f"{fname}: HF with Kvasir's '{pre}' regexes misses llama.cpp's expected ids on tests {bad}")
        encode.append({"gguf": fname, "pre": pre,
                       "ids": [tok.encode(t, add_special_tokens=False).ids for t in corpus]})
        print(f"{fname}: pre '{pre}': HF reproduces all {len(inputs)} expected ids", file=sys.stderr)

    import tokenizers
    golden = {"generator": "scripts/gen_pretokenizer_golden.py", "tokenizers_version": tokenizers.__version__,
              "corpus": corpus, "regex_families": families, "builtin": builtin, "encode": encode}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(corpus)} texts, {len(families)} regex families, {len(encode)} vocabularies",
          file=sys.stderr)


if __name__ == "__main__":
    main()
