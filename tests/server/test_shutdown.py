"""SIGTERM: in-flight requests drain within --shutdown-timeout (or are aborted at once with 0 and
get an SSE error event), new connections are refused, and the process exits 0."""
import json
import signal
import socket
import threading
import time

import httpx

from conftest import MODEL_NAME, Server


def _stream_events(base, body, events, started):
    with httpx.Client(base_url=base, timeout=120) as c:
        with c.stream("POST", "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    started.set()


def _start_stream(server, max_tokens):
    events, started = [], threading.Event()
    body = {"model": MODEL_NAME, "prompt": "Tell me a story:", "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True}
    t = threading.Thread(target=_stream_events, args=(server.base, body, events, started), daemon=True)
    t.start()
    assert started.wait(60), server.logs()
    return t, events


def test_sigterm_drains_in_flight_requests():
    s = Server("--shutdown-timeout", "60")
    t, events = _start_stream(s, 24)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    # The listener is closed: new connections fail.
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=2) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = sock.recv(100)
            assert reply == b"" or b" 503 " in reply
    except OSError:
        pass
    t.join(60)
    assert events[-1] == "[DONE]"
    finals = [json.loads(e) for e in events[:-1]]
    assert finals[-1]["choices"][0]["finish_reason"] == "length"
    assert s.proc.wait(60) == 0, s.logs()
    s.log.close()


def test_sigterm_with_zero_timeout_aborts_with_an_error_event():
    s = Server("--shutdown-timeout", "0")
    t, events = _start_stream(s, 400)
    s.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert s.proc.wait(60) == 0, s.logs()
    s.log.close()
    assert events[-1] == "[DONE]"
    err = json.loads(events[-2])
    assert "error" in err and err["error"]["code"] == "service_unavailable", events[-3:]
