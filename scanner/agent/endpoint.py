"""The agent's HTTP endpoint: GET /health, GET /metrics, POST /suspects, POST /pause, POST /resume.

/health answers 200 when the agent's verdict needs no one (healthy, paused, starting) and 503 otherwise
(``scanner.agent.verdict``: the body's ``state`` says which). Bodies are bounded in
size and nesting, read with a timeout, and must be as long as their Content-Length says; a request
whose change cannot be saved (a full or read-only state dir) is answered 503 and changes nothing.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

from scanner.agent.metrics import exposition
from scanner.agent.verdict import Verdict

log = logging.getLogger(__name__)

MAX_BODY = 1 << 16
# A suspect body is a list of objects: anything nested deeper is not one.
MAX_JSON_DEPTH = 4
READ_TIMEOUT_SECONDS = 10.0


def suspect_items(body: bytes) -> list:
    """The JSON values of a ``POST /suspects`` body (one value or a list of them); BadRequest when it is not that."""
    text = body.decode("utf-8", "replace")
    if json_depth(text) > MAX_JSON_DEPTH:
        raise BadRequest(f"JSON nested deeper than {MAX_JSON_DEPTH} levels: expected {{\"ledger\": N}} or a list of those")
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"not JSON: {exc}") from None
    return parsed if isinstance(parsed, list) else [parsed]


class Endpoint:
    """Serves ``agent`` on ``host:port`` (port 0: a free one) in a daemon thread; binds at once (OSError if busy)."""

    def __init__(self, agent, host: str, port: int):
        handler = type("Handler", (_Handler,), {"agent": agent})
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="endpoint", daemon=True)

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()


class BadRequest(ValueError):
    """The request body cannot be used; the message says why (HTTP 400)."""


def json_depth(text: str) -> int:
    """How deeply ``text``'s arrays and objects nest (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


class _Handler(BaseHTTPRequestHandler):
    agent = None
    server_version = "bookie-scanner"
    timeout = READ_TIMEOUT_SECONDS  # a client that stops sending is dropped, not waited for

    def log_message(self, fmt, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_GET(self) -> None:
        if self.path == "/health":
            health = self.agent.health()
            self._json(Verdict(health["state"], health["state_reason"]).http_status, health)
        elif self.path == "/alive":
            # For a liveness probe or a container's HEALTHCHECK: only a failing or stalled scanner is worth a
            # restart; damage found (a 503 on /health) is the operator's news, and a restart would not end it.
            health = self.agent.health()
            self._json(503 if health["state"] == "failing" else 200,
                       {"state": health["state"], "state_reason": health["state_reason"]})
        elif self.path == "/metrics":
            self._send(200, exposition(self.agent.registry), CONTENT_TYPE_LATEST)
        else:
            self._json(404, {"error": f"no {self.path}: try /health, /alive, /metrics"})

    def do_POST(self) -> None:
        actions = {"/pause": self._pause, "/resume": self._resume, "/suspects": self._suspects}
        action = actions.get(self.path)
        if action is None:
            self._json(404, {"error": f"no POST {self.path}: try /suspects, /pause, /resume"})
            return
        try:
            status, answer = action()
        except BadRequest as exc:
            status, answer = 400, {"error": str(exc)}
        except OSError as exc:  # the change could not be saved: nothing was changed
            status, answer = 503, {"error": f"not saved, nothing changed: {exc.strerror or exc}"}
        self._json(status, answer)

    def _pause(self) -> tuple[int, dict]:
        self.agent.set_paused(True)
        return 200, {"paused": True}

    def _resume(self) -> tuple[int, dict]:
        self.agent.set_paused(False)
        return 200, {"paused": False}

    def _suspects(self) -> tuple[int, dict]:
        items = suspect_items(self._body())
        try:
            return 202, {"queued": self.agent.add_suspects(items)}
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _body(self):
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            raise BadRequest(f"expected a JSON body of at most {MAX_BODY} bytes with Content-Length")
        try:
            raw = self.rfile.read(int(length))
        except TimeoutError:
            self.close_connection = True
            raise BadRequest(f"the {length} bytes Content-Length announced did not arrive within "
                             f"{READ_TIMEOUT_SECONDS:g}s") from None
        if len(raw) != int(length):
            self.close_connection = True
            raise BadRequest(f"the body ended after {len(raw)} of the {length} bytes Content-Length announced")
        return raw

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj, indent=1).encode() + b"\n", "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
