"""A bookie's storage layout: ledger and index dirs, storage type and bookie id, from its config and cookies.

The config is a Java properties file as Apache Commons Configuration 1.x reads it (BookKeeper's
``ServerConfiguration``); the cookie is ``current/VERSION`` in every ledger dir.

A relative directory in the config (Pulsar's default ``ledgerDirectories=data/bookkeeper/ledgers``)
is relative to the working directory of the bookie's JVM, which is where BookKeeper resolves it:
Pulsar's scripts and images start the bookie in the Pulsar home. The scanner cannot see that
directory, so it resolves such dirs against ``home``: the caller's ``--bookie-home``, else its own
working directory (run it from the same place as the bookie). Every dir of a layout is absolute.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from google.protobuf import text_encoding

from scanner.storage.pulsar_env import PULSAR_DEFAULTS, apply_environment

STORAGE_TYPES = ("interleaved", "sorted", "db")
_STORAGE_CLASSES = {
    "org.apache.bookkeeper.bookie.InterleavedLedgerStorage": "interleaved",
    "org.apache.bookkeeper.bookie.SortedLedgerStorage": "sorted",
    "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage": "db",
}
DEFAULT_STORAGE_CLASS = "org.apache.bookkeeper.bookie.SortedLedgerStorage"
DEFAULT_LEDGER_DIR = "/tmp/bk-data"  # BookKeeper's ledgerDirectories when the config sets none
DEFAULT_BOOKIE_PORT = 3181
COOKIE_FILE = "VERSION"
PULSAR_ENV_NAMES = "the environment (PULSAR_PREFIX_*, bookie keys)"
_TRUE = {"true", "on", "yes", "y", "t"}
_FALSE = {"false", "off", "no", "n", "f"}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "b": "\b"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_PROPERTY = re.compile(r"((?:[^\s\\=:]|\\.)*)(?:\s*[=:]\s*|\s+)(.*)", re.DOTALL)
_COOKIE_FIELD = re.compile(r'(\w+)\s*:\s*"((?:[^"\\]|\\.)*)"')
_COOKIE_FIELDS = {"bookieHost", "journalDir", "ledgerDirs", "instanceId", "indexDirs"}


class LayoutError(Exception):
    """The bookie's layout cannot be determined; the message is one line saying what and where."""


@dataclass(frozen=True, slots=True)
class Cookie:
    layout_version: int
    bookie_id: str
    journal_dirs: str
    ledger_dirs: tuple[str, ...]
    index_dirs: tuple[str, ...] | None
    instance_id: str | None


@dataclass(frozen=True, slots=True)
class BookieLayout:
    bookie_id: str
    storage: str  # one of STORAGE_TYPES
    ledger_dirs: tuple[Path, ...]
    index_dirs: tuple[Path, ...]
    direct_io: bool  # DbLedgerStorage with DirectEntryLogger
    conf: Mapping[str, str]

    @property
    def ledger_current_dirs(self) -> tuple[Path, ...]:
        return tuple(d / "current" for d in self.ledger_dirs)

    @property
    def index_current_dirs(self) -> tuple[Path, ...]:
        return tuple(d / "current" for d in self.index_dirs)


def discover_layout(
    conf_path: Path | None,
    *,
    ledger_dirs: Sequence[Path] | None = None,
    index_dirs: Sequence[Path] | None = None,
    storage: str | None = None,
    bookie_id: str | None = None,
    home: Path | None = None,
    environment: Mapping[str, str] | None = None,
) -> BookieLayout:
    """The layout from ``bk_server.conf`` and the ledger dirs' cookies; overrides replace what the conf says.

    Override the dirs when the bookie's files are not at the paths its config names (a copy, a mount).
    Without a config (``conf_path`` None) the ledger dirs must be given; the storage type is then
    what the dirs hold unless given. Relative dirs are resolved against ``home`` (default: the working dir).
    With ``environment`` (a Pulsar bookie container's), the conf is what Pulsar's image makes of ``conf_path``
    (without one, of Pulsar's defaults) and that environment: see ``scanner.storage.pulsar_env``.
    """
    if environment is not None:
        text = PULSAR_DEFAULTS if conf_path is None else _read_text(Path(conf_path))
        conf = parse_properties(apply_environment(text, environment))
        source = Path(f"{conf_path or 'Pulsar defaults'} with {PULSAR_ENV_NAMES}")
    elif conf_path is None:
        if ledger_dirs is None:
            raise LayoutError("without a bookie config, the ledger dirs must be given")
        conf, source = {}, Path("--ledger-dirs")
    else:
        conf, source = _read_conf(Path(conf_path)), Path(conf_path)
    base = Path.cwd() if home is None else Path(home)
    written_ledgers = _dirs(ledger_dirs, conf, "ledgerDirectories", source)
    written_indexes = _index_dirs(index_dirs, ledger_dirs is not None, conf, source, written_ledgers)
    ledgers, indexes = _absolute(written_ledgers, base), _absolute(written_indexes, base)
    if storage is not None:
        effective_storage = storage
    elif conf_path is None and environment is None:
        effective_storage = "db" if any(_holds_rocksdb(d) for d in indexes) else "interleaved"
    else:
        effective_storage = storage_type(conf, source)
    if effective_storage not in STORAGE_TYPES:
        raise LayoutError(f"storage override {effective_storage!r}: expected one of {', '.join(STORAGE_TYPES)}")
    if effective_storage == "db" and len(indexes) != len(ledgers):
        raise LayoutError(
            f"{source}: DbLedgerStorage pairs index dir i with ledger dir i, "
            f"found {len(indexes)} index dirs for {len(ledgers)} ledger dirs"
        )
    for written, directory in dict.fromkeys(zip(written_ledgers + written_indexes, ledgers + indexes)):
        if not (directory / "current").is_dir():
            raise LayoutError(_no_bookie_dir(directory, written, conf, ledger_dirs, source, home))
    _check_storage_files(effective_storage, indexes)
    cookie = _agreed_cookie(ledgers, len(ledgers))
    return BookieLayout(
        bookie_id=bookie_id if bookie_id is not None else _bookie_id(conf, cookie, source),
        storage=effective_storage,
        ledger_dirs=ledgers,
        index_dirs=indexes,
        direct_io=effective_storage == "db" and conf_bool(conf, "dbStorage_directIOEntryLogger", False, source),
        conf=MappingProxyType(conf),
    )


def _read_conf(conf_path: Path) -> dict[str, str]:
    return parse_properties(_read_text(conf_path))


def _read_text(conf_path: Path) -> str:
    try:
        return conf_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LayoutError(f"{conf_path}: cannot read the bookie config: {getattr(error, 'strerror', None) or error}"
                          ) from error


def _absolute(dirs: tuple[Path, ...], base: Path) -> tuple[Path, ...]:
    return tuple(Path(os.path.normpath(base / d)) for d in dirs)


def _no_bookie_dir(directory: Path, written: Path, conf: Mapping[str, str], override: Sequence[Path] | None,
                   source: Path, home: Path | None) -> str:
    """The error for a dir without ``current/``, saying where the path came from when the user did not write it."""
    if override is None and not conf_list(conf, "ledgerDirectories"):
        return (f"{source}: ledgerDirectories is not set, and BookKeeper's default {directory} holds no bookie "
                "dir: set ledgerDirectories or pass --ledger-dirs")
    found = f"{directory}: expected a bookie dir with a current/ subdirectory, found none"
    if not written.is_absolute():
        against = "--bookie-home" if home is not None else "the current directory"
        return (f"{found} ({written} is relative, resolved against {against} as the bookie resolves it against "
                "its working dir: pass --bookie-home DIR, the bookie's working dir, e.g. Pulsar's home)")
    return found


def storage_type(conf: Mapping[str, str], source: Path) -> str:
    """'interleaved', 'sorted' or 'db' from ledgerStorageClass (and the legacy sortedLedgerStorageEnabled)."""
    class_name = conf_string(conf, "ledgerStorageClass") or DEFAULT_STORAGE_CLASS
    if class_name not in _STORAGE_CLASSES:
        raise LayoutError(
            f"{source}: ledgerStorageClass {class_name!r}: expected one of {', '.join(_STORAGE_CLASSES)}"
        )
    if class_name == DEFAULT_STORAGE_CLASS and not conf_bool(conf, "sortedLedgerStorageEnabled", True, source):
        return "interleaved"
    return _STORAGE_CLASSES[class_name]


def parse_properties(text: str) -> dict[str, str]:
    """Keys and values of a Java properties file as Commons Configuration 1.x reads them.

    ``#``/``!`` comment lines, ``=``, ``:`` or whitespace separators, trailing-backslash continuation
    lines, Java escapes. Values keep escaped commas (``\\,``) so ``conf_list`` can split them; a key
    given twice keeps both values, comma-joined, as Commons Configuration makes a list of them.
    """
    properties: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        while _continues(stripped):
            stripped = stripped[:-1] + next(lines, "").strip()
        match = _PROPERTY.fullmatch(stripped)
        key, value = (match.group(1), match.group(2)) if match else (stripped, "")
        key, value = _unescape(key, keep_commas=False), _unescape(value, keep_commas=True)
        properties[key] = f"{properties[key]},{value}" if key in properties else value
    return properties


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, keep_commas: bool) -> str:
    def replace(match: re.Match) -> str:
        escaped = match.group(1)
        if len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        if escaped == "," and keep_commas:
            return "\\,"
        return _ESCAPES.get(escaped, escaped)

    return _ESCAPE.sub(replace, text)


def conf_list(conf: Mapping[str, str], key: str) -> list[str]:
    """A list-valued property: split on unescaped commas, each item trimmed, empty items dropped."""
    value = conf.get(key)
    if value is None:
        return []
    items = (item.replace("\\,", ",").strip() for item in re.split(r"(?<!\\),", value))
    return [item for item in items if item]


def conf_string(conf: Mapping[str, str], key: str) -> str | None:
    """A string property: Commons Configuration returns the first item of a comma-separated value."""
    items = conf_list(conf, key)
    return items[0] if items else None


def conf_bool(conf: Mapping[str, str], key: str, default: bool, source: Path) -> bool:
    """A boolean property with the spellings Commons Configuration accepts (true/on/yes/y/t and opposites)."""
    value = conf_string(conf, key)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise LayoutError(f"{source}: {key}={value!r}: expected true or false")


def _dirs(override: Sequence[Path] | None, conf: Mapping[str, str], key: str, source: Path) -> tuple[Path, ...]:
    if override is not None:
        if not override:
            raise LayoutError(f"{key} override: expected at least one directory, found none")
        return tuple(Path(d) for d in override)
    if key in conf and not conf_list(conf, key):
        raise LayoutError(f"{source}: {key} is set but empty; expected one or more directories")
    return tuple(Path(d) for d in conf_list(conf, key) or [DEFAULT_LEDGER_DIR])


def _index_dirs(
    override: Sequence[Path] | None,
    ledger_dirs_overridden: bool,
    conf: Mapping[str, str],
    source: Path,
    ledger_dirs: tuple[Path, ...],
) -> tuple[Path, ...]:
    if override is not None:
        return _dirs(override, conf, "indexDirectories", source)
    if not conf_list(conf, "indexDirectories"):
        return ledger_dirs
    if ledger_dirs_overridden:
        raise LayoutError(
            f"{source}: sets indexDirectories but only the ledger dirs were overridden; override the index dirs too"
        )
    return _dirs(None, conf, "indexDirectories", source)


def _check_storage_files(storage: str, index_dirs: tuple[Path, ...]) -> None:
    # RocksDB index dirs are the one on-disk sign of the storage type: catch a conf that is not this bookie's.
    # A RocksDB dir that is there but damaged (CURRENT gone) is the bookie's damage, reported by the scan.
    for directory in index_dirs:
        has_rocksdb = _holds_rocksdb(directory)
        if has_rocksdb != (storage == "db"):
            found = "DbLedgerStorage indexes" if has_rocksdb else "no DbLedgerStorage indexes"
            raise LayoutError(f"{directory}: storage is {storage!r} but the dir holds {found}")


def _holds_rocksdb(index_dir: Path) -> bool:
    current = index_dir / "current"
    return (current / "locations").is_dir() or (current / "ledgers").is_dir()


def parse_cookie(text: str, source: Path) -> Cookie:
    """A cookie (``current/VERSION``): layout 3 is four plain lines, layout 4+ is protobuf text format."""
    lines = text.splitlines()
    try:
        layout_version = int(lines[0].strip())
    except (IndexError, ValueError):
        raise LayoutError(f"{source}: expected a cookie layout version on line 1, found {text[:40]!r}") from None
    if layout_version == 3:
        if len(lines) < 4:
            raise LayoutError(f"{source}: expected 4 lines in a layout-3 cookie, found {len(lines)}")
        fields = {"bookieHost": lines[1], "journalDir": lines[2], "ledgerDirs": lines[3]}
    elif layout_version >= 4:
        fields = _cookie_text_fields(lines[1:], source)
    else:
        raise LayoutError(f"{source}: expected cookie layout version 3 or later, found {layout_version}")
    index_dirs = fields.get("indexDirs")
    return Cookie(
        layout_version=layout_version,
        bookie_id=fields["bookieHost"],
        journal_dirs=fields["journalDir"],
        ledger_dirs=_cookie_dirs(fields["ledgerDirs"], source),
        index_dirs=_cookie_dirs(index_dirs, source) if index_dirs else None,
        instance_id=fields.get("instanceId") or None,
    )


def _cookie_text_fields(lines: list[str], source: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        match = _COOKIE_FIELD.fullmatch(line.strip())
        if not match or match.group(1) not in _COOKIE_FIELDS:
            raise LayoutError(f"{source}: line {number}: expected 'field: \"value\"' of a cookie, found {line!r}")
        try:
            fields[match.group(1)] = text_encoding.CUnescape(match.group(2)).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as error:
            raise LayoutError(f"{source}: line {number}: cannot unescape {line!r}: {error}") from error
    missing = {"bookieHost", "journalDir", "ledgerDirs"} - fields.keys()
    if missing:
        raise LayoutError(f"{source}: expected cookie fields {', '.join(sorted(missing))}, not found")
    return fields


def _cookie_dirs(encoded: str, source: Path) -> tuple[str, ...]:
    count, _, rest = encoded.partition("\t")
    dirs = tuple(rest.split("\t")) if rest else ()
    if not count.isdigit() or int(count) != len(dirs):
        raise LayoutError(f"{source}: expected '<count>\\t<dir>...' for cookie dirs, found {encoded!r}")
    return dirs


def _agreed_cookie(ledger_dirs: tuple[Path, ...], dir_count: int) -> Cookie | None:
    cookie = None
    for directory in ledger_dirs:
        path = directory / "current" / COOKIE_FILE
        if not path.is_file():
            continue
        try:
            found = parse_cookie(path.read_text(encoding="utf-8"), path)
        except (OSError, UnicodeDecodeError) as error:
            raise LayoutError(f"{path}: cannot read the cookie: {error}") from error
        if len(found.ledger_dirs) != dir_count:
            raise LayoutError(
                f"{path}: the cookie lists {len(found.ledger_dirs)} ledger dirs, the layout has {dir_count}"
            )
        if cookie is not None and found.bookie_id != cookie.bookie_id:
            raise LayoutError(f"{path}: cookie bookieHost {found.bookie_id!r} differs from {cookie.bookie_id!r}")
        cookie = found
    return cookie


def _bookie_id(conf: Mapping[str, str], cookie: Cookie | None, source: Path) -> str:
    configured = _configured_bookie_id(conf, source)
    if cookie is None:
        return configured if configured is not None else _host_bookie_id(conf, source)
    if configured is not None and configured != cookie.bookie_id:
        raise LayoutError(f"{source}: config gives bookie id {configured!r}, the cookie says {cookie.bookie_id!r}")
    return cookie.bookie_id


def _configured_bookie_id(conf: Mapping[str, str], source: Path) -> str | None:
    custom = conf_string(conf, "bookieId")
    if custom:
        return custom
    advertised = (conf_string(conf, "advertisedAddress") or "").strip()
    return f"{advertised}:{_port(conf, source)}" if advertised else None


def _host_bookie_id(conf: Mapping[str, str], source: Path) -> str:
    interface = conf_string(conf, "listeningInterface") or "default"
    if interface != "default":
        raise LayoutError(
            f"{source}: bookie id depends on interface {interface!r} and there is no cookie; give the bookie id"
        )
    try:
        host = socket.getfqdn()
        if conf_bool(conf, "useHostNameAsBookieID", False, source):
            address = host.split(".", 1)[0] if conf_bool(conf, "useShortHostName", False, source) else host
        else:
            address = socket.gethostbyname(host)
    except OSError as error:
        raise LayoutError(f"{source}: cannot resolve this host for the bookie id: {error}") from error
    return f"{address}:{_port(conf, source)}"


def _port(conf: Mapping[str, str], source: Path) -> int:
    value = conf_string(conf, "bookiePort")
    if value is None:
        return DEFAULT_BOOKIE_PORT
    try:
        return int(value)
    except ValueError:
        raise LayoutError(f"{source}: bookiePort={value!r}: expected an integer") from None
