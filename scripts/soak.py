#!/usr/bin/env python3
"""Load and soak test for `kvasir serve` (loopback only, bounded in time and count).

Phase 1 (closed loop): N streaming clients with varied prompt and output lengths for D seconds.
Phase 2 (open loop): requests arrive at a fixed rate above capacity for O seconds; the server
must answer the excess only with 429/503 + Retry-After (its --max-num-queued-reqs bound).
Phase 3 (hostile mix, --hostile-duration H seconds, at least one round of every kind): normal
streaming clients replay a fixed pool of requests, first once undisturbed for reference answers,
while --hostile-clients clients (scripts/soak_hostile.py) run, round robin, issue 14's findings,
each with its expected answer: few-MB prompts on /v1/completions, /v1/chat/completions and
/tokenize (400: longer than max_model_len x the longest token) and ~2x max_model_len tokens (400;
/tokenize counts them, 200), a body over --max-body-bytes (413 from Content-Length), prompts x n
over the queue bound (400), prompt + max_tokens over max_model_len (400), half-closed clients
(shutdown(SHUT_WR) after the request: 200 and the whole answer), streams cut after their first
event by a close or a reset (each one client abort; its KV freed), slow readers (a 4 KiB window
read at 8 KiB/s: 200 and the whole stream), HEAD on /health and /v1/models (200, the GET's
Content-Length, no body), HTTP/1.1 without Host (400), a gzip body (415), malformed JSON (400)
and, when the server has an API key, requests without it or with a wrong one (401). A refusal
counts only with OpenAI's error envelope and a message naming its reason.
Throughout: /health latency is sampled, resident memory (VmRSS from /proc/PID/status) is
sampled, and after each phase KV usage (/metrics) must fall back to 0 within a second of idle.

Pass criteria (exit 1 when one fails; the JSON summary says which):
  zero 5xx outside overload, zero connection resets/protocol errors; every stream ends with a
  finish_reason and [DONE] and its streamed token count equals usage.completion_tokens;
  overload rejections are 429/503 with Retry-After only; RSS slope after warm-up below
  --max-rss-slope MiB/min (over the run after --warmup s, and within phase 3 after its first
  --hostile-warmup s: the phase steps memory up once, then it must stay flat; each only with 10
  samples or more); KV usage 0 within --kv-idle-s of idle; /health p99 < --health-p99-ms (over the
  run and within phase 3). Phase 3 also: every hostile request answered as expected,
  every kind run, every normal stream complete with the same text and tokens as undisturbed
  (decoding is batch invariant here), exactly one client abort per cut stream. A 429 with
  Retry-After in phase 3 (queue full) is waited out and the request sent again (counted as
  retried_429); size the clients below the queue bound to see none.

Either point it at a running server (--base URL --pid PID [--api-key KEY]) or let it start one
(--kvasir BIN [--model PATH] [--server-arg=...]); it gives that one a random --api-key (normal
traffic sends it), then stops it with SIGTERM and checks exit 0.
"""
import argparse
import asyncio
import json
import multiprocessing
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time

import httpx

import soak_hostile

WORDS = ("the of and to in is was for on that with as by at from his her an be this are which or "
         "river mountain engine token stream kernel cache server window garden winter summer ocean "
         "story history science music number letter market doctor teacher planet forest").split()


def percentile(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def slope_per_min(samples):
    """Least-squares slope of (t, v) samples, in v units per minute."""
    if len(samples) < 3:
        return 0.0
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return 0.0 if den == 0 else 60.0 * sum((t - mt) * (v - mv) for t, v in samples) / den


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def msum(m, prefix):
    return sum(v for k, v in m.items() if k.startswith(prefix))


class Stats:
    def __init__(self):
        self.requests = 0
        self.ok = 0
        self.tokens = 0
        self.status = {}
        self.errors = []  # (kind, detail)
        self.rejections_without_retry_after = 0
        self.count_mismatches = 0
        self.missing_done = 0
        self.missing_finish = 0
        self.retried_429 = 0
        self.answer_mismatches = 0  # hostile phase: answers that differ from the undisturbed run

    def error(self, kind, detail):
        if len(self.errors) < 50:
            self.errors.append((kind, str(detail)[:300]))
        else:
            self.errors.append((kind, ""))


def make_request(rng, model, max_prompt_words, max_out):
    n_words = rng.choice([1, 2, 4, 8, 16, 32, 64, max_prompt_words])
    prompt = " ".join(rng.choice(WORDS) for _ in range(min(n_words, max_prompt_words)))
    max_tokens = rng.choice([1, 2, 4, 8, 16, 32, max_out])
    body = {"model": model, "prompt": prompt, "max_tokens": min(max_tokens, max_out), "stream": True,
            "stream_options": {"include_usage": True}, "logprobs": 0, "temperature": rng.choice([0, 0.7, 1.0]),
            "seed": rng.randrange(1 << 30), "ignore_eos": rng.random() < 0.5}
    return body


async def one_stream(client, body, stats, overload, retry_429=False):
    """One streaming request, checked event by event. Returns (text, tokens, finish_reason) when
    the stream was complete and consistent, else None (and the reason is in stats). retry_429: a
    429 with Retry-After is the documented answer to a full queue; wait and send again."""
    stats.requests += 1
    try:
        for _ in range(6):
            async with client.stream("POST", "/v1/completions", json=body) as r:
                stats.status[r.status_code] = stats.status.get(r.status_code, 0) + 1
                if r.status_code == 429 and retry_429 and "retry-after" in r.headers:
                    await r.aread()
                    stats.retried_429 += 1
                    await asyncio.sleep(float(r.headers["retry-after"]))
                    continue
                if r.status_code != 200:
                    await r.aread()
                    if r.status_code in (429, 503) and overload:
                        if "retry-after" not in r.headers:
                            stats.rejections_without_retry_after += 1
                            stats.error("no_retry_after", r.status_code)
                        return None
                    stats.error(f"http_{r.status_code}", r.text[:200])
                    return None
                return await check_stream(r, body, stats)
        stats.error("still_429", "after 5 retries")
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError) as e:
        stats.error("connection_" + type(e).__name__, repr(e))
    except httpx.TimeoutException as e:
        stats.error("timeout", repr(e))
    except json.JSONDecodeError as e:
        stats.error("bad_json", repr(e))
    return None


async def check_stream(r, body, stats):
    text, tokens, finish, usage, done = [], [], None, None, False
    async for line in r.aiter_lines():
        if not line:
            continue
        if not line.startswith("data: "):
            stats.error("bad_sse_line", line[:100])
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        if done:
            stats.error("event_after_done", data[:100])
        obj = json.loads(data)
        if "error" in obj:
            stats.error("sse_error", obj["error"])
            continue
        for ch in obj.get("choices") or []:
            text.append(ch.get("text") or "")
            lp = ch.get("logprobs")
            if lp:
                tokens += lp.get("tokens") or []
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
        if obj.get("usage"):
            usage = obj["usage"]
    if not done:
        stats.missing_done += 1
        stats.error("missing_done", body["max_tokens"])
    if finish not in ("stop", "length"):
        stats.missing_finish += 1
        stats.error("missing_finish_reason", finish)
    if usage is None or usage["completion_tokens"] != len(tokens):
        stats.count_mismatches += 1
        stats.error("token_count_mismatch", f"streamed {len(tokens)}, usage {usage}")
        return None
    if not done or finish not in ("stop", "length"):
        return None
    stats.ok += 1
    stats.tokens += len(tokens)
    return "".join(text), tokens, finish


def health_probe_process(host, port, period_s, stop, out_q):
    """Runs in its own process so that the client's event loop lag is not counted as server
    latency: GET /health on one keep-alive connection every period_s. Reports (time, ms) pairs."""
    import http.client
    lat, codes = [], {}
    conn = None
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            codes[r.status] = codes.get(r.status, 0) + 1
        except (OSError, http.client.HTTPException):
            codes[-1] = codes.get(-1, 0) + 1
            conn = None
        lat.append((time.time(), (time.perf_counter() - t0) * 1000))
        time.sleep(period_s)
    out_q.put((lat, codes))


async def rss_sampler(pid, stop, samples, period_s):
    """Appends (time, MiB) every period_s."""
    while not stop.is_set():
        v = rss_mib(pid) if pid else None
        if v is not None:
            samples.append((time.time(), v))
        await asyncio.sleep(period_s)


def auth_headers(args):
    return {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}


async def closed_loop(args, base, stats, deadline):
    limits = httpx.Limits(max_connections=args.clients + 8, max_keepalive_connections=args.clients + 8)
    async with httpx.AsyncClient(base_url=base, timeout=args.request_timeout, limits=limits,
                                 headers=auth_headers(args)) as client:
        async def worker(i):
            rng = random.Random(args.seed * 100003 + i)
            while time.time() < deadline and stats.requests < args.max_requests:
                await one_stream(client, make_request(rng, args.model, args.max_prompt_words, args.max_tokens),
                                 stats, overload=False)

        await asyncio.gather(*[worker(i) for i in range(args.clients)])


async def open_loop(args, base, stats, duration):
    limits = httpx.Limits(max_connections=args.overload_max_inflight + 8)
    async with httpx.AsyncClient(base_url=base, timeout=args.request_timeout, limits=limits,
                                 headers=auth_headers(args)) as client:
        rng = random.Random(args.seed + 7)
        tasks = set()
        t0 = time.time()
        i = 0
        while time.time() - t0 < duration:
            # Arrivals at a fixed rate whatever the server does (open loop), bounded in flight.
            target = int((time.time() - t0) * args.overload_rate)
            while i < target:
                i += 1
                if len(tasks) >= args.overload_max_inflight:
                    stats.error("client_inflight_cap", "raise --overload-max-inflight")
                    continue
                t = asyncio.create_task(one_stream(client, make_request(rng, args.model, args.max_prompt_words,
                                                                        args.max_tokens), stats, overload=True))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            await asyncio.sleep(0.01)
        if tasks:
            await asyncio.gather(*tasks)


async def idle_check(base, timeout_s):
    """Seconds from 'no request in flight' until KV usage and the running set are 0."""
    t0 = time.time()
    async with httpx.AsyncClient(base_url=base, timeout=10) as c:
        while time.time() - t0 < timeout_s:
            m = parse_metrics((await c.get("/metrics")).text)
            if (msum(m, "kvasir:kv_cache_usage_perc") == 0 and msum(m, "kvasir:num_requests_running") == 0
                    and msum(m, "kvasir:num_requests_waiting") == 0):
                return time.time() - t0, m
            await asyncio.sleep(0.02)
    return None, m


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args):
    port = free_port()
    cmd = [args.kvasir, "serve", args.model_path, "--host", "127.0.0.1", "--port", str(port), "--served-model-name",
           args.model, "--api-key", args.api_key, *args.server_arg]
    log = open(args.server_log, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}; see {args.server_log}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become healthy")


def server_arg_value(args, flag, default):
    """The value given to `kvasir serve` for `flag` in --server-arg ('--flag=V' or '--flag', 'V')."""
    for i, a in enumerate(args.server_arg):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args.server_arg):
            return args.server_arg[i + 1]
    return default


def metric_total(base, name):
    return msum(parse_metrics(httpx.get(base + "/metrics", timeout=10).text), name)


async def hostile_target(args, base):
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=auth_headers(args)) as c:
        r = await c.post("/tokenize", json={"model": args.model, "prompt": "hi"})
        r.raise_for_status()
        max_model_len = r.json()["max_model_len"]
    url = httpx.URL(base)
    queue_bound = args.queue_bound or int(server_arg_value(args, "--max-num-queued-reqs", 8192))
    max_body_bytes = args.max_body_bytes or int(server_arg_value(args, "--max-body-bytes", 32 << 20))
    return soak_hostile.Target(url.host, url.port, args.model, args.api_key, max_model_len, queue_bound,
                               max_body_bytes, min(int(args.upload_mib * (1 << 20)), max_body_bytes - 4096))


async def hostile_phase(args, base, normal, hostile, outcomes):
    """Phase 3: normal streams replay a fixed pool of requests while hostile clients run beside
    them. The pool runs once first, undisturbed, for reference answers: decoding is batch
    invariant on this engine (greedy and seeded sampling alike), so a different answer under
    hostile load is the hostile clients' doing. Returns the phase's (start, end) times."""
    rng = random.Random(args.seed + 13)
    pool = [make_request(rng, args.model, args.max_prompt_words, args.max_tokens) for _ in range(args.hostile_pool)]
    limits = httpx.Limits(max_connections=args.hostile_normal_clients + 8,
                          max_keepalive_connections=args.hostile_normal_clients + 8)
    async with httpx.AsyncClient(base_url=base, timeout=args.request_timeout, limits=limits,
                                 headers=auth_headers(args)) as client:
        slots = asyncio.Semaphore(args.hostile_normal_clients)

        async def undisturbed(body):
            async with slots:
                return await one_stream(client, body, normal, overload=False, retry_429=True)

        reference = await asyncio.gather(*[undisturbed(body) for body in pool])
        t0 = time.time()
        deadline = t0 + args.hostile_duration

        async def normal_worker(i):
            wrng = random.Random(args.seed * 7919 + i)
            while time.time() < deadline and normal.requests < args.max_requests:
                k = wrng.randrange(len(pool))
                got = await one_stream(client, pool[k], normal, overload=False, retry_429=True)
                if got is not None and reference[k] is not None and got != reference[k]:
                    normal.answer_mismatches += 1
                    normal.error("answer_changed", f"pool[{k}] {got[0][:100]!r}, undisturbed {reference[k][0][:100]!r}")

        counter = [0]
        await asyncio.gather(*[normal_worker(i) for i in range(args.hostile_normal_clients)],
                             *[hostile.worker(deadline, counter, args.hostile_max_requests, args.hostile_gap, outcomes)
                               for _ in range(args.hostile_clients)])
    return t0, time.time()


def hostile_summary(args, normal, hostile, outcomes, window, aborts, health, rss):
    """The hostile phase's part of the summary, and its failures."""
    by_kind = {}
    for o in outcomes:
        k = by_kind.setdefault(o.kind, {"sent": 0, "as_expected": 0, "expected": {}, "status": {}, "retried_429": 0})
        k["sent"] += 1
        k["expected"][o.expected] = k["expected"].get(o.expected, 0) + 1
        k["as_expected"] += o.ok
        k["status"][o.status] = k["status"].get(o.status, 0) + 1
        k["retried_429"] += o.retried_429
    bad = [o for o in outcomes if not o.ok]
    in_window = lambda t: window[0] <= t <= window[1]
    h_ms = [ms for t, ms in health if in_window(t)]
    h_rss = [(t, v) for t, v in rss if in_window(t)]
    # The phase steps memory up once (a few-MB body held ~5x while it is prepared, buffers of slow
    # readers), then it must stay flat: the slope counts after the phase's own warm-up.
    h_warm = [(t, v) for t, v in h_rss if t >= window[0] + args.hostile_warmup]
    out = {
        "duration_s": round(window[1] - window[0], 1),
        "normal": {"clients": args.hostile_normal_clients, "pool": args.hostile_pool, "requests": normal.requests,
                   "ok": normal.ok, "tokens": normal.tokens, "status": normal.status, "errors": len(normal.errors),
                   "answer_mismatches": normal.answer_mismatches, "retried_429": normal.retried_429},
        "hostile": {"clients": args.hostile_clients, "requests": len(outcomes), "mismatches": len(bad),
                    "by_kind": by_kind,
                    "first_mismatches": [f"{o.kind} {o.variant}: expected {o.expected}, got {o.status}: {o.detail}"
                                         for o in bad[:10]]},
        "streams_cut": hostile.num_cuts, "client_aborts": aborts,
        "health_p99_ms": round(percentile(h_ms, 99), 2), "health_max_ms": round(max(h_ms, default=0), 2),
        "rss_mib": {"first": round(h_rss[0][1], 1) if h_rss else None, "last": round(h_rss[-1][1], 1) if h_rss else None,
                    "max": round(max(v for _, v in h_rss), 1) if h_rss else None,
                    "slope_mib_per_min_after_warmup": round(slope_per_min(h_warm), 3), "samples_after_warmup": len(h_warm)},
    }
    fails = []
    five = sum(n for s, n in normal.status.items() if s >= 500) + sum(1 for o in outcomes if (o.status or 0) >= 500)
    if five:
        fails.append(f"hostile phase: {five} 5xx responses")
    if bad:
        fails.append(f"hostile phase: {len(bad)} hostile requests not answered as expected")
    if normal.errors:
        fails.append(f"hostile phase: {len(normal.errors)} normal-stream errors ({normal.answer_mismatches} changed answers)")
    if normal.ok == 0:
        fails.append("hostile phase: no normal stream succeeded")
    never = [k for k in hostile.kinds() if k not in by_kind]
    if never:
        fails.append(f"hostile phase: kinds never run {never}")
    if aborts != hostile.num_cuts:
        fails.append(f"hostile phase: {hostile.num_cuts} streams cut but {aborts} client aborts counted")
    if abs(out["rss_mib"]["slope_mib_per_min_after_warmup"]) > args.max_rss_slope and len(h_warm) >= 10:
        fails.append(f"hostile phase: RSS slope {out['rss_mib']['slope_mib_per_min_after_warmup']} MiB/min")
    if h_ms and out["health_p99_ms"] >= args.health_p99_ms:
        fails.append(f"hostile phase: /health p99 {out['health_p99_ms']} ms")
    return out, fails


async def run(args, base, pid):
    t_start = time.time()
    closed = Stats()
    over = Stats()
    stop = asyncio.Event()
    rss = []
    url = httpx.URL(base)
    probe_stop, probe_q = multiprocessing.Event(), multiprocessing.Queue()
    probe = multiprocessing.Process(target=health_probe_process,
                                    args=(url.host, url.port, args.health_period, probe_stop, probe_q), daemon=True)
    probe.start()
    samplers = [asyncio.create_task(rss_sampler(pid, stop, rss, args.rss_period))]
    await closed_loop(args, base, closed, t_start + args.duration)
    t_closed = time.time() - t_start
    kv_idle = {"after_closed_loop": (await idle_check(base, 30))[0]}
    over_s = 0.0
    if args.overload_duration > 0:
        t1 = time.time()
        await open_loop(args, base, over, args.overload_duration)
        over_s = time.time() - t1
        kv_idle["after_overload"] = (await idle_check(base, 30))[0]
    hostile_run = None
    if args.hostile_duration > 0:
        normal, outcomes = Stats(), []
        hostile = soak_hostile.HostileClients(await hostile_target(args, base))
        aborts_before = metric_total(base, "kvasir:server_client_aborts_total")
        window = await hostile_phase(args, base, normal, hostile, outcomes)
        kv_idle["after_hostile"] = (await idle_check(base, 30))[0]
        aborts = metric_total(base, "kvasir:server_client_aborts_total") - aborts_before
        hostile_run = (normal, hostile, outcomes, window, aborts)
    _, m = await idle_check(base, 30)
    stop.set()
    await asyncio.gather(*samplers)
    probe_stop.set()
    health, health_codes = probe_q.get(timeout=30)
    probe.join(10)
    health_ms = [ms for _, ms in health]
    rss_rel = [(t - t_start, v) for t, v in rss]
    warm = [(t, v) for t, v in rss_rel if t >= args.warmup]
    summary = {
        "clients": args.clients,
        "closed_loop_s": round(t_closed, 1),
        "overload_s": round(over_s, 1),
        "closed": {"requests": closed.requests, "ok": closed.ok, "tokens": closed.tokens, "status": closed.status,
                   "errors": len(closed.errors), "count_mismatches": closed.count_mismatches,
                   "missing_done": closed.missing_done, "missing_finish": closed.missing_finish,
                   "tokens_per_s": round(closed.tokens / max(t_closed, 1e-9), 1)},
        "overload": {"rate_per_s": args.overload_rate, "requests": over.requests, "ok": over.ok,
                     "status": over.status, "errors": len(over.errors),
                     "rejections_without_retry_after": over.rejections_without_retry_after},
        "rss_mib": {"first": round(rss[0][1], 1) if rss else None, "last": round(rss[-1][1], 1) if rss else None,
                    "max": round(max(v for _, v in rss), 1) if rss else None,
                    "slope_mib_per_min_after_warmup": round(slope_per_min(warm), 3), "samples": len(rss),
                    "slope_mib_per_min_last_half": round(slope_per_min(rss_rel[len(rss) // 2:]), 3),
                    "series": [(round(t), round(v, 1)) for t, v in rss_rel[::max(1, len(rss) // 40)]]},
        "kv_back_to_zero_s": {k: None if v is None else round(v, 3) for k, v in kv_idle.items()},
        "health": {"samples": len(health_ms), "codes": health_codes, "p50_ms": round(percentile(health_ms, 50), 2),
                   "p99_ms": round(percentile(health_ms, 99), 2), "max_ms": round(max(health_ms, default=0), 2)},
        "preemptions": msum(m, "kvasir:num_preemptions_total"),
        "rejected_queue_full": msum(m, "kvasir:server_rejected_queue_full_total"),
        "first_errors": (closed.errors + over.errors + (hostile_run[0].errors if hostile_run else []))[:10],
    }
    fails = []
    five = sum(n for s, n in closed.status.items() if s >= 500) + sum(
        n for s, n in over.status.items() if s >= 500 and s != 503)
    if five:
        fails.append(f"{five} 5xx responses")
    if closed.errors or over.errors:
        fails.append(f"{len(closed.errors)} closed-loop and {len(over.errors)} overload errors")
    bad_over = {s: n for s, n in over.status.items() if s not in (200, 429, 503)}
    if bad_over:
        fails.append(f"overload answered with {bad_over}")
    if args.overload_duration > 0 and args.require_rejections and not (over.status.get(429) or over.status.get(503)):
        fails.append("overload phase saw no 429/503 (rate not above capacity?)")
    if closed.ok == 0 and args.duration > 0:
        fails.append("no request succeeded")
    if hostile_run:
        summary["hostile_phase"], hostile_fails = hostile_summary(args, *hostile_run, health, rss)
        fails += hostile_fails
    if abs(summary["rss_mib"]["slope_mib_per_min_after_warmup"]) > args.max_rss_slope and len(warm) >= 10:
        fails.append(f"RSS slope {summary['rss_mib']['slope_mib_per_min_after_warmup']} MiB/min")
    for k, v in summary["kv_back_to_zero_s"].items():
        if v is None or v > args.kv_idle_s:
            fails.append(f"KV usage not 0 within {args.kv_idle_s}s of idle ({k}: {v})")
    if summary["health"]["p99_ms"] >= args.health_p99_ms:
        fails.append(f"/health p99 {summary['health']['p99_ms']} ms")
    if any(c != 200 for c in health_codes):
        fails.append(f"/health answered {health_codes}")
    summary["pass"] = not fails
    summary["failures"] = fails
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="URL of a running server (loopback)")
    ap.add_argument("--pid", type=int, help="its process id (for RSS)")
    ap.add_argument("--kvasir", help="start this binary instead")
    ap.add_argument("--model-path", default=os.path.join(os.path.dirname(__file__), "..", "models",
                                                         "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--server-arg", action="append", default=[], help="extra `kvasir serve` argument (repeat)")
    ap.add_argument("--server-log", default="/tmp/kvasir_soak_server.log")
    ap.add_argument("--model", default="smol", help="served model name")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60, help="closed-loop seconds")
    ap.add_argument("--max-requests", type=int, default=1_000_000)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-prompt-words", type=int, default=120)
    ap.add_argument("--overload-duration", type=float, default=20)
    ap.add_argument("--overload-rate", type=float, default=40, help="arrivals per second in the open loop")
    ap.add_argument("--overload-max-inflight", type=int, default=2000)
    ap.add_argument("--require-rejections", action="store_true", help="fail unless overload saw 429/503")
    ap.add_argument("--hostile-duration", type=float, default=20,
                    help="seconds of phase 3, hostile clients among normal streams (0: skip it)")
    ap.add_argument("--hostile-clients", type=int, default=4, help="hostile clients at once")
    ap.add_argument("--hostile-normal-clients", type=int, default=8, help="normal streaming clients in phase 3")
    ap.add_argument("--hostile-pool", type=int, default=8, help="distinct requests the phase-3 normal clients replay")
    ap.add_argument("--hostile-max-requests", type=int, default=20000, help="hostile requests at most")
    ap.add_argument("--hostile-gap", type=float, default=0.05, help="seconds a hostile client waits between requests")
    ap.add_argument("--hostile-warmup", type=float, default=20, help="seconds of phase 3's RSS ignored for its slope")
    ap.add_argument("--upload-mib", type=float, default=3,
                    help="size of the large-upload prompts (kept under the server's --max-body-bytes)")
    ap.add_argument("--api-key", help="the server's --api-key (default: a random one given to the server started here)")
    ap.add_argument("--queue-bound", type=int, help="the server's --max-num-queued-reqs (default: from --server-arg, "
                                                     "else 8192)")
    ap.add_argument("--max-body-bytes", type=int, help="the server's --max-body-bytes (default: from --server-arg, "
                                                       "else 32 MiB)")
    ap.add_argument("--request-timeout", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=30, help="seconds of RSS ignored for the slope")
    ap.add_argument("--max-rss-slope", type=float, default=2.0, help="MiB per minute")
    ap.add_argument("--kv-idle-s", type=float, default=1.0)
    ap.add_argument("--health-p99-ms", type=float, default=50)
    ap.add_argument("--health-period", type=float, default=0.1)
    ap.add_argument("--rss-period", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the summary here too")
    args = ap.parse_args()

    proc = None
    if args.kvasir:
        args.api_key = args.api_key or secrets.token_hex(16)
        proc, base = start_server(args)
        pid = proc.pid
    else:
        if not args.base:
            ap.error("--base or --kvasir is required")
        base, pid = args.base.rstrip("/"), args.pid
    host = httpx.URL(base).host
    if host not in ("127.0.0.1", "localhost", "::1"):
        ap.error("loopback only")
    try:
        summary = asyncio.run(run(args, base, pid))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "killed after 120 s"
    if proc is not None:
        summary["server_exit"] = rc
        if rc != 0:
            summary["pass"] = False
            summary["failures"].append(f"server exit {rc}")
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    sys.exit(0 if summary["pass"] else 1)


if __name__ == "__main__":
    main()
