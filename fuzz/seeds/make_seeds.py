#!/usr/bin/env python3
"""Writes the small, hand-shaped seed inputs under fuzz/seeds/<target>/ (committed; rerun only to
change them). Larger real inputs come from the shared test data beside the checkout
(../shared/testdata) at run time (see scripts/fuzz).
Uses only the standard library plus, for tokenizer.json seeds, the `tokenizers` package."""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def out(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- GGUF ----
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    if t == 8:
        return gstr(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, i) for i in items)
    return struct.pack("<" + fmt[t], v)


def gguf(version, kvs, tensors, align=32):
    """tensors: (name, dims (ne order), ggml type, raw bytes)."""
    h = b"GGUF" + struct.pack("<I", version) + struct.pack("<QQ", len(tensors), len(kvs))
    for k, t, v in kvs:
        h += gstr(k) + struct.pack("<I", t) + gval(t, v)
    off = 0
    offsets = []
    for name, dims, ty, raw in tensors:
        offsets.append(off)
        off += len(raw)
        off = (off + align - 1) // align * align
    for (name, dims, ty, raw), o in zip(tensors, offsets):
        h += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        h += struct.pack("<IQ", ty, o)
    h += b"\0" * ((-len(h)) % align)
    data = b""
    for (name, dims, ty, raw), o in zip(tensors, offsets):
        data += b"\0" * (o - len(data)) + raw
    return h + data


def gguf_seeds():
    f32 = struct.pack("<8f", *range(8))
    q8_0 = struct.pack("<e", 0.5) + bytes(range(32))  # one Q8_0 block of 32
    kvs = [
        ("general.architecture", 8, "llama"),
        ("general.name", 8, "tiny"),
        ("general.alignment", 4, 32),
        ("llama.context_length", 4, 128),
        ("llama.embedding_length", 4, 8),
        ("llama.block_count", 4, 1),
        ("llama.attention.head_count", 4, 2),
        ("llama.rope.freq_base", 6, 10000.0),
        ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
        ("tokenizer.ggml.model", 8, "gpt2"),
        ("tokenizer.ggml.tokens", 9, (8, ["a", "b", "ab", "<s>", "</s>", "\u0120c"])),
        ("tokenizer.ggml.token_type", 9, (5, [1, 1, 1, 3, 3, 1])),
        ("tokenizer.ggml.merges", 9, (8, ["a b"])),
        ("tokenizer.ggml.scores", 9, (6, [0.0, -1.0, -2.0, 0.0, 0.0, -3.0])),
        ("tokenizer.ggml.bos_token_id", 4, 3),
        ("tokenizer.ggml.add_bos_token", 7, True),
        ("misc.u8", 0, 7), ("misc.i8", 1, -7), ("misc.u16", 2, 700), ("misc.i16", 3, -700),
        ("misc.u64", 10, 1 << 40), ("misc.i64", 11, -(1 << 40)), ("misc.f64", 12, 2.5),
        ("misc.nested", 9, (9, [(4, [1, 2]), (8, ["x"])])),
    ]
    tensors = [("token_embd.weight", [8], 0, f32), ("blk.0.attn_q.weight", [32, 1], 8, q8_0),
               ("output_norm.weight", [2, 2, 2], 0, f32)]
    out("gguf_fuzz", "llama_v3.gguf", gguf(3, kvs, tensors))
    out("gguf_fuzz", "v2_small.gguf", gguf(2, kvs[:4], tensors[:1]))
    out("gguf_fuzz", "empty_v3.gguf", gguf(3, [], []))
    out("gguf_fuzz", "align64.gguf", gguf(3, [("general.alignment", 4, 64)], tensors, align=64))


def gguf_model_seeds():
    """Whole tiny models (gguf_fuzz goes on to the config, the binder and a forward pass), valid
    and with the model-file faults of issue 14: an integer type on a norm, a bias and the
    embedding, a CR and an escape in the architecture, fewer layers in the metadata than in the
    tensors, a context of 2^31 - 1, a bad sliding-window period."""
    h, ffn, vocab, heads, kv_heads, hd = 32, 32, 16, 2, 1, 16

    def f32(n, v=0.02):
        return struct.pack("<%df" % n, *[v * ((i * 7) % 5 - 2) for i in range(n)])

    def model(arch="llama", blocks=1, context=128, types=None, extra_kvs=(), file_blocks=1):
        types = types or {}
        kvs = [("general.architecture", 8, arch), (arch + ".block_count", 4, blocks),
               (arch + ".context_length", 4, context), (arch + ".embedding_length", 4, h),
               (arch + ".feed_forward_length", 4, ffn), (arch + ".attention.head_count", 4, heads),
               (arch + ".attention.head_count_kv", 4, kv_heads), (arch + ".vocab_size", 4, vocab),
               (arch + ".attention.layer_norm_rms_epsilon", 6, 1e-5), *extra_kvs]
        shapes = [("token_embd.weight", [h, vocab]), ("output_norm.weight", [h])]
        for i in range(file_blocks):
            b = "blk.%d." % i
            shapes += [(b + "attn_norm.weight", [h]), (b + "attn_q.weight", [h, heads * hd]),
                       (b + "attn_k.weight", [h, kv_heads * hd]), (b + "attn_v.weight", [h, kv_heads * hd]),
                       (b + "attn_q.bias", [heads * hd]), (b + "attn_output.weight", [heads * hd, h]),
                       (b + "ffn_norm.weight", [h]), (b + "ffn_gate.weight", [h, ffn]),
                       (b + "ffn_up.weight", [h, ffn]), (b + "ffn_down.weight", [ffn, h])]
        tensors = []
        for name, dims in shapes:
            n = 1
            for d in dims:
                n *= d
            ty = types.get(name, 0)
            # Norms near 1, the rest small; an integer type keeps the f32 bytes (it fits them).
            tensors.append((name, dims, ty, f32(n, 1.0 if "norm" in name else 0.02)))
        return gguf(3, kvs, tensors)

    out("gguf_fuzz", "model_llama.gguf", model())
    out("gguf_fuzz", "model_norm_i8.gguf", model(types={"blk.0.attn_norm.weight": 24}))
    out("gguf_fuzz", "model_output_norm_i16.gguf", model(types={"output_norm.weight": 25}))
    out("gguf_fuzz", "model_embedding_i32.gguf", model(types={"token_embd.weight": 26}))
    out("gguf_fuzz", "model_bias_i32.gguf", model(types={"blk.0.attn_q.bias": 26}))
    out("gguf_fuzz", "model_arch_control_bytes.gguf", model(arch="l\r\x1b[m"))
    out("gguf_fuzz", "model_fewer_blocks.gguf", model(blocks=1, file_blocks=2))
    out("gguf_fuzz", "model_context_2_31.gguf", model(context=(1 << 31) - 1))
    out("gguf_fuzz", "model_sliding_period_0.gguf",
        model(extra_kvs=[("llama.attention.sliding_window", 4, 8), ("llama.attention.sliding_window_pattern", 4, 0)]))


# ---- safetensors ----
def safetensors(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    out("safetensors_fuzz", "two.safetensors", safetensors(
        {"__metadata__": {"format": "pt"},
         "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
         "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}, bytes(range(22))))
    dts = [("F16", 2), ("I8", 1), ("U8", 1), ("I32", 4), ("I64", 8), ("F64", 8), ("BOOL", 1)]
    hdr, off = {}, 0
    for i, (dt, sz) in enumerate(dts):
        hdr["t%d" % i] = {"dtype": dt, "shape": [2], "data_offsets": [off, off + 2 * sz]}
        off += 2 * sz
    out("safetensors_fuzz", "dtypes.safetensors", safetensors(hdr, bytes(off)))
    out("safetensors_fuzz", "scalar.safetensors",
        safetensors({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, b"\0\0\x80?"))
    out("safetensors_fuzz", "empty.safetensors", safetensors({}, b""))
    out("safetensors_fuzz", "zero_dim.safetensors",
        safetensors({"z": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]}}, b""))


# ---- tokenizer.json ----
def tokenizer_seeds():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, processors, trainers
    text = ["hello world", "the quick brown fox jumps over the lazy dog", "caf\u00e9 na\u00efve 123 4567",
            "\u4f60\u597d\uff0c\u4e16\u754c", "emoji \U0001F600 tabs\tand  spaces\nnew line", "don't we'll I'm"]

    def save(name, tok):
        out("tokenizer_json_fuzz", name, tok.to_str())

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    save("bytelevel_bpe.json", t)

    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"]))
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A </s> $B:1 </s>:1",
                                                     special_tokens=[("<s>", 1), ("</s>", 2)])
    save("spm_bpe.json", t)

    t = Tokenizer(models.BPE(unk_token="[UNK]"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(r"\s+", behavior="removed"), pre_tokenizers.Punctuation(),
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Metaspace()])
    t.decoder = decoders.Metaspace()
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=80, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    save("split_digits_bert.json", t)

    t = Tokenizer(models.BPE(unk_token="[UNK]"))
    t.normalizer = normalizers.Sequence([normalizers.BertNormalizer(lowercase=True), normalizers.StripAccents()])
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=80, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    save("bert_normalizer.json", t)

    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFD()
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Whitespace()])
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=60, special_tokens=["<pad>", "<s>", "</s>"]))
    t.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 1))
    t.add_tokens(["<tool>", "</tool>"])
    save("roberta_added.json", t)


# ---- HTTP (the target reads 4 limit bytes first) ----
def http_seeds():
    lim = bytes([200, 15, 200, 250])
    reqs = {
        "get.http": "GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
        "post_cl.http": "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                        "Content-Length: 15\r\n\r\n{\"prompt\":\"hi\"}",
        "chunked.http": "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n",
        "pipelined.http": "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /health HTTP/1.0\r\n\r\n"
                          "DELETE /x HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n",
        "expect.http": "POST /v1/completions HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                       "Content-Length: 2\r\n\r\n{}",
        "smuggle.http": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "0\r\n\r\n",
        "lf_only.http": "GET /a%20b HTTP/1.1\nHost: a\n\n",
    }
    for name, r in reqs.items():
        out("http_parser_fuzz", name, lim + r.encode())


# ---- OpenAI request bodies (sampling_json_fuzz, openai_request_fuzz, json_fuzz) ----
def openai_seeds():
    bodies = {
        "completion.json": {"model": "m", "prompt": "Hello", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
                            "top_k": 40, "min_p": 0.05, "seed": 1, "stop": ["\n", "END"], "n": 2,
                            "logprobs": 3, "echo": True, "stream": True,
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
        "completion_tokens.json": {"prompt": [[1, 2, 3], [4, 5]], "max_completion_tokens": 4,
                                   "presence_penalty": 0.5, "frequency_penalty": -0.5,
                                   "repetition_penalty": 1.1, "logit_bias": {"42": -100, "7": 5.5},
                                   "stop_token_ids": [2], "min_tokens": 1, "ignore_eos": False,
                                   "prompt_logprobs": 2, "priority": 3, "cache_salt": "s"},
        "chat.json": {"model": "m", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "logprobs": True, "top_logprobs": 5, "add_generation_prompt": False,
            "continue_final_message": True, "chat_template_kwargs": {"enable_thinking": False},
            "skip_special_tokens": False, "include_stop_str_in_output": True},
        "chat_min.json": {"messages": [{"role": "user", "content": "x"}]},
        "chat_required.json": {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                               "parallel_tool_calls": False, "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "$defs": {"P": {"type": "string"}}, "properties": {"p": {"$ref": "#/$defs/P"}}}}},
            {"type": "function", "function": {"name": "g"}}]},
        "responses.json": {"model": "m", "instructions": "be brief", "max_output_tokens": 8, "stream": True,
                           "previous_response_id": "resp_1", "store": False, "metadata": {"k": "v"},
                           "reasoning": {"effort": "low"}, "input": [
            {"role": "developer", "content": "rules"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}}},
        "responses_min.json": {"input": "hi"},
    }
    for name, b in bodies.items():
        for target in ("sampling_json_fuzz", "openai_request_fuzz"):
            out(target, name, json.dumps(b))
    edge = ['{"a":[1,-0,1e308,-1e-308,12345678901234567890,0.1],"b":{"c":null,"d":true,"e":false}}',
            '"\\u00e9\\ud83d\\ude00\\n\\t\\"\\\\\\/"', '[[[[[[[[[[[]]]]]]]]]]]', '{"":""}', '-0.0e-0']
    for i, e in enumerate(edge):
        out("json_fuzz", "edge%d.json" % i, e)


# ---- model output (tool-call and reasoning parsers) ----
def model_output_seeds():
    """Byte 0 picks the parser (tool_parser_fuzz: index into deepseek_v3, hermes, llama3_json,
    mistral, pythonic; reasoning_parser_fuzz: bit 0 qwen3, bit 1 thinking off, bits 2+ the
    prompt's end), byte 1 seeds the stream's cuts (0: one piece)."""
    def dsk(n):
        return "<\uff5ctool\u2581%s\uff5c>" % n
    calls_begin, calls_end = dsk("calls\u2581begin"), dsk("calls\u2581end")
    call_begin, call_end, sep = dsk("call\u2581begin"), dsk("call\u2581end"), dsk("sep")
    tools = {
        "deepseek_v3": [
            "Checking.\n" + calls_begin + call_begin + "function" + sep + "get_weather\n```json\n"
            '{"city": "\u4e0a\u6d77", "days": [1, 2]}\n```' + call_end + calls_end,
            calls_begin + call_begin + "get_time" + sep + '{"tz": "CET"}' + call_end + calls_end + "\nDone.",
        ],
        "hermes": [
            'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Z\u00fcrich", "n": [1, 2.5e3, null]}}\n'
            '</tool_call>\n<tool_call>\n{"arguments": {"q": "\\u00e9\\n"}, "name": "search"}\n</tool_call>',
            '<tool_call>{"name": "f", "arguments": {"a": True}}</tool_call> tail',
        ],
        "llama3_json": [
            '<|python_tag|>{"name": "search", "parameters": {"query": "x"}}; {"name": "g", "arguments": {}}',
            '{"type": "function", "name": "f", "parameters": {"a": {"b": [1]}}}\nText after.',
        ],
        "mistral": [
            'Let me.[TOOL_CALLS][{"name": "add", "arguments": {"a": 3.5, "b": 4}, "id": "bYXqMNvcA"}]',
            '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Krak\u00f3w"}[TOOL_CALLS]f{}',
        ],
        "pythonic": [
            "[get_weather(city='San Francisco', unit=\"c\"), f(x=[1, (2,)], y={'k': None}, z=r'\\d', w='''a\nb''')]",
            "<|python_start|>[g(a=-1.5e3, b=0x1F, c=True)]<|python_end|> trailing",
        ],
    }
    names = ["deepseek_v3", "hermes", "llama3_json", "mistral", "pythonic"]
    for name, texts in tools.items():
        for i, text in enumerate(texts):
            for cut in (0, 7):
                out("tool_parser_fuzz", "%s_%d_%d.txt" % (name, i, cut),
                    bytes([names.index(name), cut]) + text.encode())
    reasoning = [
        (1, "<think>\nThe user says hi.\n</think>\n\nHello! \U0001F600"),
        (0, "Okay, 2+2 is 4.\n</think>\n\nThe answer is **4**."),
        (1 | 4, "Reasoning after a prompt that opened it.\n</think>\n\nAnswer"),
        (1 | 2, "<think>x</think> thinking is off"),
        (0 | 8, "Prompt closed the block: </think> is text"),
        (0, "<think>\nnever closed"),
    ]
    for i, (opts, text) in enumerate(reasoning):
        for cut in (0, 5):
            out("reasoning_parser_fuzz", "r%d_%d.txt" % (i, cut), bytes([opts, cut]) + text.encode())


if __name__ == "__main__":
    gguf_seeds()
    gguf_model_seeds()
    safetensors_seeds()
    http_seeds()
    openai_seeds()
    model_output_seeds()
    try:
        tokenizer_seeds()
    except ImportError:
        print("tokenizers not installed: tokenizer.json seeds skipped", file=sys.stderr)
