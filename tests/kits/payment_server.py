"""A fake payment API for the effect tests: a real HTTP server on a loopback port (a thread of
the test process) that deduplicates charges on their effect key, as real payment APIs do on
an idempotency key.

* `POST /charges {"key", "amount"}` — a charge; the first one of a key is an effect, a later
  one answers the same charge without a new effect. With `X-Kill-Pid: PID` and
  `X-Kill-After: N` the server, once N such charges are recorded, kills PID with SIGKILL
  before answering any of them (a crash during the side effect).
* `GET /charges/{key}` — the charge of a key (404 if none): what a `reconcile` asks.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    # A batch of trials charges at once: a deep listen queue refuses none of them.
    request_queue_size = 1024
    daemon_threads = True


class PaymentServer:
    """The server, its charges by key and how many requests each key got."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, Any]] = {}
        self.effects: Counter[str] = Counter()
        """Effects per key: 1 for every charged key if deduplication holds."""
        self.posts: Counter[str] = Counter()
        self.gets: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._doomed: Counter[int] = Counter()
        self._killed: dict[int, threading.Event] = {}
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> PaymentServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def charge(self, key: str, amount: int) -> dict[str, Any]:
        with self._lock:
            self.posts[key] += 1
            charge = self.charges.get(key)
            if charge is None:
                charge = self.charges[key] = {"id": f"ch_{len(self.charges) + 1}", "amount": amount}
                self.effects[key] += 1
            return charge

    def kill_after(self, pid: int, count: int) -> None:
        """Count one charge towards killing `pid`; block until it is killed."""
        with self._lock:
            self._doomed[pid] += 1
            killed = self._killed.setdefault(pid, threading.Event())
            if self._doomed[pid] == count:
                os.kill(pid, signal.SIGKILL)
                killed.set()
        killed.wait(30)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def _answer(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                charge = server.charge(body["key"], body["amount"])
                pid = self.headers.get("X-Kill-Pid")
                if pid is not None:
                    server.kill_after(int(pid), int(self.headers["X-Kill-After"]))
                    return
                self._answer(200, charge)

            def do_GET(self) -> None:
                key = self.path.rsplit("/", 1)[-1]
                with server._lock:
                    server.gets[key] += 1
                    charge = server.charges.get(key)
                self._answer(404 if charge is None else 200, charge or {})

        return Handler
