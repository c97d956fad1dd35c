"""Metadata URIs: which store to open, from the command line or a bookie's configuration.

Accepted forms:
  ``zk://host:port[,host:port...]/ledgers``              manager from ``LAYOUT``
  ``zk+hierarchical://h1:p1;h2:p2/ledgers``              BookKeeper's metadataServiceUri form
  (``+flat``, ``+longhierarchical``, ``+legacyhierarchical``; ``+null`` = use ``LAYOUT``)
  ``zk://user:password@host:port/ledgers``               digest authentication
  ``file:PATH``                                          a dump file (see scanner.metadata.snapshot)
  ``metadata-store:zk:h1:p1,h2:p2[/chroot][?params]``    Pulsar's metadata-store driver on ZooKeeper
A ZooKeeper chroot is written as part of the path: ``zk://h:p/chroot/ledgers``.

Pulsar's driver (``metadata-store:``) reads the ledgers under ``/ledgers`` of the store it opens, and
a path after the ZooKeeper hosts is a chroot: ``metadata-store:zk:h:2181/pulsar`` means
``zk://h:2181/pulsar/ledgers``, and ``metadata-store:zk:h:2181/ledgers`` means ``/ledgers/ledgers``.
A store URL without a known prefix is ZooKeeper, as in Pulsar; its query parameters tune the
connection only and are ignored here. Pulsar's other stores (etcd, Oxia, RocksDB, memory) are not read.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from scanner.errors import UsageError
from scanner.metadata.ledger_paths import LedgerManager
from scanner.metadata.store import MetadataStore, check_root

DEFAULT_LEDGERS_ROOT = "/ledgers"
DEFAULT_ZK_PORT = 2181
_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+)(?::(?P<port>[0-9]{1,5}))?")
_CREDENTIALS = re.compile(r"(://[^/:@]*:)[^/]*@")  # the password of zk://user:password@hosts/...
_FORMS = "zk://HOST:PORT/ROOT, zk+hierarchical://H1:P1;H2:P2/ROOT, metadata-store:zk:HOST:PORT or file:DUMP.json"
PULSAR_SCHEME = "metadata-store:"
_PULSAR_UNSUPPORTED = ("etcd:", "oxia:", "rocksdb:", "memory:", "local-memory:")


class MetadataUriError(UsageError):
    """A metadata URI the scanner cannot use; the message says what form was expected."""


@dataclass(frozen=True, slots=True)
class ZooKeeperTarget:
    hosts: str  # kazoo connect string "h1:p1,h2:p2"
    root: str
    manager: LedgerManager | None  # None: take it from LAYOUT
    auth: tuple[str, str] | None


def redacted(uri: str) -> str:
    """``uri`` with the password of its ``user:password@`` (if any) replaced by ``***``: fit for a message or a log."""
    return _CREDENTIALS.sub(r"\g<1>***@", uri)


def parse_zookeeper_uri(uri: str) -> ZooKeeperTarget:
    """Split a ``zk[+manager]://[user:pass@]hosts/root`` URI; MetadataUriError if malformed."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: expected {_FORMS}")
    kind, _, manager_name = scheme.lower().partition("+")
    if kind != "zk":
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: unknown scheme {scheme!r}; expected {_FORMS}")
    manager = _manager(manager_name, uri)
    authority, slash, path = rest.partition("/")
    if not slash or not path:
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: no ledgers root path (e.g. /ledgers) after the hosts")
    root = "/" + urllib.parse.unquote(path).rstrip("/")
    try:
        check_root(root)
    except ValueError as exc:
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: {exc}") from None
    credentials, at, hosts = authority.rpartition("@")
    auth = _credentials(credentials, uri) if at else None
    return ZooKeeperTarget(_connect_string(hosts, uri), root, manager, auth)


def _manager(name: str, uri: str) -> LedgerManager | None:
    if name in ("", "null"):
        return None
    try:
        return LedgerManager(name)
    except ValueError:
        known = ", ".join(m.value for m in LedgerManager)
        raise MetadataUriError(
            f"metadata URI {redacted(uri)!r}: ledger manager {name!r} is not one the scanner reads ({known}, null)"
        ) from None


def _credentials(credentials: str, uri: str) -> tuple[str, str]:
    user, colon, password = credentials.partition(":")
    if not colon or not user:
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: credentials must be user:password@")
    return urllib.parse.unquote(user), urllib.parse.unquote(password)


def _connect_string(hosts: str, uri: str) -> str:
    servers = []
    for item in re.split(r"[;,]", hosts):
        match = _HOST_PORT.fullmatch(item)
        port = int(match["port"]) if match and match["port"] else DEFAULT_ZK_PORT
        if not match or not 0 < port < 65536:
            raise MetadataUriError(f"metadata URI {redacted(uri)!r}: {item!r} is not host[:port]")
        servers.append(f"{match['host']}:{port}")
    return ",".join(servers)


def open_metadata(uri: str, *, connect_timeout: float | None = None) -> MetadataStore:
    """Open the store a metadata URI names (connects to ZooKeeper for zk URIs).

    Raises MetadataUriError for a malformed URI, MetadataUnavailable when the store cannot
    be reached or read.
    """
    if uri.startswith("file:"):
        from scanner.metadata.snapshot import SnapshotStore

        return SnapshotStore(dump_path(uri))
    target = parse_zookeeper_uri(pulsar_store_as_zk_uri(uri) if uri.startswith(PULSAR_SCHEME) else uri)
    from scanner.metadata.zookeeper import DEFAULT_CONNECT_TIMEOUT, ZooKeeperStore

    return ZooKeeperStore(
        target.hosts,
        target.root,
        manager=target.manager,
        auth=target.auth,
        connect_timeout=DEFAULT_CONNECT_TIMEOUT if connect_timeout is None else connect_timeout,
    )


def dump_path(uri: str) -> str:
    """The path a ``file:`` metadata URI names; MetadataUriError if it names none."""
    path = uri[len("file://") :] if uri.startswith("file://") else uri[len("file:") :]
    if not path:
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: expected file:PATH")
    return urllib.parse.unquote(path)


def pulsar_store_as_zk_uri(uri: str) -> str:
    """The ``zk://`` URI of the ledgers a Pulsar ``metadata-store:`` URI names; MetadataUriError if not ZooKeeper."""
    store_url = uri[len(PULSAR_SCHEME):].partition("?")[0]
    if store_url.lower().startswith(_PULSAR_UNSUPPORTED):
        kind = store_url.split(":", 1)[0]
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: Pulsar's {kind} metadata store is not supported; "
                               "the scanner reads ledger metadata from ZooKeeper only")
    hosts = store_url[len("zk:"):] if store_url.lower().startswith("zk:") else store_url
    hosts = hosts.removeprefix("//")
    if not hosts:
        raise MetadataUriError(f"metadata URI {redacted(uri)!r}: expected metadata-store:zk:HOST:PORT[,HOST:PORT][/CHROOT]")
    authority, _, chroot = hosts.partition("/")
    chroot = chroot.strip("/")
    return f"zk://{authority}{'/' + chroot if chroot else ''}{DEFAULT_LEDGERS_ROOT}"


def metadata_uri_from_conf(conf: Mapping[str, str]) -> str | None:
    """The metadata URI a bookie configuration points at, or None if it names none.

    ``metadataServiceUri`` wins; otherwise the deprecated ``zkServers`` (whose optional
    "/chroot" suffix joins the path) and ``zkLedgersRootPath`` (default /ledgers).
    """
    uri = (conf.get("metadataServiceUri") or "").strip()
    if uri:
        return uri
    servers = (conf.get("zkServers") or "").strip()
    if not servers:
        return None
    hosts, slash, chroot = servers.partition("/")
    root = (conf.get("zkLedgersRootPath") or "").strip() or DEFAULT_LEDGERS_ROOT
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return f"zk://{hosts.replace(',', ';')}{chroot}{root}"
