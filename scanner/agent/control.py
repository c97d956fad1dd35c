"""How commands reach the agent: its address file, the persisted pause flag, and HTTP calls."""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from scanner.statefile import DamagedStateFile, read_json, write_json

ADDRESS_FILE = "agent.json"
PAUSE_FILE = "paused"
TIMEOUT_SECONDS = 5.0

log = logging.getLogger(__name__)


class AgentNotRunning(Exception):
    """No agent answers for this state dir."""


def write_address(state_dir: Path, address: str) -> None:
    write_json(Path(state_dir) / ADDRESS_FILE, {"pid": os.getpid(), "listen": address})


def remove_address(state_dir: Path) -> None:
    try:
        os.unlink(Path(state_dir) / ADDRESS_FILE)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a state dir gone read-only: commands find no agent answering there anyway
        log.warning("%s: not removed: %s", Path(state_dir) / ADDRESS_FILE, exc.strerror or exc)


def is_paused(state_dir: Path) -> bool:
    return (Path(state_dir) / PAUSE_FILE).is_file()


def persist_pause(state_dir: Path, paused: bool) -> None:
    """Pause survives restarts: it is a file in the state dir, not the agent's memory."""
    path = Path(state_dir) / PAUSE_FILE
    if paused:
        write_json(path, {"paused": True})
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def call_agent(state_dir: Path, method: str, path: str, body=None):
    """The agent's JSON answer to one request; AgentNotRunning when none answers."""
    try:
        info = read_json(Path(state_dir) / ADDRESS_FILE)
    except DamagedStateFile as exc:
        raise AgentNotRunning(str(exc)) from None
    if not isinstance(info, dict) or not isinstance(info.get("listen"), str):
        raise AgentNotRunning(f"no agent address in {Path(state_dir) / ADDRESS_FILE}")
    host, _, port = info["listen"].rpartition(":")
    if ":" in host:
        host = f"[{host}]"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{host}:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}") | {"http_status": exc.code}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AgentNotRunning(f"no agent answers at {info['listen']}: {exc}") from None
