"""Hostile clients for scripts/soak.py's phase 3, one kind per finding of issue 14.

Each kind sends one request on its own loopback connection, as raw bytes so that it can break HTTP
the way real clients do (no Host, a gzip body, a half-close, a cut mid-stream, a slow read), and
returns an Outcome: the status it expected, the one it got, and whether the answer was right. A
refusal is right only with OpenAI's error envelope and words naming its reason (a 400 for the wrong
reason is a mismatch); a 200 only with a complete answer. A 429 with Retry-After is the documented
answer to a full queue: the request is sent again after the delay, and counted as retried.
Must not judge the server's health, memory or KV (soak.py does that), and must not hold more than
one large upload at a time (the client's memory stays bounded).
"""
import asyncio
import gzip
import json
import socket
import struct
import time
from dataclasses import dataclass, field

# The words a refusal's message must contain, per reason (any one of a tuple).
REASON_PROMPT_TOO_LONG = ("bytes can fit in this model's context", "maximum context length")
REASON_QUEUE_BOUND = ("--max-num-queued-reqs",)
REASON_CONTEXT = ("maximum context length",)
REASON_HOST = ("missing Host header",)
REASON_ENCODING = ("Content-Encoding",)
REASON_JSON = ("Malformed JSON body",)
REASON_AUTH = ("API key",)
REASON_BODY_SIZE = ("--max-body-bytes",)

MAX_429_RETRIES = 5
REQUEST_TIMEOUT_S = 60  # a hostile request unanswered for this long is a stall (the slowest takes ~4 s)


class ProtocolError(Exception):
    pass


@dataclass
class Target:
    """What the hostile clients know of the server under test."""
    host: str
    port: int
    model: str
    api_key: str | None
    max_model_len: int
    queue_bound: int
    max_body_bytes: int
    upload_bytes: int


@dataclass
class Outcome:
    kind: str
    variant: str
    expected: int
    status: int | None  # None: no response (connection error, timeout, unparsable)
    ok: bool
    detail: str = ""
    retried_429: int = 0


# ---------------------------------------------------------------------------------------------
# raw HTTP/1.1 over one connection


def request_bytes(t, method, path, body=None, *, host=True, auth=True, authorization=None, headers=(), close=True):
    """One request; with Connection: close (the default) its answer ends where the connection does."""
    lines = [f"{method} {path} HTTP/1.1"]
    if host:
        lines.append(f"Host: [{t.host}]:{t.port}" if ":" in t.host else f"Host: {t.host}:{t.port}")
    if authorization is not None:
        lines.append(f"Authorization: {authorization}")
    elif auth and t.api_key:
        lines.append(f"Authorization: Bearer {t.api_key}")
    if close:
        lines.append("Connection: close")
    lines.extend(headers)
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def json_bytes(obj):
    return json.dumps(obj).encode()


async def exchange(t, data, *, half_close=False, rcvbuf=None, read_size=65536, read_gap_s=0.0, cut_when=None,
                   cut_with_reset=False):
    """Sends `data` on a new connection and returns every byte read until the server closes.
    half_close: shutdown(SHUT_WR) once sent. rcvbuf/read_size/read_gap_s: a slow reader with a
    small window. cut_when(bytes read so far) -> True: close there (with a reset if asked)."""
    sock = socket.socket(socket.AF_INET6 if ":" in t.host else socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    writer = None
    try:
        await asyncio.get_running_loop().sock_connect(sock, (t.host, t.port))
        # A small stream limit: asyncio stops reading from the socket past twice this, so a slow
        # reader's window really closes instead of the event loop buffering the answer for it.
        reader, writer = await asyncio.open_connection(sock=sock, limit=max(4096, read_size))
        writer.write(data)
        await writer.drain()
        if half_close:
            writer.write_eof()
        got = bytearray()
        while True:
            chunk = await reader.read(read_size)
            if not chunk:
                return bytes(got)
            got += chunk
            if cut_when is not None and cut_when(got):
                if cut_with_reset:
                    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                               struct.pack("ii", 1, 0))
                writer.transport.abort()
                writer = None
                return bytes(got)
            if read_gap_s:
                await asyncio.sleep(read_gap_s)
    finally:
        if writer is not None:
            writer.close()
        else:
            sock.close()


def dechunk(data):
    """The body of a chunked message and the bytes after it."""
    body, pos = bytearray(), 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            raise ProtocolError("chunked body cut short (no size line)")
        size = int(data[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            if data[pos:pos + 2] != b"\r\n":
                raise ProtocolError("chunked body without its final CRLF")
            return bytes(body), data[pos + 2:]
        if len(data) < pos + size + 2:
            raise ProtocolError("chunked body cut short")
        body += data[pos:pos + size]
        if data[pos + size:pos + size + 2] != b"\r\n":
            raise ProtocolError("chunk without its CRLF")
        pos += size + 2


def parse_head(data):
    end = data.find(b"\r\n\r\n")
    if end < 0:
        raise ProtocolError(f"no complete response head in {bytes(data[:120])!r}")
    lines = data[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers, data[end + 4:]


def parse_final(data, head=False):
    """The final (non-1xx) response in `data`: (status, headers, body, bytes after it)."""
    while True:
        status, headers, rest = parse_head(data)
        if status >= 200:
            break
        data = rest  # an interim answer, e.g. the 100 Continue sent to a half-closed client
    if head:
        return status, headers, b"", rest
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, rest = dechunk(rest)
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if len(rest) < n:
            raise ProtocolError(f"body of {len(rest)} bytes, Content-Length {n}")
        body, rest = rest[:n], rest[n:]
    else:
        body, rest = rest, b""
    return status, headers, body, rest


def check_envelope(body, reasons):
    """'' when body is OpenAI's error envelope whose message names one of `reasons`."""
    try:
        err = json.loads(body)["error"]
        message = err["message"]
        if not isinstance(message, str) or not {"type", "param", "code"} <= set(err):
            return f"not an error envelope: {body[:200]!r}"
    except (ValueError, KeyError, TypeError):
        return f"not an error envelope: {body[:200]!r}"
    if not any(r in message for r in reasons):
        return f"refused for another reason: {message[:200]}"
    return ""


def check_sse(body):
    """'' when `body` is a complete completions stream: every line an event, a finish_reason,
    [DONE] last, and as many streamed tokens (logprobs) as usage.completion_tokens."""
    streamed, finish, usage, done = 0, None, None, False
    for line in body.decode("utf-8", errors="replace").split("\n"):
        if not line:
            continue
        if not line.startswith("data: "):
            return f"bad SSE line {line[:100]!r}"
        if done:
            return "event after [DONE]"
        if line == "data: [DONE]":
            done = True
            continue
        obj = json.loads(line[6:])
        if "error" in obj:
            return f"SSE error event {obj['error']}"
        for ch in obj.get("choices") or []:
            streamed += len((ch.get("logprobs") or {}).get("tokens") or [])
            finish = ch.get("finish_reason") or finish
        usage = obj.get("usage") or usage
    if not done:
        return "no [DONE]"
    if finish not in ("stop", "length"):
        return f"finish_reason {finish}"
    if usage is None or usage.get("completion_tokens") != streamed:
        return f"streamed {streamed} tokens, usage {usage}"
    return ""


# ---------------------------------------------------------------------------------------------
# the hostile kinds


@dataclass
class Plan:
    """One hostile request: what to send, how, and what must come back. check(status, headers,
    body, bytes after the body) -> '' or what was wrong; parse: 'full', 'head' (an answer to HEAD)
    or 'cut' (we closed mid-answer: only the head is whole)."""
    expected: int
    variant: str
    data: bytes
    check: object
    options: dict = field(default_factory=dict)
    parse: str = "full"


def refusal(reasons):
    return lambda status, headers, body, rest: check_envelope(body, reasons)


class HostileClients:
    def __init__(self, target):
        self.t = target
        self.upload_slot = asyncio.Semaphore(1)
        self.num_cuts = 0  # streams cut mid-way: each must show up as a client abort
        self._uploads = {}

    def kinds(self):
        names = ["large_upload", "oversized_body", "over_queue_bound", "over_max_model_len", "half_close",
                 "cut_mid_stream", "slow_reader", "head_probe", "no_host", "gzip_body", "malformed_json"]
        return names + (["no_api_key"] if self.t.api_key else [])

    def completion(self, **kw):
        return {"model": self.t.model, "prompt": "The river runs past the old mill and", "max_tokens": 8, **kw}

    def upload(self, route, num_bytes):
        """A prompt of num_bytes for `route`, built once and kept."""
        if (route, num_bytes) not in self._uploads:
            text = ("river mountain engine " * (num_bytes // 22 + 1))[:num_bytes]
            if route == "/v1/chat/completions":
                obj = {"model": self.t.model, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
            else:
                obj = {"model": self.t.model, "prompt": text, "max_tokens": 4}
            self._uploads[(route, num_bytes)] = json_bytes(obj)
        return self._uploads[(route, num_bytes)]

    def plan(self, kind, i):
        """The i-th request of `kind` (i picks the variant)."""
        t = self.t
        post = lambda path, obj, **kw: request_bytes(t, "POST", path, json_bytes(obj), **kw)
        if kind == "large_upload":
            # A few MB: refused from its length before it is tokenized. Or 16 bytes per token of the
            # context: about 2x max_model_len tokens of these words, short enough (for a vocabulary
            # whose longest token has 16 bytes or more) to be tokenized, then refused for its tokens;
            # /tokenize counts them (vLLM bounds only generation by max_model_len).
            route = ("/v1/completions", "/v1/chat/completions", "/tokenize")[i % 3]
            num_bytes = t.upload_bytes if (i // 3) % 2 == 0 else 16 * t.max_model_len
            data = request_bytes(t, "POST", route, self.upload(route, num_bytes))
            if route == "/tokenize" and num_bytes < t.upload_bytes:
                return Plan(200, f"{route} {num_bytes} B", data, check_tokenized)
            return Plan(400, f"{route} {num_bytes} B", data, refusal(REASON_PROMPT_TOO_LONG))
        if kind == "oversized_body":
            # Refused from Content-Length alone, before a byte of the body is read.
            head = request_bytes(t, "POST", "/v1/completions", b"")
            head = head.replace(b"Content-Length: 0", b"Content-Length: %d" % (t.max_body_bytes + 1))
            return Plan(413, "content-length", head, refusal(REASON_BODY_SIZE))
        if kind == "over_queue_bound":
            n = min(128, t.queue_bound + 1)
            prompts = ["count to ten"] * (t.queue_bound // n + 1)
            stream = i % 2 == 1
            obj = self.completion(prompt=prompts, n=n, max_tokens=1, stream=stream)
            return Plan(400, f"{len(prompts)}x{n}{' stream' if stream else ''}", post("/v1/completions", obj),
                        refusal(REASON_QUEUE_BOUND))
        if kind == "over_max_model_len":
            variant = ("completion", "chat", "token_ids")[i % 3]
            if variant == "chat":
                obj = {"model": t.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": t.max_model_len}
                return Plan(400, variant, post("/v1/chat/completions", obj), refusal(REASON_CONTEXT))
            obj = (self.completion(max_tokens=t.max_model_len) if variant == "completion" else
                   self.completion(prompt=[100] * t.max_model_len, max_tokens=1))
            return Plan(400, variant, post("/v1/completions", obj), refusal(REASON_CONTEXT))
        if kind == "half_close":
            stream = i % 2 == 1
            obj = self.completion(stream=stream, logprobs=0)
            if stream:
                obj["stream_options"] = {"include_usage": True}
            return Plan(200, "stream" if stream else "plain", post("/v1/completions", obj),
                        check_sse_answer if stream else check_plain_answer, {"half_close": True})
        if kind == "cut_mid_stream":
            reset = i % 2 == 1
            obj = self.completion(stream=True, ignore_eos=True, max_tokens=max(1, min(256, t.max_model_len - 32)))
            return Plan(200, "reset" if reset else "close", post("/v1/completions", obj), check_cut,
                        {"cut_when": lambda got: b"data: {" in got, "cut_with_reset": reset}, parse="cut")
        if kind == "slow_reader":
            # ~28 KB of events (20 logprobs a token), produced at ~50 KB/s unloaded, read through a
            # 4 KiB window at 8 KiB/s: the server must hold the rest without stalling anyone else.
            obj = self.completion(stream=True, ignore_eos=True, max_tokens=min(32, t.max_model_len - 16), logprobs=20,
                                  stream_options={"include_usage": True})
            return Plan(200, "8KiB/s", post("/v1/completions", obj), check_sse_answer,
                        {"rcvbuf": 4096, "read_size": 1024, "read_gap_s": 0.125})
        if kind == "head_probe":
            # HEAD then GET on one connection: a body sent for the HEAD would be read as the GET's answer.
            path = ("/health", "/v1/models")[i % 2]
            data = request_bytes(t, "HEAD", path, close=False) + request_bytes(t, "GET", path)
            return Plan(200, path, data, check_head, parse="head")
        if kind == "no_host":
            if i % 2:
                return Plan(400, "GET /v1/models", request_bytes(t, "GET", "/v1/models", host=False),
                            refusal(REASON_HOST))
            return Plan(400, "POST /v1/completions", post("/v1/completions", self.completion(), host=False),
                        refusal(REASON_HOST))
        if kind == "gzip_body":
            encoding = ("gzip", "deflate", "br")[i % 3]
            data = request_bytes(t, "POST", "/v1/completions", gzip.compress(json_bytes(self.completion())),
                                 headers=[f"Content-Encoding: {encoding}"])
            return Plan(415, encoding, data, refusal(REASON_ENCODING))
        if kind == "malformed_json":
            good = json_bytes(self.completion())
            bodies = [("truncated", good[:-7]), ("trailing_garbage", good + b" x"),
                      ("nan", good[:-1] + b', "temperature": NaN}'),
                      ("lone_surrogate", good[:-1] + b', "user": "\\ud800"}'),
                      ("too_deep", b'{"prompt": ' + b"[" * 100 + b"]" * 100 + b"}"),
                      ("not_json", b"model=smol&prompt=hi"), ("bad_utf8", good[:-1] + b', "user": "\xff\xfe"}')]
            variant, body = bodies[i % len(bodies)]
            return Plan(400, variant, request_bytes(t, "POST", "/v1/completions", body), refusal(REASON_JSON))
        if kind == "no_api_key":
            cases = [("none /v1/completions", "POST", "/v1/completions", None),
                     ("none /v1/models", "GET", "/v1/models", None), ("none /tokenize", "POST", "/tokenize", None),
                     ("none /detokenize", "POST", "/detokenize", None),
                     ("wrong key", "POST", "/v1/chat/completions", f"Bearer {t.api_key}x"),
                     ("basic scheme", "POST", "/v1/completions", f"Basic {t.api_key}")]
            variant, method, path, authorization = cases[i % len(cases)]
            body = {"/tokenize": {"model": t.model, "prompt": "hi"}, "/detokenize": {"model": t.model, "tokens": [1]},
                    "/v1/chat/completions": {"model": t.model, "messages": [{"role": "user", "content": "hi"}]}}.get(
                        path, self.completion())
            data = request_bytes(t, method, path, json_bytes(body) if method == "POST" else None, auth=False,
                                 authorization=authorization)
            return Plan(401, variant, data, refusal(REASON_AUTH))
        raise ValueError(kind)

    async def send(self, kind, plan):
        if kind != "large_upload":
            return await asyncio.wait_for(exchange(self.t, plan.data, **plan.options), REQUEST_TIMEOUT_S)
        async with self.upload_slot:
            return await asyncio.wait_for(exchange(self.t, plan.data, **plan.options), REQUEST_TIMEOUT_S)

    async def run_one(self, kind, i):
        plan = self.plan(kind, i)
        retried = 0
        while True:
            try:
                got = await self.send(kind, plan)
                if plan.parse == "cut":
                    status, headers, rest = parse_head(got)
                    body = rest = b""
                else:
                    status, headers, body, rest = parse_final(got, head=plan.parse == "head")
            except (OSError, asyncio.TimeoutError, ProtocolError, ValueError) as e:
                return Outcome(kind, plan.variant, plan.expected, None, False, f"{type(e).__name__}: {e}"[:300], retried)
            if status == 429 and plan.expected != 429 and retried < MAX_429_RETRIES and "retry-after" in headers:
                retried += 1
                await asyncio.sleep(float(headers["retry-after"]))
                continue
            break
        if status != plan.expected:
            return Outcome(kind, plan.variant, plan.expected, status, False, body[:300].decode(errors="replace"),
                           retried)
        if plan.parse == "cut":
            self.num_cuts += 1
        problem = plan.check(status, headers, body, rest)
        return Outcome(kind, plan.variant, plan.expected, status, not problem, problem, retried)

    async def worker(self, deadline, counter, max_requests, gap_s, outcomes):
        """Takes the next request number from `counter` (shared by the workers: [next]) and runs
        kinds round robin, so that every kind runs about as often, until the deadline (but at
        least one round of every kind) or max_requests."""
        kinds = self.kinds()
        while (time.time() < deadline or counter[0] < len(kinds)) and counter[0] < max_requests:
            i = counter[0]
            counter[0] += 1
            outcomes.append(await self.run_one(kinds[i % len(kinds)], i // len(kinds)))
            await asyncio.sleep(gap_s)


def check_plain_answer(status, headers, body, rest):
    try:
        obj = json.loads(body)
        finish = obj["choices"][0]["finish_reason"]
        tokens = obj["usage"]["completion_tokens"]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"not a completion: {body[:200]!r}"
    if finish not in ("stop", "length") or not 1 <= tokens:
        return f"finish_reason {finish}, completion_tokens {tokens}"
    return "" if not rest else f"{len(rest)} bytes after the answer"


def check_tokenized(status, headers, body, rest):
    try:
        obj = json.loads(body)
        ok = obj["count"] == len(obj["tokens"]) > 0
    except (ValueError, KeyError, TypeError):
        ok = False
    return "" if ok else f"not a /tokenize answer: {body[:200]!r}"


def check_sse_answer(status, headers, body, rest):
    problem = check_sse(body)
    return problem or ("" if not rest else f"{len(rest)} bytes after the answer")


def check_cut(status, headers, body, rest):
    return "" if "chunked" in headers.get("transfer-encoding", "") else f"not a stream: {headers}"


def check_head(status, headers, body, rest):
    """rest: the GET's answer, which must follow the HEAD's head at once and match its length."""
    if not rest.startswith(b"HTTP/1.1 200 "):
        return f"the HEAD's head is followed by {rest[:80]!r}, not the GET's answer"
    get_status, _, get_body, after = parse_final(rest)
    if "content-length" not in headers or int(headers["content-length"]) != len(get_body):
        return f"HEAD's Content-Length {headers.get('content-length')}, GET's body {len(get_body)} bytes"
    return "" if not after else f"{len(after)} bytes after the GET's answer"
