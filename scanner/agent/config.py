"""The agent's configuration: a TOML file, and environment variables over it, checked whole at load so a
mistake is one line.

Every key can come from the environment as ``BOOKIE_SCANNER_<TABLE>_<KEY>`` (upper case), which wins
over the file: ``BOOKIE_SCANNER_METADATA_URI``, ``BOOKIE_SCANNER_THROTTLE_BYTES_PER_SECOND=50MB``. A
value is read as a TOML value when it is one (``7``, ``true``, ``["/a", "/b"]``, ``"text"``) and as a
string otherwise (``50MB``, ``/etc/bk_server.conf``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scanner.repair.backoff import FIRST_RETRY_SECONDS, RETRY_LIMIT_SECONDS
from scanner.repair.blast_radius import BlastRadius
from scanner.repair.placement.settings import PLACEMENTS, PlacementSettings
from scanner.scan.settling import SETTLE_SECONDS
from scanner.storage.layout import BookieLayout, discover_layout
from scanner.units import parse_quantity
from throttle import AllowedWindows, BackoffPolicy

DEFAULT_LISTEN = "127.0.0.1:9721"
ENV_PREFIX = "BOOKIE_SCANNER_"
SECONDS_PER_DAY = 86400.0
# How a pass is paced: at the configured rate, then idle until the period is over (BP-24), or
# spread evenly over the whole period.
PACE_AT_RATE = "rate"
PACE_SPREAD = "spread"
PACES = (PACE_AT_RATE, PACE_SPREAD)


class ConfigError(ValueError):
    """The config file cannot be used; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class ThrottleConfig:
    bytes_per_second: float | None
    entries_per_second: float | None
    windows: AllowedWindows | None
    outside_factor: float
    backoff: BackoffPolicy
    disk_backoff: bool


@dataclass(frozen=True, slots=True)
class AgentConfig:
    source: Path
    bookie_conf: Path | None
    ledger_dirs: tuple[Path, ...] | None
    bookie_id: str | None
    log_files: tuple[Path, ...]
    metadata_uri: str | None
    misconfigured_exit_seconds: float  # a metadata service answering without the ledgers root this long: exit 2
    state_dir: Path
    listen_host: str
    listen_port: int
    checkpoint_seconds: float
    period_seconds: float
    period_jitter: float  # each period is period_seconds x a factor in [1 - jitter, 1 + jitter]
    start_jitter_seconds: float  # at each start, pass work waits a random delay up to this
    stall_seconds: float  # a scanner thread neither progressing nor idle this long stops the watchdog
    pace: str
    suspect_window_seconds: float
    suspect_limit: int
    settle_seconds: float  # a ledger whose metadata changed less than this ago is judged once this has passed
    throttle: ThrottleConfig
    mark: bool
    repair_command: str | None
    rereplicate: bool = True
    copy_bytes_per_second: float | None = 20_000_000.0
    retry_seconds: float = FIRST_RETRY_SECONDS  # a failed move is tried again after this, then doubling
    blast_radius: BlastRadius = BlastRadius()
    placement: PlacementSettings = PlacementSettings()
    bookie_home: Path | None = None  # relative ledger/index dirs are the bookie's working dir's (Pulsar: /pulsar)
    # a Pulsar bookie container's environment, which makes the bookie's settings (over bookie_conf, if any)
    bookie_environment: Mapping[str, str] | None = None

    def bookie_layout(self) -> BookieLayout:
        """The bookie's layout as this config names it; LayoutError says what is wrong."""
        return discover_layout(self.bookie_conf, ledger_dirs=self.ledger_dirs, bookie_id=self.bookie_id,
                               home=self.bookie_home, environment=self.bookie_environment)


_KNOWN = {
    "bookie": {"conf", "conf_from_env", "home", "ledger_dirs", "bookie_id", "log_files"},
    "metadata": {"uri", "misconfigured_exit_seconds"},
    "agent": {"state_dir", "listen", "checkpoint_seconds", "period_days", "period_jitter", "start_jitter_minutes",
              "stall_minutes", "pace", "suspect_window_minutes", "suspect_limit", "settle_seconds"},
    "throttle": {"bytes_per_second", "entries_per_second", "window_hours", "window_days", "outside_rate",
                 "busy_threshold", "idle_threshold", "floor", "disk_backoff"},
    "repair": {"mark", "repair_command", "rereplicate", "copy_bytes_per_second", "retry_seconds", "moves_per_hour",
               "move_bytes_per_hour", "failed_disk_ledger_share", "failed_disk_min_ledgers", "failed_disk_log_share",
               "failed_disk_min_logs", "placement", "racks_file", "rack_script", "rack_script_args",
               "rack_script_timeout_seconds", "pulsar_racks", "min_racks_per_write_quorum", "enforce_min_racks"},
}
# Keys of earlier versions that mean something else now: the error says what replaced them.
_REPLACED = {
    ("repair", "heal"): "heal in place was removed: a copy added beside a damaged one does not last (the bookie's "
                        "read-ahead and compaction bring the damaged record back); rereplicate = true moves the "
                        "damaged fragment to another bookie instead (see the README's Repair)",
    ("repair", "heal_entries_per_second"): "went with heal; copy_bytes_per_second paces rereplicate",
}


class _Table:
    """One TOML table with typed getters whose errors name the file and the key (or the environment variable)."""

    def __init__(self, source: Path, name: str, values: dict, from_env: frozenset[str] = frozenset()):
        self.source, self.name, self.values, self.from_env = source, name, values, from_env

    def _fail(self, key: str, expected: str) -> ConfigError:
        if key in self.from_env:
            return ConfigError(f"{_env_name(self.name, key)}={self.values[key]!r} (environment, over {self.source}): "
                               f"expected {expected}")
        return ConfigError(f"{self.source}: [{self.name}] {key} = {self.values[key]!r}: expected {expected}")

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.values.get(key, default)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise self._fail(key, "a non-empty string")
        return value

    def number(self, key: str, default: float | None, *, low: float = 0.0, high: float = float("inf"),
               low_open: bool = False) -> float | None:
        value = self.values.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                (value > low if low_open else value >= low) and value <= high):
            bound = f"> {low:g}" if low_open else f">= {low:g}"
            raise self._fail(key, f"a number {bound}" + ("" if high == float("inf") else f" and <= {high:g}"))
        return float(value)

    def quantity(self, key: str, default: float | None, unit: str) -> float | None:
        """A number >= 0, or a string with a prefix and unit: ``50000000``, ``"50MB"``, ``"48MiB/s"``, ``"10k"``."""
        value = self.values.get(key, default)
        if isinstance(value, str):
            try:
                return parse_quantity(value, unit)
            except ValueError:
                pass
        elif value is None or (not isinstance(value, bool) and isinstance(value, (int, float)) and value >= 0):
            return None if value is None else float(value)
        example = '"50MB" or "48MiB"' if unit else '"10k"'
        raise self._fail(key, f"a number >= 0 or a string like {example} (prefixes k, M, G, T and Ki, Mi, Gi, Ti)")

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.values.get(key, default)
        if value not in choices:
            raise self._fail(key, " or ".join(repr(c) for c in choices))
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.values.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false")
        return value

    def paths(self, key: str) -> tuple[Path, ...] | None:
        value = self.values.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self._fail(key, "a path or a list of paths")
        return tuple(self.relative(Path(v)) for v in value)

    def relative(self, path: Path) -> Path:
        # Relative paths in a config file mean relative to that file, not to wherever the agent started.
        return path if path.is_absolute() else self.source.parent / path


def load_config(path: Path, environ: Mapping[str, str] = os.environ) -> AgentConfig:
    """Read and check the whole config (``environ``'s variables over the file); ConfigError (one line) on the first
    problem."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for name, values in raw.items():
        if name not in _KNOWN or not isinstance(values, dict):
            raise ConfigError(f"{path}: unknown table [{name}]; expected {', '.join(f'[{t}]' for t in _KNOWN)}")
        unknown = set(values) - _KNOWN[name]
        for key in sorted(unknown):
            if (name, key) in _REPLACED:
                raise ConfigError(f"{path}: [{name}] {key}: {_REPLACED[name, key]}")
        if unknown:
            raise ConfigError(f"{path}: unknown key {sorted(unknown)[0]!r} in [{name}]; "
                              f"expected one of {', '.join(sorted(_KNOWN[name]))}")
    overrides = _from_environment(environ)
    bookie, metadata, agent, throttle, repair = (
        _Table(path, n, {**raw.get(n, {}), **overrides.get(n, {})}, frozenset(overrides.get(n, {}))) for n in _KNOWN)
    conf = bookie.text("conf")
    conf_from_env = bookie.flag("conf_from_env", False)
    if conf is None and not conf_from_env:
        raise ConfigError(f"{path}: [bookie] conf is required: the bookie's bk_server.conf (or conf_from_env = true "
                          "in a Pulsar bookie's pod, with the bookie container's environment)")
    home = bookie.text("home")
    state_dir = agent.text("state_dir")
    if state_dir is None:
        raise ConfigError(f"{path}: [agent] state_dir is required: where the agent keeps its cursors and queues")
    host, port = _listen(agent)
    return AgentConfig(
        source=path,
        bookie_conf=None if conf is None else bookie.relative(Path(conf)),
        bookie_home=None if home is None else bookie.relative(Path(home)),
        bookie_environment=dict(environ) if conf_from_env else None,
        ledger_dirs=bookie.paths("ledger_dirs"),
        bookie_id=bookie.text("bookie_id"),
        log_files=bookie.paths("log_files") or (),
        metadata_uri=metadata.text("uri"),
        misconfigured_exit_seconds=metadata.number("misconfigured_exit_seconds", 30, high=86400),
        state_dir=agent.relative(Path(state_dir)),
        listen_host=host,
        listen_port=port,
        checkpoint_seconds=agent.number("checkpoint_seconds", 30, low=0, low_open=True),
        period_seconds=agent.number("period_days", 7, low=0, low_open=True) * SECONDS_PER_DAY,
        period_jitter=agent.number("period_jitter", 0.25, high=0.5),
        start_jitter_seconds=agent.number("start_jitter_minutes", 10) * 60,
        stall_seconds=agent.number("stall_minutes", 15, low=0, low_open=True) * 60,
        pace=agent.choice("pace", PACE_AT_RATE, PACES),
        suspect_window_seconds=agent.number("suspect_window_minutes", 10) * 60,
        suspect_limit=int(agent.number("suspect_limit", 10000, low=1)),
        settle_seconds=agent.number("settle_seconds", SETTLE_SECONDS, high=3600),
        throttle=_throttle(throttle),
        mark=repair.flag("mark", False),
        repair_command=repair.text("repair_command"),
        rereplicate=repair.flag("rereplicate", True),
        copy_bytes_per_second=repair.quantity("copy_bytes_per_second", 20_000_000, "B") or None,
        retry_seconds=repair.number("retry_seconds", FIRST_RETRY_SECONDS, low=1, high=RETRY_LIMIT_SECONDS),
        blast_radius=_blast_radius(repair),
        placement=_placement(repair),
    )


def _blast_radius(repair: "_Table") -> BlastRadius:
    default = BlastRadius()
    return BlastRadius(
        moves_per_hour=int(repair.number("moves_per_hour", default.moves_per_hour, low=1)),
        move_bytes_per_hour=int(repair.quantity("move_bytes_per_hour", default.move_bytes_per_hour, "B")),
        failed_disk_ledger_share=repair.number("failed_disk_ledger_share", default.failed_disk_ledger_share,
                                               low=0, low_open=True, high=1),
        failed_disk_min_ledgers=int(repair.number("failed_disk_min_ledgers", default.failed_disk_min_ledgers, low=1)),
        failed_disk_log_share=repair.number("failed_disk_log_share", default.failed_disk_log_share,
                                            low=0, low_open=True, high=1),
        failed_disk_min_logs=int(repair.number("failed_disk_min_logs", default.failed_disk_min_logs, low=1)),
    )


def _env_name(table: str, key: str) -> str:
    return f"{ENV_PREFIX}{table}_{key}".upper()


def _from_environment(environ: Mapping[str, str]) -> dict[str, dict]:
    """The config keys set by ``BOOKIE_SCANNER_<TABLE>_<KEY>`` variables, by table; ConfigError for one that names none."""
    known = {_env_name(table, key): (table, key) for table, keys in _KNOWN.items() for key in keys}
    overrides: dict[str, dict] = {}
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        if name not in known:
            raise ConfigError(f"environment variable {name} names no config key; expected "
                              f"{ENV_PREFIX}<TABLE>_<KEY>, e.g. {_env_name('metadata', 'uri')}")
        table, key = known[name]
        overrides.setdefault(table, {})[key] = _env_value(text)
    return overrides


def _env_value(text: str):
    """``text`` as a TOML value when it is one (a number, a boolean, an array, a quoted string), else as it is."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def _listen(agent: _Table) -> tuple[str, int]:
    value = agent.text("listen", DEFAULT_LISTEN)
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise agent._fail("listen", "HOST:PORT, e.g. 127.0.0.1:9721 (port 0 picks a free one)")
    return host.strip("[]"), int(port)


def _placement(table: _Table) -> PlacementSettings:
    """The placement keys of [repair]; a key left out is None: the bookie's bk_server.conf, else BookKeeper's default."""
    placement = table.choice("placement", PLACEMENTS[0], PLACEMENTS) if "placement" in table.values else None
    script_args = table.number("rack_script_args", None, low=1)
    min_racks = table.number("min_racks_per_write_quorum", None, low=1)
    racks_file, rack_script = table.paths("racks_file"), table.paths("rack_script")
    for key, value in (("racks_file", racks_file), ("rack_script", rack_script)):
        if value is not None and len(value) != 1:
            raise table._fail(key, "one path")
    return PlacementSettings(
        placement=placement,
        racks_file=racks_file[0] if racks_file else None,
        rack_script=rack_script[0] if rack_script else None,
        rack_script_args=None if script_args is None else int(script_args),
        rack_script_timeout=table.number("rack_script_timeout_seconds", 10, low=0, low_open=True),
        pulsar_racks=None if "pulsar_racks" not in table.values else table.flag("pulsar_racks", False),
        min_racks=None if min_racks is None else int(min_racks),
        enforce_min_racks=None if "enforce_min_racks" not in table.values else table.flag("enforce_min_racks", False),
    )


def _throttle(table: _Table) -> ThrottleConfig:
    hours, days = table.text("window_hours"), table.text("window_days")
    try:
        windows = None if hours is None and days is None else AllowedWindows.parse(hours, days)
    except ValueError as exc:
        raise ConfigError(f"{table.source}: [throttle] window_hours/window_days: {exc}") from None
    busy = table.number("busy_threshold", 0.7, low=0, low_open=True, high=1)
    idle = table.number("idle_threshold", min(0.5, busy), low=0, low_open=True, high=busy)
    rate = table.quantity("bytes_per_second", 50_000_000, "B")
    entries = table.quantity("entries_per_second", 0, "")
    return ThrottleConfig(
        bytes_per_second=rate or None,
        entries_per_second=entries or None,
        windows=windows,
        outside_factor=table.number("outside_rate", 0.0, high=1),
        backoff=BackoffPolicy(busy_above=busy, idle_below=idle,
                              floor=table.number("floor", 0.1, low=0, low_open=True, high=1)),
        disk_backoff=table.flag("disk_backoff", True),
    )
