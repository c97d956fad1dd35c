"""The agent's HTTP endpoint: GET /health, GET /metrics, POST /suspects, POST /pause, POST /resume."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

from scanner.agent.metrics import exposition

log = logging.getLogger(__name__)

MAX_BODY = 1 << 16


def suspect_items(body: bytes) -> list:
    """The JSON values of a ``POST /suspects`` body (one value or a list of them); ValueError when it is not JSON."""
    try:
        parsed = json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    return parsed if isinstance(parsed, list) else [parsed]


class Endpoint:
    """Serves ``agent`` on ``host:port`` (port 0: a free one) in a daemon thread."""

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
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    agent = None
    server_version = "bookie-scanner"

    def log_message(self, fmt, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, self.agent.health())
        elif self.path == "/metrics":
            self._send(200, exposition(self.agent.registry), CONTENT_TYPE_LATEST)
        else:
            self._json(404, {"error": f"no {self.path}: try /health, /metrics"})

    def do_POST(self) -> None:
        if self.path == "/pause":
            self.agent.set_paused(True)
            self._json(200, {"paused": True})
            return
        if self.path == "/resume":
            self.agent.set_paused(False)
            self._json(200, {"paused": False})
            return
        if self.path != "/suspects":
            self._json(404, {"error": f"no POST {self.path}: try /suspects, /pause, /resume"})
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            self._json(400, {"error": f"expected a JSON body of at most {MAX_BODY} bytes with Content-Length"})
            return
        try:
            queued = self.agent.add_suspects(suspect_items(self.rfile.read(int(length))))
        except ValueError as exc:  # JSONDecodeError is a ValueError too
            self._json(400, {"error": str(exc)})
            return
        self._json(202, {"queued": queued})

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj, indent=1).encode() + b"\n", "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
