"""Where racks come from, as BookKeeper and Pulsar read them: a topology script, Pulsar's ``/bookies`` JSON.

Both place a bookie by the host of its address, as its registration gives it (``BookieAddressResolver``), not
by its id: ``NetUtils.resolveNetworkLocation`` asks the resolver for the host name. BookKeeper's
``ScriptBasedMapping`` (``networkTopologyScriptFileName``) turns each name into an IP address first
(``CachedDNSToSwitchMapping``), runs the script with at most ``networkTopologyScriptNumberArgs`` of them as
arguments (default 100) and reads one network location per argument, separated by white space. Pulsar's
``BookieRackAffinityMapping`` resolves every bookie its JSON lists (group -> bookie id -> ``{"rack",
"hostname"}``) to its host name and IP address and answers the rack listed for either; an empty rack or
``/`` means none, a rack without a leading ``/`` gets one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from scanner.repair.placement.racks import RackSourceError, normalize_rack

DEFAULT_SCRIPT_ARGS = 100  # CommonConfigurationKeys.NET_TOPOLOGY_SCRIPT_NUMBER_ARGS_DEFAULT
DEFAULT_SCRIPT_TIMEOUT = 10.0
MAX_SCRIPT_OUTPUT = 1 << 20

HostOf = Callable[[str], "str | None"]  # bookie id -> the host of its address; None when it cannot be resolved


def legacy_host(bookie_id: str) -> str | None:
    """The host of a ``host:port`` bookie id (what BookKeeper resolves an id without a registration to)."""
    host, colon, port = bookie_id.rpartition(":")
    return host.strip("[]") if colon and host and port.isdigit() else None


def ip_address(host: str) -> str:
    """``host``'s first address, as Java's ``InetAddress.getByName``; ``host`` itself when it does not resolve."""
    try:
        return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except (OSError, UnicodeError):
        return host


def script_racks(script: Path, bookies: Iterable[str], host_of: HostOf, max_args: int = DEFAULT_SCRIPT_ARGS,
                 timeout: float = DEFAULT_SCRIPT_TIMEOUT) -> dict[str, str]:
    """Bookie id -> rack as the topology script places each bookie's address (bookies without one: none)."""
    addresses = {b: ip_address(host) for b in bookies if (host := host_of(b)) is not None}
    names = sorted(set(addresses.values()))
    racks = dict(zip(names, run_rack_script(script, names, max_args, timeout)))
    return {bookie: racks[address] for bookie, address in addresses.items()}


def run_rack_script(script: Path, names: Sequence[str], max_args: int = DEFAULT_SCRIPT_ARGS,
                    timeout: float = DEFAULT_SCRIPT_TIMEOUT) -> list[str]:
    """One network location per name, from ``script`` run with at most ``max_args`` names at a time."""
    if max_args < 1:
        raise RackSourceError(f"networkTopologyScriptNumberArgs {max_args}: must be at least 1")
    locations: list[str] = []
    for start in range(0, len(names), max_args):
        batch = list(names[start:start + max_args])
        words = _script_output(script, batch, timeout).split()
        if len(words) != len(batch):
            raise RackSourceError(f"topology script {script} printed {len(words)} racks for {len(batch)} "
                                  f"addresses ({' '.join(batch)}): expected one per address")
        for name, word in zip(batch, words):
            if not word.startswith("/"):
                raise RackSourceError(f"topology script {script} placed {name} in {word!r}: a network location "
                                      "starts with '/' (e.g. /rack1 or /region/rack1)")
            locations.append(word.rstrip("/") or "/")
    return locations


def _script_output(script: Path, args: list[str], timeout: float) -> str:
    try:
        # a session of its own: a timeout ends the script and whatever it started
        process = subprocess.Popen([str(script), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise RackSourceError(f"cannot run the topology script {script}: {exc.strerror or exc}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise RackSourceError(f"topology script {script} did not finish within {timeout:g}s") from None
    if process.returncode != 0:
        said = stderr.decode("utf-8", "replace").strip().splitlines()
        raise RackSourceError(f"topology script {script} exited with status {process.returncode}"
                              + (f": {said[-1][:200]}" if said else ""))
    if len(stdout) > MAX_SCRIPT_OUTPUT:
        raise RackSourceError(f"topology script {script} printed over {MAX_SCRIPT_OUTPUT} bytes")
    try:
        return stdout.decode("utf-8")
    except UnicodeDecodeError:
        raise RackSourceError(f"topology script {script} printed bytes that are not UTF-8") from None


def parse_pulsar_bookies(data: bytes, source: str) -> dict[str, dict[str, str | None]]:
    """Pulsar's ``BookiesRackConfiguration``: group -> bookie id -> rack (None: none), from its JSON."""
    if not data.strip():
        return {}
    try:
        document = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RackSourceError(f"{source}: not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise RackSourceError(f"{source}: expected an object of bookie groups, got {type(document).__name__}")
    groups: dict[str, dict[str, str | None]] = {}
    for group, bookies in document.items():
        if not isinstance(bookies, dict):
            raise RackSourceError(f"{source}: group {group!r}: expected an object of bookies, "
                                  f"got {type(bookies).__name__}")
        groups[group] = {}
        for bookie, info in bookies.items():
            rack = info.get("rack") if isinstance(info, dict) else None
            if not isinstance(info, dict) or not isinstance(rack, (str, type(None))):
                raise RackSourceError(f"{source}: group {group!r}, bookie {bookie!r}: expected "
                                      '{"rack": "/rack1", "hostname": ...}, got ' + json.dumps(info)[:120])
            groups[group][bookie] = normalize_rack(rack or "")
    return groups


def pulsar_racks(groups: dict[str, dict[str, str | None]], bookies: Iterable[str], host_of: HostOf) -> dict[str, str]:
    """Bookie id -> rack as Pulsar's mapping answers for each bookie's host (bookies it does not place: none)."""
    by_host: dict[str, str | None] = {}
    for listed in groups.values():  # a later group's entry for the same host wins, as in Pulsar's map
        for bookie, rack in listed.items():
            host = host_of(bookie)
            if host is not None:
                by_host[host] = by_host[ip_address(host)] = rack
    placed = {}
    for bookie in bookies:
        host = host_of(bookie)
        rack = by_host.get(host) if host is not None else None
        if rack is not None:
            placed[bookie] = rack
    return placed
