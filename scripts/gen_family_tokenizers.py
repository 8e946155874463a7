#!/usr/bin/env python3
"""Tokenizers of the model families beyond SmolLM2 and Gemma (Qwen2/Qwen3, Mistral Tekken and
SentencePiece, Phi-3, DeepSeek-LLM/V2, DeepSeek-V3, DeepSeek-Coder, GPT-OSS), rebuilt offline, and
what HF `tokenizers` does with a Unicode corpus, for src/tokenizer/tokenizer_golden_test.cpp.

    python3 scripts/gen_family_tokenizers.py   # needs tokenizers, sentencepiece, gguf (pip)

No hub access: for each family this writes the pipeline its hub tokenizer.json states (normalizer,
pre-tokenizer with the family's split regexes, model flags, decoder, post-processor, added and
special tokens, as in Qwen/Qwen3-8B, mistralai/Mistral-Nemo-Instruct-2407, Mistral-7B-v0.1 and
-v0.3, deepseek-ai/deepseek-llm-7b-base (= DeepSeek-V2's), DeepSeek-V3, deepseek-coder-6.7b-base,
openai/gpt-oss-20b) around a small vocabulary trained here on a Unicode corpus: byte-level BPE with
`tokenizers`' trainer under the family's own pre-tokenizer, SentencePiece BPE (byte fallback)
with `sentencepiece` and converted the way transformers' LlamaConverter made the hub files. Phi-3
and DeepSeek-Coder also run on their real vocabularies (the vocab-only GGUFs in
../shared/testdata/tokenizer), after checking that HF reproduces llama.cpp's expected ids there.

Per family, tests/data/tokenizer/families/<name>/ gets tokenizer.json (+ tokenizer_config.json)
and vocab.gguf: the same vocabulary as llama.cpp's convert_hf_to_gguf.py writes it
(tokenizer.ggml.pre = the name its converter writes for that family, token types from the added
tokens, merges or SentencePiece scores), so the GGUF path (Kvasir's `pre` -> regex table) is held
to HF's tokenizer.json too. tests/data/tokenizer/golden_<name>.json records, per corpus text, HF's
ids with and without special tokens and its decode of them (gen_tokenizer_golden.py's format).
Seeded: rerunning reproduces the files.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import gen_pretokenizer_golden as pretok_golden
import gen_tokenizer_golden as tok_golden

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK_DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
SHARED_TOKENIZER = os.path.join(ROOT, "..", "shared", "testdata", "tokenizer")
SHARED_PROMPTS = os.path.join(ROOT, "..", "shared", "testdata", "prompts", "mt_bench_questions.jsonl")

# The split regexes as the hub tokenizer.json files state them (not Kvasir's table: that is what
# is being checked).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
TEKKEN_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek's hand-made letter class (written escaped: an editor's NFC would fold U+2126, U+212A).
DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377"
    "\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556"
    "\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
    "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4"
    "\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+")
DEEPSEEK_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK_V3_SPLITS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"""
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
]


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def byte_level_pre(steps):
    return {"type": "Sequence", "pretokenizers": steps + [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


BYTE_LEVEL_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
BYTE_LEVEL_POST = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def template_post(bos, bos_id):
    """What LlamaTokenizerFast (add_bos_token) puts in the file: BOS before each sequence."""
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


SPM_LEGACY_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
SPM_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}

QWEN_ADDED = ([("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True)] +
              [(f"<|{n}|>", True) for n in ("object_ref_start", "object_ref_end", "box_start", "box_end",
                                            "quad_start", "quad_end", "vision_start", "vision_end",
                                            "vision_pad", "image_pad", "video_pad")] +
              [("<tool_call>", False), ("</tool_call>", False)] +
              [(f"<|{n}|>", False) for n in ("fim_prefix", "fim_middle", "fim_suffix", "fim_pad", "repo_name",
                                             "file_sep")] +
              [("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False)])
TEKKEN_SPECIALS = (["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
                    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                    "[TOOL_CONTENT]"] + [f"<SPECIAL_{i}>" for i in range(20, 32)])
BOS_DS, EOS_DS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"


def ds(name):
    return "<\uff5c" + name.replace(" ", "\u2581") + "\uff5c>"


DEEPSEEK_V3_ADDED = ([(ds(f"place holder no {i}"), True) for i in range(4)] +
                     [(ds("User"), False), (ds("Assistant"), False), ("<think>", False), ("</think>", False)] +
                     [(ds(n), True) for n in ("fim hole", "fim begin", "fim end", "tool calls begin", "tool calls end",
                                              "tool call begin", "tool call end", "tool outputs begin",
                                              "tool outputs end", "tool output begin", "tool output end", "tool sep")])
DEEPSEEK_LLM_ADDED = ([(BOS_DS, True), (EOS_DS, True)] +
                      [(ds(n), False) for n in ("fim hole", "fim begin", "fim end")] + [("<pad>", False)])
GPT_OSS_ADDED = [(t, True) for t in ("<|startoftext|>", "<|endoftext|>", "<|reserved_200000|>",
                                     "<|reserved_200001|>", "<|return|>", "<|constrain|>", "<|reserved_200004|>",
                                     "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|reserved_200009|>",
                                     "<|reserved_200010|>", "<|reserved_200011|>", "<|call|>")]
MISTRAL_V3_CONTROL = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                      "[TOOL_RESULTS]", "[/TOOL_RESULTS]"] + [f"[control_{i}]" for i in range(8, 12)]
PHI3_SPECIALS = ["<|user|>\nHi there<|end|>\n<|assistant|>\n", "<s>text</s>", "<|system|>x<|end|><|endoftext|>",
                 "<|placeholder1|> and <|placeholder6|>", " <|end|> spaced <|user|> "]

# Byte-level families: name -> how its hub tokenizer.json is laid out.
#   pre: pre-tokenizer steps before ByteLevel; normalizer; ignore_merges (BPE model flag);
#   leading: special tokens at ids 0.. (also in the model vocab, as the hub files have them);
#   added: (content, special) appended after the vocabulary; post: post-processor;
#   gguf_pre: what llama.cpp's converter writes as tokenizer.ggml.pre; add_bos: its add_bos_token.
BYTE_LEVEL_FAMILIES = {
    "qwen3": dict(pre=[split(QWEN2_SPLIT)], normalizer={"type": "NFC"}, ignore_merges=False, leading=[],
                  added=QWEN_ADDED, post=BYTE_LEVEL_POST, bos=None, eos="<|im_end|>", gguf_pre="qwen2",
                  add_bos=False,
                  specials=["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
                            "a<tool_call>{\"x\": 1}</tool_call>b", " <|endoftext|> spaced <|im_end|> ",
                            "<|fim_prefix|>def<|fim_suffix|>\n<|fim_middle|>"]),
    "mistral_tekken": dict(pre=[split(TEKKEN_SPLIT)], normalizer=None, ignore_merges=True, leading=TEKKEN_SPECIALS,
                           added=[], post="bos", bos="<s>", eos="</s>", gguf_pre="tekken",
                           add_bos=True,
                           specials=["<s>[INST]Hi there[/INST]Hello</s>", "[SYSTEM_PROMPT]sys[/SYSTEM_PROMPT]",
                                     "[TOOL_CALLS][{\"name\": \"f\"}]</s>", " [INST] spaced [/INST] "]),
    "deepseek_v3": dict(pre=[split(r) for r in DEEPSEEK_V3_SPLITS], normalizer=None, ignore_merges=False,
                        leading=[BOS_DS, EOS_DS, ds(" pad ")], added=DEEPSEEK_V3_ADDED, post="bos",
                        bos=BOS_DS, eos=EOS_DS, gguf_pre="deepseek-v3", add_bos=True,
                        specials=[BOS_DS + ds("User") + "Hi" + ds("Assistant") + "<think>\nok</think>" + EOS_DS,
                                  ds("tool calls begin") + ds("tool call begin") + "function" + ds("tool sep"),
                                  " " + ds("User") + " spaced " + EOS_DS + " "]),
    # DeepSeek-V2 / V2-Lite ship deepseek-llm's tokenizer.
    "deepseek_llm": dict(pre=[split("[\r\n]"), split(DEEPSEEK_LETTERS), split(DEEPSEEK_PUNCT), split(r"\s+$"),
                              split(DEEPSEEK_CJK), split(r"\p{N}+")],
                         normalizer={"type": "Sequence", "normalizers": []}, ignore_merges=False, leading=[],
                         added=DEEPSEEK_LLM_ADDED, post="bos", bos=BOS_DS, eos=EOS_DS,
                         gguf_pre="deepseek-llm", add_bos=True,
                         specials=[BOS_DS + "User: Hi\n\nAssistant: Hello" + EOS_DS,
                                   ds("fim begin") + "def f():" + ds("fim hole") + ds("fim end"), "<pad> x <pad>"]),
    "deepseek_coder": dict(pre=[split("[\r\n]"), split(r"\s?\p{L}+"), split(r"\s?\p{P}+"), split(DEEPSEEK_CJK),
                                {"type": "Digits", "individual_digits": True}],
                           normalizer={"type": "Sequence", "normalizers": []}, ignore_merges=False, leading=[],
                           added=DEEPSEEK_LLM_ADDED + [("<|EOT|>", True)], post="bos", bos=BOS_DS,
                           eos="<|EOT|>", gguf_pre="deepseek-coder", add_bos=True,
                           specials=[ds("fim begin") + "x = 1" + ds("fim hole") + ds("fim end") + "<|EOT|>"]),
    "gpt_oss": dict(pre=[split(O200K_SPLIT)], normalizer=None, ignore_merges=False, leading=[], added=GPT_OSS_ADDED,
                    post=BYTE_LEVEL_POST, bos="<|startoftext|>", eos="<|return|>", gguf_pre="gpt-4o", add_bos=False,
                    specials=["<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hey"
                              "<|return|>", "<|constrain|>json<|call|>", " <|start|> spaced <|end|> "]),
}


def train_corpus():
    """Training text: the MT-bench prompts plus the Unicode-heavy test texts (so merges exist
    across scripts, digits, whitespace runs and code)."""
    texts = []
    if os.path.exists(SHARED_PROMPTS):
        with open(SHARED_PROMPTS, encoding="utf-8") as f:
            for line in f:
                texts.extend(json.loads(line)["turns"])
    texts += pretok_golden.CORPUS + tok_golden.FIXED
    return texts


def test_corpus(name, specials):
    return (tok_golden.FIXED + pretok_golden.CORPUS + specials +
            tok_golden.random_corpus(seed=4321 + sum(map(ord, name)), count=40))


def train_byte_level_vocab(fam, texts, vocab_size):
    """Vocabulary and merges of a byte-level BPE trained under the family's pre-tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if fam["normalizer"] is not None:
        tok.normalizer = normalizers.Sequence([]) if fam["normalizer"]["type"] == "Sequence" else normalizers.NFC()
    tok.pre_tokenizer = Tokenizer.from_str(json.dumps({
        "version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []},
        "pre_tokenizer": byte_level_pre(fam["pre"])})).pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=fam["leading"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tok.train_from_iterator(texts, trainer)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], model["merges"]


def hub_document(fam, vocab, merges, added):
    """tokenizer.json laid out as the family's hub file: `added` = [(content, special, id)]."""
    ids = dict(vocab, **{c: i for c, _, i in added})
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": s} for c, s, i in added],
        "normalizer": fam["normalizer"],
        "pre_tokenizer": byte_level_pre(fam["pre"]),
        "post_processor": template_post(fam["bos"], ids[fam["bos"]]) if fam["post"] == "bos" else fam["post"],
        "decoder": BYTE_LEVEL_DECODER,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": fam["ignore_merges"], "vocab": vocab, "merges": merges},
    }


def build_byte_level(name, fam, texts):
    vocab, merges = train_byte_level_vocab(fam, texts, vocab_size=700)
    added = [(c, True, vocab[c]) for c in fam["leading"]]
    next_id = max(vocab.values()) + 1
    for content, special in fam["added"]:
        added.append((content, special, next_id))
        next_id += 1
    return hub_document(fam, vocab, merges, added)


def gguf_token_types(tokens, added):
    """llama.cpp's get_vocab_base: added tokens are CONTROL when special or when they look
    special ("<|...|>", "<｜...｜>", "<pad>"), else USER_DEFINED; the rest NORMAL."""
    import gguf
    by_id = {i: (c, s) for c, s, i in added}
    types = []
    for i, t in enumerate(tokens):
        if i not in by_id:
            types.append(gguf.TokenType.NORMAL)
            continue
        c, s = by_id[i]
        looks = c == "<pad>" or (c.startswith("<|") and c.endswith("|>")) or (c.startswith("<\uff5c") and
                                                                               c.endswith("\uff5c>"))
        types.append(gguf.TokenType.CONTROL if s or looks else gguf.TokenType.USER_DEFINED)
    return types


def write_vocab_gguf(path, arch, model, pre, tokens, types, merges=None, scores=None, bos=None, eos=None, unk=None,
                     add_bos=None, add_space_prefix=None):
    """A vocabulary-only GGUF with the tokenizer keys convert_hf_to_gguf.py writes."""
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for key, v in (("bos", bos), ("eos", eos), ("unk", unk)):
        if v is not None:
            getattr(w, f"add_{key}_token_id")(v)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def byte_level_gguf(path, fam, doc):
    """Writes the GGUF form of `doc` and returns its token types."""
    vocab = dict(doc["model"]["vocab"])
    added = [(a["content"], a["special"], a["id"]) for a in doc["added_tokens"]]
    for c, _, i in added:
        vocab[c] = i
    tokens = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [" ".join(m) for m in doc["model"]["merges"]]
    types = gguf_token_types(tokens, added)
    write_vocab_gguf(path, "llama", "gpt2", fam["gguf_pre"], tokens, types, merges=merges,
                     bos=vocab.get(fam["bos"]), eos=vocab.get(fam["eos"]), add_bos=fam["add_bos"])
    return types


def spm_merges(vocab, scores):
    """The merges LlamaConverter's SentencePieceExtractor wrote into the hub files: every split of
    a piece into two pieces, ordered by the merged piece's score (best first), then by ids."""
    merges = []
    for piece, score in scores.items():
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda v: v[2], reverse=True)
    return [[a, b] for a, b, _ in merges]


def spm_document(pieces, scores, types, legacy, extra_added=(), rstrip=lambda content: False):
    """A Llama-style hub tokenizer.json (Mistral v0.1 / Phi-3: legacy Prepend+Replace; Mistral
    v0.3: Metaspace with prepend_scheme "first") over SentencePiece pieces. Unknown and control
    pieces are special added tokens, user-defined ones plain added tokens, and so is each of
    `extra_added` [(content, special, id)]; `rstrip(content)` gives an added token's flag."""
    vocab = {p: i for i, p in enumerate(pieces) if p is not None}
    normal = {p: s for p, s, t in zip(pieces, scores, types) if p is not None}
    added = [(p, t != 4, i) for i, (p, t) in enumerate(zip(pieces, types)) if t in (2, 3, 4)] + list(extra_added)
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": rstrip(c),
                          "normalized": False, "special": s} for c, s, i in added],
        "normalizer": SPM_LEGACY_NORMALIZER if legacy else None,
        "pre_tokenizer": None if legacy else {"type": "Metaspace", "replacement": "\u2581",
                                              "prepend_scheme": "first", "split": False},
        "post_processor": template_post("<s>", vocab["<s>"]),
        "decoder": SPM_DECODER,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": spm_merges(vocab, normal)},
    }
    return doc


def train_spm(texts, vocab_size, control):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "corpus.txt")
        with open(src, "w", encoding="utf-8") as f:
            for t in texts:
                for line in t.splitlines():
                    if line.strip():
                        f.write(line + "\n")
        # Llama / Mistral's trainer settings: BPE, byte fallback, digits split, identity
        # normalization, dummy prefix, whitespace kept as is.
        spm.SentencePieceTrainer.train(
            input=src, model_prefix=os.path.join(tmp, "m"), model_type="bpe", vocab_size=vocab_size,
            byte_fallback=True, split_digits=True, normalization_rule_name="identity", add_dummy_prefix=True,
            remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, character_coverage=0.9995,
            control_symbols=control, num_threads=1, minloglevel=2, seed_sentencepiece_size=100000)
        proto = pb.ModelProto()
        proto.ParseFromString(open(os.path.join(tmp, "m.model"), "rb").read())
    return [p.piece for p in proto.pieces], [p.score for p in proto.pieces], [p.type for p in proto.pieces]


def spm_gguf(path, pieces, scores, types, add_bos):
    """convert_hf_to_gguf's _set_vocab_sentencepiece: pieces, scores and types from the model."""
    write_vocab_gguf(path, "llama", "llama", None, pieces, types, scores=scores, bos=1, eos=2, unk=0,
                     add_bos=add_bos, add_space_prefix=True)


def read_gguf_vocab(path):
    import gguf
    r = gguf.GGUFReader(path)

    def arr(name, conv):
        f = r.fields.get(name)
        return None if f is None else [conv(f.parts[i]) for i in f.data]

    def scalar(name):
        f = r.fields.get(name)
        return None if f is None else f.parts[f.data[0]][0]
    return dict(tokens=arr("tokenizer.ggml.tokens", lambda p: bytes(p).decode("utf-8")),
                scores=arr("tokenizer.ggml.scores", lambda p: float(p[0])),
                types=arr("tokenizer.ggml.token_type", lambda p: int(p[0])),
                merges=arr("tokenizer.ggml.merges", lambda p: bytes(p).decode("utf-8")),
                add_bos=scalar("tokenizer.ggml.add_bos_token"))


def check_llamacpp_ids(tok, gguf_path):
    inputs, outputs = pretok_golden.read_expected(gguf_path)
    got = [tok.encode(t, add_special_tokens=False).ids for t in inputs]
    bad = [i for i, (g, w) in enumerate(zip(got, outputs)) if g != w]
    if bad:
        sys.exit(f"{gguf_path}: the rebuilt HF tokenizer misses llama.cpp's expected ids on tests {bad}")


def as_gguf_states_it(doc, gguf_types):
    """The tokenizer a GGUF vocabulary stands for: llama.cpp's converter marks an added token
    CONTROL when it looks special ("<|x|>", "<｜x｜>", "<pad>") even where the hub file says
    special: false, so skip_special_tokens drops it there."""
    from tokenizers import Tokenizer
    doc = json.loads(json.dumps(doc))
    for a in doc["added_tokens"]:
        a["special"] = int(gguf_types[a["id"]]) == 3
    return Tokenizer.from_str(json.dumps(doc))


def write_golden(name, tok, corpus, hf_dir, gguf, gguf_tok=None):
    """`gguf_tok`: the tokenizer as its GGUF states it, where that decodes some ids differently
    (recorded as decoded_skip_gguf)."""
    cases = []
    for text in corpus:
        ids_special = tok.encode(text, add_special_tokens=True).ids
        case = {"text": text, "ids": tok.encode(text, add_special_tokens=False).ids,
                "ids_special": ids_special, "decoded": tok.decode(ids_special, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids_special, skip_special_tokens=True)}
        if gguf_tok is not None:
            skip = gguf_tok.decode(ids_special, skip_special_tokens=True)
            if skip != case["decoded_skip"]:
                case["decoded_skip_gguf"] = skip
        cases.append(case)
    doc = {"name": name, "generator": "scripts/gen_family_tokenizers.py",
           "tokenizers_version": __import__("tokenizers").__version__, "hf_dir": hf_dir, "gguf": gguf,
           "cases": cases}
    out = os.path.join(TOK_DATA, f"golden_{name}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"{out}: {len(cases)} cases, {os.path.getsize(out)} bytes", file=sys.stderr)


def save_family(name, doc, config):
    d = os.path.join(TOK_DATA, "families", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return d


def main() -> int:
    from tokenizers import Tokenizer
    texts = train_corpus()
    rel = lambda p: os.path.relpath(p, ROOT)  # noqa: E731

    for name, fam in BYTE_LEVEL_FAMILIES.items():
        doc = build_byte_level(name, fam, texts)
        config = {"bos_token": fam["bos"], "eos_token": fam["eos"]}
        d = save_family(name, doc, config)
        types = byte_level_gguf(os.path.join(d, "vocab.gguf"), fam, doc)
        tok = Tokenizer.from_str(json.dumps(doc))
        write_golden(name, tok, test_corpus(name, fam["specials"]), rel(d), rel(os.path.join(d, "vocab.gguf")),
                     as_gguf_states_it(doc, types))

    # Mistral v0.1-style SentencePiece (legacy: every text segment gets the U+2581 prefix, as
    # llama.cpp's GGUF tokenizer does too) and v0.3-style (Metaspace, prefix on the first segment
    # only; its control pieces [INST] ... are special added tokens). The GGUF form follows the
    # legacy pipeline, so only the v0.1 one is compared with it.
    specials = ["<s>[INST] Hi there [/INST] Hello</s>", "[INST]no space[/INST]x", "<unk> and </s>a",
                " [TOOL_CALLS] spaced [control_9] "]
    for name, legacy, control in (("mistral_spm", True, []), ("mistral_v3_spm", False, MISTRAL_V3_CONTROL)):
        pieces, scores, types = train_spm(texts, 900, control)
        doc = spm_document(pieces, scores, types, legacy)
        d = save_family(name, doc, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                    "add_bos_token": True, "add_eos_token": False})
        gguf = None
        if legacy:
            spm_gguf(os.path.join(d, "vocab.gguf"), pieces, scores, types, add_bos=True)
            gguf = rel(os.path.join(d, "vocab.gguf"))
        elif os.path.exists(os.path.join(d, "vocab.gguf")):
            os.remove(os.path.join(d, "vocab.gguf"))
        write_golden(name, Tokenizer.from_str(json.dumps(doc)), test_corpus(name, specials), rel(d), gguf)

    # Real vocabularies: Phi-3 (SentencePiece, its added tokens past the model's 32000 pieces)
    # and DeepSeek-Coder (byte-level, deepseek-coder splits). Only their GGUF is in the testdata,
    # so the golden files name no tokenizer.json; HF's tokenizer is rebuilt from the GGUF and must
    # first reproduce llama.cpp's expected ids.
    phi3 = os.path.join(SHARED_TOKENIZER, "ggml-vocab-phi-3.gguf")
    if os.path.exists(phi3):
        v = read_gguf_vocab(phi3)
        n_model = 32000  # pieces of Phi-3's tokenizer.model; the rest are added tokens
        extra = [(t, k != 4, i) for i, (t, k) in enumerate(zip(v["tokens"], v["types"])) if i >= n_model]
        # The hub file strips spaces after its chat tokens and "</s>" (llama.cpp sets the same
        # by model name).
        doc = spm_document(v["tokens"][:n_model], v["scores"][:n_model], v["types"][:n_model], True, extra,
                           rstrip=lambda c: c not in ("<unk>", "<s>", "<|endoftext|>"))
        if v["add_bos"] is not None and not v["add_bos"]:
            doc["post_processor"] = None
        tok = Tokenizer.from_str(json.dumps(doc))
        check_llamacpp_ids(tok, phi3)
        write_golden("phi3", tok, test_corpus("phi3", PHI3_SPECIALS), "", "shared:tokenizer/ggml-vocab-phi-3.gguf")
    coder = os.path.join(SHARED_TOKENIZER, "ggml-vocab-deepseek-coder.gguf")
    if os.path.exists(coder):
        v = read_gguf_vocab(coder)
        fam = BYTE_LEVEL_FAMILIES["deepseek_coder"]
        vocab = {t: i for i, t in enumerate(v["tokens"]) if v["types"][i] == 1}
        added = [(t, k == 3, i) for i, (t, k) in enumerate(zip(v["tokens"], v["types"])) if k in (3, 4)]
        merges = [m.split(" ", 1) for m in v["merges"]]
        doc = hub_document(fam, vocab, merges, added)
        if v["add_bos"] is not None and not v["add_bos"]:
            doc["post_processor"] = None
        tok = Tokenizer.from_str(json.dumps(doc))
        check_llamacpp_ids(tok, coder)
        write_golden("deepseek_coder_real", tok, test_corpus("deepseek_coder_real", fam["specials"]), "",
                     "shared:tokenizer/ggml-vocab-deepseek-coder.gguf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
