"""Security: a catalogue of hostile inputs. Each case checks the exact status, the OpenAI error
envelope {"error": {"message", "type", "param", "code"}} (the transport's own 4xx/5xx carry it
too), and that a good request right after it still succeeds. Sections: HTTP framing and limits,
slow clients, auth, JSON, parameters, Unicode, request chat templates (sandbox), file names in
requests, malformed GGUF files at startup. test_bad_input.py holds the simpler body cases."""
import json
import os
import re
import socket
import subprocess
import threading
import time

import httpx
import pytest

import gguf_mutate
from conftest import MODEL, MODEL_NAME, Server, assert_error_envelope, free_port, kvasir_bin

C = "/v1/completions"
CH = "/v1/chat/completions"
GOOD = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2}
GOOD_RAW = json.dumps(GOOD).encode()


def good(**kw):
    return {**GOOD, **kw}


def chat(**kw):
    return {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **kw}


# ---------------------------------------------------------------------------------------------
# raw HTTP helpers


_PENDING = {}  # id(socket) -> bytes read past the previous response (pipelining)


def read_response(sock, deadline_s=30):
    """Reads one response (Content-Length framed or until close); returns (status, headers, body)."""
    sock.settimeout(deadline_s)
    data = _PENDING.pop(id(sock), b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    if b"\r\n\r\n" not in data:
        return None, {}, data
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(body) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    if len(body) > n:
        _PENDING[id(sock)] = body[n:]
    return status, headers, body[:n]


def raw_exchange(port, data, deadline_s=30):
    with socket.create_connection(("127.0.0.1", port), timeout=deadline_s) as s:
        s.sendall(data)
        return read_response(s, deadline_s)


def check_envelope(status, headers, body, expected):
    assert status == expected, (status, body[:300])
    assert headers.get("content-type", "").startswith("application/json"), headers
    obj = json.loads(body)
    assert set(obj) == {"error"}, obj
    err = obj["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"], err
    assert err["type"] == ("server_error" if expected >= 500 else "invalid_request_error"), err
    return err


def post(path, body, extra_headers=b"", version=b"HTTP/1.1"):
    return (b"POST " + path + b" " + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n" + extra_headers +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.fixture
def still_healthy(server):
    yield
    r = httpx.post(server.base + C, json=GOOD, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


# ---------------------------------------------------------------------------------------------
# HTTP framing and limits (the test server runs with --max-body-bytes 1 MiB)

CHUNKED_GOOD = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                b"%x\r\n" % len(GOOD_RAW) + GOOD_RAW + b"\r\n0\r\n\r\n")

FRAMING_ERRORS = [
    ("garbage_request_line", b"GARBAGE\r\n\r\n", 400),
    ("request_line_extra_token", b"GET /health HTTP/1.1 extra\r\nHost: x\r\n\r\n", 400),
    ("http_0_9_request_line", b"GET /health\r\n\r\n", 400),
    ("http_2_0_version", b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ("bare_lf_line_endings", b"GET /health HTTP/1.1\nHost: x\n\n", 400),
    ("method_too_long", b"A" * 100 + b" /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("control_byte_in_uri", b"GET /he\x01alth HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("invalid_utf8_in_uri", b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("uri_too_long", b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    ("header_without_colon", b"GET /health HTTP/1.1\r\nHost: x\r\nBadHeader\r\n\r\n", 400),
    ("space_before_colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    ("obs_fold_continuation", b"GET /health HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 400),
    ("whitespace_before_first_header", b"GET /health HTTP/1.1\r\n Host: x\r\n\r\n", 400),
    ("nul_in_header_value", b"GET /health HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400),
    ("two_host_headers", b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("http_1_1_without_host", b"GET /health HTTP/1.1\r\n\r\n", 400),
    ("http_1_1_post_without_host", b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(GOOD_RAW) +
     GOOD_RAW, 400),
    ("header_block_too_large", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n", 431),
    ("too_many_headers", b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) +
     b"\r\n", 431),
    ("conflicting_content_lengths", post(b"/v1/completions", GOOD_RAW, b"Content-Length: 5\r\n"), 400),
    ("content_length_list_differs", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello",
     400),
    ("negative_content_length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    ("plus_signed_content_length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400),
    ("hex_content_length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0x10\r\n\r\n", 400),
    ("content_length_over_body_limit",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 413),
    ("content_length_overflows_u64",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999999999999999\r\n\r\n", 413),
    ("te_and_content_length",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("te_on_http_1_0", b"POST /v1/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("te_chunked_twice", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400),
    ("te_gzip_unsupported", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    ("chunk_size_not_hex", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    ("chunk_size_overflow",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n", 413),
    ("chunk_data_without_crlf",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX0\r\n\r\n", 400),
    ("chunked_body_over_limit", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
     b"".join(b"40000\r\n" + b"a" * 0x40000 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n", 413),
]


@pytest.mark.parametrize("name,data,status", FRAMING_ERRORS, ids=[c[0] for c in FRAMING_ERRORS])
def test_framing_errors(server, still_healthy, name, data, status):
    try:
        got = raw_exchange(server.port, data)
    except (ConnectionResetError, BrokenPipeError):
        pytest.fail("the server reset the connection instead of answering")
    err = check_envelope(*got, status)
    assert got[1].get("connection") == "close", got[1]  # a refused request never keeps the connection
    assert err["code"]
    if "without_host" in name:  # the message says what was wrong, not only "malformed"
        assert "missing Host header" in err["message"], err


FRAMING_OK = [
    ("chunked_body", CHUNKED_GOOD),
    ("chunk_extension_ignored", CHUNKED_GOOD.replace(b"\r\n\r\n%x\r\n" % len(GOOD_RAW),
                                                     b"\r\n\r\n%x;ext=1\r\n" % len(GOOD_RAW))),
    ("equal_duplicate_content_length", post(b"/v1/completions", GOOD_RAW,
                                            b"Content-Length: %d\r\n" % len(GOOD_RAW))),
    ("expect_100_continue", post(b"/v1/completions", GOOD_RAW, b"Expect: 100-continue\r\n")),
    ("http_1_0_request", post(b"/v1/completions", GOOD_RAW, version=b"HTTP/1.0")),
]


@pytest.mark.parametrize("name,data", FRAMING_OK, ids=[c[0] for c in FRAMING_OK])
def test_framing_accepted(server, name, data):
    status, headers, body = raw_exchange(server.port, data)
    if status == 100:  # Expect: 100-continue: the interim response, then the real one
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            head, _, rest = data.partition(b"\r\n\r\n")
            s.sendall(head + b"\r\n\r\n")
            assert read_response(s)[0] == 100
            s.sendall(rest)
            status, headers, body = read_response(s)
    assert status == 200, body[:300]
    assert json.loads(body)["usage"]["completion_tokens"] >= 1


def test_pipelined_requests_answered_in_order(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n" + post(b"/v1/completions", GOOD_RAW) +
                  b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(s)[0] == 200
        assert read_response(s)[0] == 200
        check_envelope(*read_response(s), 404)


@pytest.mark.parametrize("path", [b"/health", b"/v1/models", b"/v1/models/" + MODEL_NAME.encode(), b"/version",
                                  b"/metrics"])
def test_head_answers_like_get_without_a_body(server, path):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        # HEAD then GET on one connection: a body sent for the HEAD would be read as the next answer.
        s.sendall(b"HEAD " + path + b" HTTP/1.1\r\nHost: x\r\n\r\nGET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(30)
        data = b""
        while data.count(b"\r\n\r\n") < 2:
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
        head_part, _, rest = data.partition(b"\r\n\r\n")
        assert head_part.startswith(b"HTTP/1.1 200 "), head_part
        assert rest.startswith(b"HTTP/1.1 200 "), rest[:200]  # no body bytes between the two
        _PENDING[id(s)] = rest
        status, headers, body = read_response(s)
        assert status == 200
        if path != b"/metrics":  # metrics change between the two requests
            head_len = [l for l in head_part.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            assert head_len == [b"Content-Length: %d" % len(body)], (head_len, len(body))


def test_head_on_a_post_route_is_405_naming_the_methods(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"HEAD /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
    assert data.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: POST\r\n" in data, data
    status, headers, _ = raw_exchange(server.port, b"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 405 and headers.get("allow") == "GET, HEAD", (status, headers)


@pytest.mark.parametrize("encoding", [b"gzip", b"deflate", b"br", b"gzip, identity"])
def test_compressed_body_is_415(server, still_healthy, encoding):
    import gzip
    data = post(b"/v1/completions", gzip.compress(GOOD_RAW), b"Content-Encoding: " + encoding + b"\r\n")
    err = check_envelope(*raw_exchange(server.port, data), 415)
    assert err["code"] == "unsupported_media_type" and "Content-Encoding" in err["message"], err


def test_identity_content_encoding_is_accepted(server):
    status, _, body = raw_exchange(server.port, post(b"/v1/completions", GOOD_RAW, b"Content-Encoding: identity\r\n"))
    assert status == 200, body[:300]


def read_final_response(sock, deadline_s=60):
    """read_response, skipping interim 1xx answers (a server may send them at any time)."""
    while True:
        status, headers, body = read_response(sock, deadline_s)
        if status is None or status >= 200:
            return status, headers, body


@pytest.mark.parametrize("stream", [False, True])
def test_half_closed_client_gets_its_answer(server, stream):
    # curl and proxies may shutdown(SHUT_WR) once the request is sent: HTTP allows it.
    aborts = server.metric("kvasir:server_client_aborts_total")
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(post(b"/v1/completions", json.dumps(good(max_tokens=3, stream=stream)).encode()))
        s.shutdown(socket.SHUT_WR)
        status, headers, body = read_final_response(s)
        assert status == 200, body[:300]
        if stream:
            assert headers.get("transfer-encoding") == "chunked"
            body = _PENDING.pop(id(s), b"")
            while b"0\r\n\r\n" not in body and b"[DONE]" not in body:
                chunk = s.recv(65536)
                assert chunk, body
                body += chunk
            assert b"data: [DONE]" in body
        else:
            assert json.loads(body)["usage"]["completion_tokens"] >= 1
        s.settimeout(10)
        while s.recv(65536):  # then the server closes: nothing more can come from this client
            pass
    assert server.metric("kvasir:server_client_aborts_total") == aborts


def test_client_that_closed_outright_is_still_aborted(server, still_healthy):
    # A full close looks like a half-close until a byte is sent: the server's probe draws a reset.
    aborts = server.metric("kvasir:server_client_aborts_total")
    body = json.dumps(good(max_tokens=400, ignore_eos=True)).encode()
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(post(b"/v1/completions", body))
        time.sleep(0.2)
        s.close()
    deadline = time.time() + 30
    while time.time() < deadline and server.metric("kvasir:server_client_aborts_total") < aborts + 3:
        time.sleep(0.1)
    assert server.metric("kvasir:server_client_aborts_total") >= aborts + 3


def test_oversized_body_gets_413_envelope(server, still_healthy):
    body = json.dumps(good(prompt="a" * (2 << 20))).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(post(b"/v1/completions", body)[:4096])  # the headers announce 2 MiB: refused at once
        check_envelope(*read_response(s), 413)


# ---------------------------------------------------------------------------------------------
# slow clients (the header/body read timeout is 10 s)


def test_slow_clients_get_408_and_others_are_served_meanwhile(server, still_healthy):
    # One slowloris (a header line every 0.5 s, never the blank line) and 20 clients that announce
    # a body and send part of it, all at once (one 10 s wait for the whole test).
    t0 = time.time()
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    slow.sendall(b"GET /health HTTP/1.1\r\n")
    stop = threading.Event()

    def drip():
        i = 0
        while not stop.is_set():
            try:
                slow.sendall(b"X-%d: y\r\n" % i)
            except OSError:
                return
            i += 1
            time.sleep(0.5)

    threading.Thread(target=drip, daemon=True).start()
    stalled = []
    try:
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall(post(b"/v1/completions", GOOD_RAW)[:-10])
            stalled.append(s)
        t1 = time.time()
        r = httpx.post(server.base + C, json=GOOD, timeout=60)  # not blocked by them
        assert r.status_code == 200 and time.time() - t1 < 30
        try:
            check_envelope(*read_response(slow, 30), 408)
        finally:
            stop.set()
        assert 9 < time.time() - t0 < 16, time.time() - t0
        for s in stalled:
            check_envelope(*read_response(s, 30), 408)
    finally:
        stop.set()
        slow.close()
        for s in stalled:
            s.close()


# ---------------------------------------------------------------------------------------------
# auth (a second server with --api-key and --trust-request-chat-template)

KEY = "sk-test-0123456789"


@pytest.fixture(scope="module")
def keyed():
    s = Server("--api-key", KEY, "--trust-request-chat-template", "--kv-cache-memory", "64MiB")
    yield s
    assert s.stop() == 0, s.logs()


def keyed_post(keyed, path, body, headers=None, timeout=60):
    return httpx.post(keyed.base + path, json=body, headers={"Authorization": f"Bearer {KEY}", **(headers or {})},
                      timeout=timeout)


AUTH_CASES = [
    ("missing", None),
    ("empty", ""),
    ("wrong_key", f"Bearer nope"),
    ("no_scheme", KEY),
    ("basic_scheme", f"Basic {KEY}"),
    ("lowercase_scheme", f"bearer {KEY}"),
    ("prefix_of_key", f"Bearer {KEY[:-1]}"),
    ("key_plus_suffix", f"Bearer {KEY}x"),
    ("empty_bearer", "Bearer "),
    ("double_space", f"Bearer  {KEY}"),
    ("key_with_nul_like_escape", f"Bearer {KEY}\\x00"),
    ("one_byte_changed_last", f"Bearer {KEY[:-1]}X"),
]


@pytest.mark.parametrize("name,value", AUTH_CASES, ids=[c[0] for c in AUTH_CASES])
def test_auth_rejected(keyed, name, value):
    # Raw bytes: clients would normalize some of these values (trailing space, empty).
    auth = b"" if value is None else b"Authorization: " + value.encode() + b"\r\n"
    for req in (post(b"/v1/completions", GOOD_RAW, auth),
                b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"):
        status, headers, body = raw_exchange(keyed.port, req)
        err = check_envelope(status, headers, body, 401)
        assert err["code"] == "invalid_api_key" and KEY.encode() not in body
    assert keyed_post(keyed, C, GOOD).status_code == 200


def test_auth_first_of_two_authorization_headers_counts(keyed):
    with socket.create_connection(("127.0.0.1", keyed.port), timeout=30) as s:
        s.sendall(post(b"/v1/completions", GOOD_RAW,
                       b"Authorization: Bearer wrong\r\nAuthorization: Bearer " + KEY.encode() + b"\r\n"))
        check_envelope(*read_response(s), 401)


def test_auth_key_in_query_string_is_not_accepted(keyed):
    r = httpx.post(keyed.base + C + f"?api_key={KEY}", json=GOOD, timeout=30)
    assert_error_envelope(r, 401)


def test_auth_probes_stay_open(keyed):
    assert httpx.get(keyed.base + "/health", timeout=10).status_code == 200
    assert httpx.get(keyed.base + "/metrics", timeout=10).status_code == 200


# ---------------------------------------------------------------------------------------------
# JSON documents

JSON_RAW = [
    ("depth_65", C, b'{"prompt":' + b"[" * 65 + b"]" * 65 + b"}"),
    ("depth_100k_no_stack_overflow", C, b"[" * 100000 + b"]" * 100000),
    ("huge_integer", C, b'{"model":"smol","prompt":"hi","max_tokens":99999999999999999999999}'),
    ("number_overflows_double", C, b'{"model":"smol","prompt":"hi","max_tokens":1e400}'),
    ("seed_above_int64", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"seed":18446744073709551616}'),
    ("nan_lowercase", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"temperature":nan}'),
    ("negative_infinity", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"temperature":-Infinity}'),
    ("nan_in_logit_bias", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"logit_bias":{"5":NaN}}'),
    ("duplicate_key_last_is_invalid", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"max_tokens":0}'),
    ("trailing_garbage", C, b'{"model":"smol","prompt":"hi","max_tokens":2}xyz'),
    ("two_documents", C, b'{"model":"smol"} {"prompt":"hi"}'),
    ("utf8_bom", C, b'\xef\xbb\xbf{"model":"smol","prompt":"hi","max_tokens":2}'),
    ("comment", C, b'{"model":"smol",/*c*/"prompt":"hi","max_tokens":2}'),
    ("single_quotes", C, b"{'model':'smol','prompt':'hi'}"),
    ("trailing_comma", C, b'{"model":"smol","prompt":"hi","max_tokens":2,}'),
    ("raw_control_char_in_string", C, b'{"model":"smol","prompt":"h\x01i","max_tokens":2}'),
    ("bad_escape", C, b'{"model":"smol","prompt":"a\\qb","max_tokens":2}'),
    ("top_level_null", C, b"null"),
    ("leading_zero_number", C, b'{"model":"smol","prompt":"hi","max_tokens":02}'),
    ("unterminated_string", CH, b'{"model":"smol","messages":[{"role":"user","content":"hi'),
]


@pytest.mark.parametrize("name,path,raw", JSON_RAW, ids=[c[0] for c in JSON_RAW])
def test_json_documents(server, still_healthy, name, path, raw):
    r = httpx.post(server.base + path, content=raw, headers={"content-type": "application/json"}, timeout=60)
    err = assert_error_envelope(r, 400)
    assert err["type"] == "invalid_request_error"


def test_duplicate_keys_last_wins(server):
    r = httpx.post(server.base + C, content=b'{"model":"smol","prompt":"hi","max_tokens":0,"max_tokens":2}',
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2


# ---------------------------------------------------------------------------------------------
# parameters out of range (beyond test_bad_input.py)

PARAMS = [
    ("temperature_overflows_to_inf", C, good(temperature=1e308), "temperature"),
    ("top_k_2_31", C, good(top_k=2 ** 31), "top_k"),
    ("top_k_2_63", C, good(top_k=2 ** 63), "top_k"),
    ("max_tokens_2_31", C, good(max_tokens=2 ** 31), "max_tokens"),
    ("max_tokens_2_63", C, good(max_tokens=2 ** 63), "max_tokens"),
    ("n_2_31", C, good(n=2 ** 31), "n"),
    ("priority_2_63", C, good(priority=2 ** 63), "priority"),
    ("logprobs_bool_in_completions", C, good(logprobs=True), "logprobs"),
    ("prompt_logprobs_negative", C, good(prompt_logprobs=-1), "prompt_logprobs"),
    ("prompt_logprobs_above_max", C, good(prompt_logprobs=1000), None),
    ("min_tokens_negative", C, good(min_tokens=-1), "min_tokens"),
    ("stop_1000_strings", C, good(stop=["x"] * 1000), "stop"),
    ("stop_empty_string", C, good(stop=[""]), None),
    ("top_p_string_nan", C, good(top_p="NaN"), "top_p"),
    ("max_completion_tokens_negative", CH, chat(max_completion_tokens=-1), "max_tokens"),
    ("stream_options_not_object", C, good(stream=True, stream_options=5), "stream_options"),
    ("chat_template_kwargs_not_object", CH, chat(chat_template_kwargs=5), "chat_template_kwargs"),
    ("best_of_below_n", C, good(n=2, best_of=1), None),
    ("beam_search", C, good(use_beam_search=True), None),
    ("prompt_embeds", C, good(prompt_embeds="AAAA"), None),
    ("guided_whitespace_pattern", C, good(guided_whitespace_pattern=" "), "guided_whitespace_pattern"),
    ("response_format_unknown", CH, chat(response_format={"type": "bogus"}), None),
    ("token_list_200k", C, good(prompt=[1] * 200000), None),
    ("untrusted_request_chat_template", CH, chat(chat_template="{{ 'x' }}"), None),
]


@pytest.mark.parametrize("name,path,body,param", PARAMS, ids=[c[0] for c in PARAMS])
def test_parameters_out_of_range(server, still_healthy, name, path, body, param):
    r = httpx.post(server.base + path, json=body, timeout=60)
    err = assert_error_envelope(r, 400)
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err


# ---------------------------------------------------------------------------------------------
# Unicode

UNICODE_BAD = [
    ("lone_high_surrogate", C, b'{"model":"smol","prompt":"a\\ud800b","max_tokens":2}'),
    ("lone_low_surrogate", C, b'{"model":"smol","prompt":"a\\udc00b","max_tokens":2}'),
    ("high_surrogate_then_non_low", C, b'{"model":"smol","prompt":"a\\ud800\\u0041","max_tokens":2}'),
    ("high_surrogate_at_end", C, b'{"model":"smol","prompt":"a\\udbff","max_tokens":2}'),
    ("lone_surrogate_in_key", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"\\ud800":1}'),
    ("lone_surrogate_in_model", C, b'{"model":"\\udfff","prompt":"hi","max_tokens":2}'),
    ("lone_surrogate_in_chat", CH, b'{"model":"smol","messages":[{"role":"user","content":"\\ud800"}],"max_tokens":2}'),
    ("lone_surrogate_in_stop", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"stop":["\\ud800"]}'),
    ("overlong_nul", C, b'{"model":"smol","prompt":"a\xc0\x80","max_tokens":2}'),
    ("utf8_encoded_surrogate", C, b'{"model":"smol","prompt":"a\xed\xa0\x80","max_tokens":2}'),
    ("five_byte_sequence", C, b'{"model":"smol","prompt":"a\xf8\x88\x80\x80\x80","max_tokens":2}'),
    ("above_u10ffff", C, b'{"model":"smol","prompt":"a\xf4\x90\x80\x80","max_tokens":2}'),
    ("truncated_multibyte", C, b'{"model":"smol","prompt":"a\xe2\x82","max_tokens":2}'),
    ("stray_continuation_byte", C, b'{"model":"smol","prompt":"a\x80","max_tokens":2}'),
    ("invalid_utf8_in_model", C, b'{"model":"\xff","prompt":"hi","max_tokens":2}'),
    ("invalid_utf8_in_key", C, b'{"model":"smol","prompt":"hi","max_tokens":2,"\xfe":1}'),
]


@pytest.mark.parametrize("name,path,raw", UNICODE_BAD, ids=[c[0] for c in UNICODE_BAD])
def test_unicode_rejected(server, still_healthy, name, path, raw):
    r = httpx.post(server.base + path, content=raw, headers={"content-type": "application/json"}, timeout=60)
    assert_error_envelope(r, 400)
    r.content.decode("utf-8")  # the error message itself is valid UTF-8


@pytest.mark.parametrize("prompt", ["a\\ud83d\\ude00b", "a\\u0000b", "\\u202e\\u200b\\ufeff", "\\uffff\\ufffe"])
def test_unicode_accepted(server, prompt):
    raw = b'{"model":"smol","prompt":"' + prompt.encode() + b'","max_tokens":2}'
    r = httpx.post(server.base + C, content=raw, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    r.content.decode("utf-8")


def test_invalid_utf8_path_in_404_is_valid_json(server):
    # %-escapes are not decoded (raw non-ASCII bytes in the target are a 400 above); the message
    # echoes the path and stays valid JSON.
    status, headers, body = raw_exchange(server.port, b"GET /v1/%ff%fe/%c3%a9 HTTP/1.1\r\nHost: x\r\n\r\n")
    check_envelope(status, headers, body, 404)
    body.decode("utf-8")


# ---------------------------------------------------------------------------------------------
# hostile chat templates in requests (--trust-request-chat-template): the sandbox holds

TEMPLATES = [
    ("infinite_recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
    ("range_too_big", "{% for i in range(100000000) %}x{% endfor %}"),
    ("nested_loops_step_limit", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
    ("string_repetition_bomb", "{{ 'x' * 1000000000 }}"),
    ("string_doubling_bomb", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                             "{% endfor %}{{ ns.s|length }}"),
    ("list_bomb", "{{ range(10000000) | list | length }}"),
    ("integer_power_bomb", "{{ 10 ** 100000 }}"),
    ("dunder_class", "{{ ''.__class__.__mro__ }}"),
    ("format_dunder", "{{ '{0.__class__}'.format(messages) }}"),
    ("globals_via_cycler", "{{ cycler.__init__.__globals__ }}"),
    ("include_file", "{% include '/etc/passwd' %}"),
    ("import_file", "{% import 'x.j2' as y %}"),
    ("from_import", "{% from 'x' import y %}"),
    ("extends_file", "{% extends 'base.html' %}"),
    ("syntax_error", "{% for %}"),
    ("unclosed_block", "{% if true %}"),
    ("raise_exception", "{{ raise_exception('boom') }}"),
    ("undefined_function", "{{ nope() }}"),
    ("nesting_too_deep", "{% if true %}" * 200 + "x" + "{% endif %}" * 200),
    ("division_by_zero", "{{ 1 / 0 }}"),
    ("empty_template", ""),
]


def test_huge_template_error_text_is_capped(keyed):
    r = keyed_post(keyed, CH, chat(chat_template="{{ raise_exception('x' * 30000000) }}", max_tokens=1))
    err = assert_error_envelope(r, 400)
    assert len(r.content) < 4096, len(r.content)
    assert "truncated" in err["message"], err["message"][-200:]
    # Streamed errors too (the same cap on every error the server writes).
    r = keyed_post(keyed, CH, chat(chat_template="{{ raise_exception('y' * 3000000) }}", max_tokens=1, stream=True))
    assert r.status_code == 400 and len(r.content) < 4096


@pytest.mark.parametrize("name,template", TEMPLATES, ids=[c[0] for c in TEMPLATES])
def test_hostile_request_chat_template(keyed, name, template):
    t0 = time.time()
    r = keyed_post(keyed, CH, chat(chat_template=template, max_tokens=1))
    err = assert_error_envelope(r, 400)
    assert err["type"] == "invalid_request_error"
    assert "root:" not in r.text  # nothing of /etc/passwd
    assert time.time() - t0 < 30
    assert keyed_post(keyed, CH, chat(max_tokens=1)).status_code == 200


# ---------------------------------------------------------------------------------------------
# no endpoint reads a file named by a request


def test_template_that_is_a_path_is_literal_text(keyed):
    r = keyed_post(keyed, CH, chat(chat_template="/etc/passwd", max_tokens=1))
    assert r.status_code == 200, r.text
    n = httpx.post(keyed.base + "/tokenize", json={"prompt": "/etc/passwd", "add_special_tokens": False},
                   headers={"Authorization": f"Bearer {KEY}"}).json()
    assert r.json()["usage"]["prompt_tokens"] == n["count"]  # the path itself, not the file


@pytest.mark.parametrize("path", ["/v1/models/../../etc/passwd", "/v1/models/%2e%2e%2fetc%2fpasswd", "/etc/passwd",
                                  "/v1/../etc/passwd", "/static/../../etc/passwd"])
def test_paths_never_serve_files(server, path):
    status, headers, body = raw_exchange(server.port, b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404, (status, body)
    assert b"root:" not in body


@pytest.mark.parametrize("model", ["/etc/passwd", "../../etc/passwd", MODEL, "file:///etc/passwd"])
def test_model_names_are_not_paths(server, model):
    err = assert_error_envelope(httpx.post(server.base + C, json=good(model=model), timeout=30), 404)
    assert err["code"] == "model_not_found"


# ---------------------------------------------------------------------------------------------
# malformed GGUF files at startup: clear message, non-zero exit, no crash, no hang

_LAYOUT = gguf_mutate.Layout(MODEL) if os.path.exists(MODEL) else None
GGUF_CASES = sorted(gguf_mutate.mutations(_LAYOUT).items()) if _LAYOUT else []


@pytest.fixture(scope="module")
def mutant_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.mark.parametrize("name,patches", GGUF_CASES, ids=[c[0] for c in GGUF_CASES])
def test_malformed_gguf_refused_at_startup(mutant_dir, name, patches):
    path = str(mutant_dir / f"{name}.gguf")
    gguf_mutate.write_mutated(MODEL, path, patches, head_bytes=_LAYOUT.head_bytes + 4096)
    try:
        p = subprocess.run([kvasir_bin(), "serve", path, "--port", "0", "--kv-cache-memory", "64MiB",
                            "--max-model-len", "256"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    finally:
        os.unlink(path)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 1, f"{name}: exit {p.returncode}\n{out[-2000:]}"
    msg = out[out.rindex("kvasir serve:"):].strip()
    assert "GGUF" in msg or "model config" in msg or "tokenizer" in msg or "weight" in msg, msg
    # One plain line: bytes from the file are quoted escaped (common/quoted_text.h).
    assert not re.search(r"[\x00-\x1f\x7f]", msg), repr(msg)
    if name.startswith("type_"):  # type_<t>_<tensor>: the weight and its type are named
        _, tname, tensor = name.split("_", 2)
        assert f"weight {tensor}" in msg and f"has type {tname}" in msg, msg
    if name == "architecture_with_control_bytes":
        assert "'l\\r\\x1B[m'" in msg, msg
    if name == "block_count_below_the_weights":
        assert "blk.1." in msg and "1 layers" in msg, msg


def test_gguf_context_length_beyond_the_limit_is_served_at_the_limit(mutant_dir):
    # --max-model-len is bounded at 2^24; a file's context of 2^31 - 1 was served at 2^31 - 1.
    ctx = next(k for k in _LAYOUT.kvs if k.endswith(".context_length"))
    path = str(mutant_dir / "context_2_31.gguf")
    gguf_mutate.write_mutated(MODEL, path, [(_LAYOUT.kvs[ctx]["value_at"], gguf_mutate.scalar(_LAYOUT.kvs[ctx], (1 << 31) - 1))],
                              head_bytes=_LAYOUT.head_bytes + 4096)  # zero weights: enough to start and answer
    port = free_port()
    log = mutant_dir / "context_2_31.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([kvasir_bin(), "serve", path, "--port", str(port), "--kv-cache-memory", "64MiB"],
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline, healthy = time.time() + 60, False
        while time.time() < deadline and proc.poll() is None and not healthy:
            try:
                healthy = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert healthy, log.read_text(errors="replace")[-2000:]
        cards = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert 1 <= cards["data"][0]["max_model_len"] <= 1 << 24, cards
        assert "2147483647" in log.read_text(errors="replace")  # the cap is logged
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        os.unlink(path)


# config.json disagreeing with the weights (every shape field) or holding values no model has:
# refused at start with one line naming the tensor (expected and actual shape) or the key. The
# weights are the converted SmolLM2 HF directory's, symlinked beside a mutated config.json.
HF_DIR = os.path.join(os.path.dirname(MODEL), "smollm2-hf")
HF_CASES = [
    ("hidden_size", 640, ["model.embed_tokens.weight has shape [49152, 576], expected [49152, 640]"]),
    ("intermediate_size", 1537, ["mlp.gate_proj.weight has shape [1536, 576], expected [1537, 576]"]),
    ("num_attention_heads", 3, ["self_attn.q_proj.weight has shape [576, 576], expected [192, 576]"]),
    ("num_key_value_heads", 9, ["self_attn.k_proj.weight has shape [192, 576], expected [576, 576]"]),
    ("head_dim", 32, ["self_attn.q_proj.weight has shape [576, 576], expected [288, 576]"]),
    ("vocab_size", 49153, ["model.embed_tokens.weight has shape [49152, 576], expected [49153, 576]"]),
    ("num_hidden_layers", 31, ["model.layers.30."]),
    ("num_hidden_layers", 29, ["model.layers.29.", "29 layers"]),
    ("eos_token_id", 49152, ["'eos_token_id' is 49152"]),
    ("bos_token_id", -1, ["'bos_token_id' is -1"]),
    ("rope_parameters", {"rope_type": "linear", "factor": 0, "rope_theta": 100000.0}, ["'factor' is 0"]),
    ("hidden_size", 0, ["'hidden_size' is 0"]),
    ("sliding_window", -4, ["'sliding_window' is -4"]),
    ("model_type", "ll\rama\x1b[2J", ["model_type 'll\\rama\\x1B[2J'"]),
]


@pytest.mark.skipif(not os.path.isdir(HF_DIR), reason="no converted SmolLM2 HF directory")
@pytest.mark.parametrize("key,value,words", HF_CASES, ids=[f"{c[0]}={c[1]}"[:40] for c in HF_CASES])
def test_hf_config_disagreeing_with_its_weights_is_refused_at_startup(tmp_path, key, value, words):
    for f in os.listdir(HF_DIR):
        if f != "config.json":
            os.symlink(os.path.join(HF_DIR, f), tmp_path / f)
    with open(os.path.join(HF_DIR, "config.json")) as f:
        config = json.load(f)
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    p = subprocess.run([kvasir_bin(), "serve", str(tmp_path), "--port", "0", "--kv-cache-memory", "64MiB",
                        "--max-model-len", "256"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 1, f"exit {p.returncode}\n{out[-2000:]}"
    lines = [line for line in out.splitlines() if "kvasir serve:" in line]
    assert len(lines) == 1, out[-2000:]
    assert not re.search(r"[\x00-\x1f\x7f]", lines[0]), repr(lines[0])
    for w in words:
        assert w in lines[0], lines[0]
