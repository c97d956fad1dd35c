"""The metadata store backed by a live ZooKeeper ensemble (kazoo), read-only.

Connection attempts and reads are retried with exponential back-off. A read rides out an outage
(a leader election, a restarted server) for up to the session timeout, and the store says on
stderr (a WARNING of this module's logger) when the connection is lost and when it is back, so a
long scan keeps what it did instead of dying after a few seconds of retries. When ZooKeeper does
not answer within the connect timeout at start, or for a read within the session timeout, or
refuses us, the store raises MetadataUnavailable with one line. The kazoo client is exposed as
``client`` for code that must write (repair).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry, RetryFailedError

from scanner.metadata.ledger_paths import LAYOUT_NODE, LedgerManager
from scanner.metadata.store import (MetadataMisconfigured, MetadataStore, MetadataUnavailable, ZNode, check_root,
                                    resolve_manager)

# kazoo's chatter (every failed connection attempt) goes here; silent unless the application logs.
_KAZOO_LOG = logging.getLogger(__name__ + ".kazoo")
_KAZOO_LOG.addHandler(logging.NullHandler())
log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_SESSION_TIMEOUT = 30.0


def _retry_policy() -> KazooRetry:
    """Retry a read until ZooKeeper answers again, for as long as a session outlives a lost connection."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0, deadline=DEFAULT_SESSION_TIMEOUT)


class ZooKeeperStore(MetadataStore):
    """Ledger metadata read from ZooKeeper at ``hosts`` ("h1:p1,h2:p2") under ``root``.

    ``auth`` is a digest ``(user, password)``; ``chroot`` prefixes every path on the server
    side, as a ZooKeeper connect string's "/suffix" does; ``manager`` overrides nothing but
    is checked against ``LAYOUT`` (and used when there is no ``LAYOUT``).
    """

    def __init__(
        self,
        hosts: str,
        root: str = "/ledgers",
        *,
        manager: LedgerManager | None = None,
        auth: tuple[str, str] | None = None,
        chroot: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ):
        self.root = check_root(root)
        self.hosts = hosts
        self._where = f"ZooKeeper {hosts}{chroot or ''}"
        self.client = KazooClient(
            hosts=hosts + (chroot or ""),
            timeout=DEFAULT_SESSION_TIMEOUT,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=_retry_policy(),
            auth_data=[("digest", f"{auth[0]}:{auth[1]}")] if auth else None,
            logger=_KAZOO_LOG,
        )
        self._lost_at: float | None = None
        self._closing = False
        self.client.add_listener(self._on_state)
        try:
            self.client.start(timeout=connect_timeout)
        except KazooTimeoutError:
            raise MetadataUnavailable(f"{self._where} did not answer within {connect_timeout:g}s") from None
        except AuthFailedError:
            self.client.close()
            raise MetadataMisconfigured(f"{self._where} rejected the digest credentials") from None
        try:
            if self.node(self.root) is None:
                raise MetadataMisconfigured(f"{self._where} answers but has no {self.root}: wrong ledgers root?")
            self.manager = resolve_manager(self.node(f"{self.root}/{LAYOUT_NODE}"), manager, self.root)
        except BaseException:
            self.close()
            raise

    def _on_state(self, state) -> None:
        """A connection lost, then back: one line each (kazoo's thread; nothing here may block)."""
        if self._closing:
            return
        if state == KazooState.CONNECTED:
            if self._lost_at is not None:
                log.warning("%s: connected again after %.0fs", self._where, time.monotonic() - self._lost_at)
                self._lost_at = None
        elif self._lost_at is None:  # SUSPENDED (connection lost) or LOST (session expired)
            self._lost_at = time.monotonic()
            log.warning("%s: connection lost; reads wait up to %gs for it to come back (what was done so far is "
                        "kept)", self._where, DEFAULT_SESSION_TIMEOUT)

    def node(self, path: str) -> ZNode | None:
        with self._read_errors(path):
            try:
                data, stat = self.client.retry(self.client.get, path)
            except NoNodeError:
                return None
        return ZNode(
            path=path,
            data=data,
            ephemeral=stat.ephemeralOwner != 0,
            mzxid=stat.mzxid,
            version=stat.version,
            ctime=stat.ctime,
            mtime=stat.mtime,
        )

    def nodes(self, paths: list[str]) -> list[ZNode | None]:
        """The znodes, read pipelined: every request is sent before the first answer is awaited."""
        if self.client.connected is False:
            return [self.node(path) for path in paths]  # the retrying one-by-one path reports the outage
        pending = [(path, self.client.get_async(path)) for path in paths]
        found = []
        for path, result in pending:
            with self._read_errors(path):
                try:
                    data, stat = result.get(timeout=DEFAULT_SESSION_TIMEOUT)
                except NoNodeError:
                    found.append(None)
                    continue
                except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError):
                    found.append(self.node(path))  # the connection went: this read waits for it, retrying
                    continue
            found.append(ZNode(path, data, stat.ephemeralOwner != 0, stat.mzxid, stat.version, stat.ctime, stat.mtime))
        return found

    def children(self, path: str) -> list[str]:
        with self._read_errors(path):
            try:
                return self.client.retry(self.client.get_children, path)
            except NoNodeError:
                return []

    @contextlib.contextmanager
    def _read_errors(self, path: str) -> Iterator[None]:
        try:
            yield
        except NoAuthError:
            raise MetadataUnavailable(
                f"{self._where}: not authorized to read {path} (give user:password@ in the metadata URI)"
            ) from None
        except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, RetryFailedError,
                KazooTimeoutError) as exc:
            raise MetadataUnavailable(f"{self._where}: lost while reading {path} ({type(exc).__name__})") from None
        except KazooException as exc:
            raise MetadataUnavailable(f"{self._where}: reading {path} failed: {type(exc).__name__}") from None

    def close(self) -> None:
        self._closing = True
        self.client.stop()
        self.client.close()
