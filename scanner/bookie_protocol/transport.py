"""Which bookies this agent's wire client may speak to at all, decided before anything is copied.

The client (``scanner.bookie_protocol.wire``) speaks BookKeeper's v2 protocol in plain TCP, without an
authentication exchange. It cannot speak to a bookie that advertises TLS (the extension ``tls`` of its
``bookie-rpc`` endpoint: it has a TLS provider, ``BookieService.publishInfo``) or an authentication
method (the endpoint's ``auth`` list), nor to any bookie of a cluster whose bookies demand that clients
authenticate (``bookieAuthProviderFactoryClass``; ``clientAuthProviderFactoryClass`` in the config
BookKeeper's own repairers on that host use). Such a move is refused with a reason that says
so, not tried, failed and retried for hours as "no answer".

``screen_move`` is called at the start of a move with the bookies the copies are read from and the
candidate new bookies: a refused peer makes the move impossible (``TransportRefused``), a refused
candidate is skipped and its reason kept. A peer that is not registered is not refused: it is not
running, and the copy reads the other peers, as it reads past any bookie that does not answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scanner.metadata.bookie_registry import (
    TLS_EXTENSION,
    BookieNotRegistered,
    BookieNotResolved,
    BookieRegistry,
    Registration,
)
from scanner.storage.layout import conf_string

# The bookie's and the client's authentication plugins: set in a bookie's bk_server.conf, every client needs one.
AUTH_PROVIDER_KEYS = ("bookieAuthProviderFactoryClass", "clientAuthProviderFactoryClass")


class TransportRefused(Exception):
    """This agent cannot speak to a bookie (or to the cluster) as it requires; ``reason`` says why, in one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Screened:
    """The candidates that may take copies (in the order given) and, for each one skipped, why."""

    targets: tuple[str, ...]
    refused: Mapping[str, str]


def cluster_refusal(conf: Mapping[str, str]) -> str | None:
    """Why no bookie of this cluster can be spoken to, from the bookie's own config; None when nothing stands in the way."""
    for key in AUTH_PROVIDER_KEYS:
        plugin = conf_string(conf, key)
        if plugin:
            return (f"the bookie's config sets {key}={plugin}: this cluster's bookies authenticate their clients, "
                    "and this agent's client has no authentication: nothing is moved")
    return None


def bookie_refusal(registration: Registration) -> str | None:
    """Why this bookie cannot be spoken to, from what its registration advertises; None when it can."""
    try:
        endpoint = registration.rpc_endpoint()
    except BookieNotResolved as exc:
        return str(exc)
    if TLS_EXTENSION in endpoint.extensions:
        return (f"bookie {registration.bookie_id} advertises TLS (extension {TLS_EXTENSION!r} of its "
                f"{endpoint.protocol} endpoint {endpoint.host}:{endpoint.port}): this agent's client has no TLS")
    if endpoint.auth:
        return (f"bookie {registration.bookie_id} advertises authentication ({', '.join(endpoint.auth)} on its "
                f"{endpoint.protocol} endpoint): this agent's client has no authentication")
    return None


def screen_move(registry: BookieRegistry, conf: Mapping[str, str], peers: Iterable[str],
                targets: Iterable[str]) -> Screened:
    """The candidates a move may copy to; TransportRefused when the cluster or one of ``peers`` cannot be spoken to.

    ``peers``: every bookie the copies may be read from (the ensembles of the fragments moved, this bookie too).
    Raises MetadataUnavailable when a registration cannot be read.
    """
    reason = cluster_refusal(conf)
    if reason is not None:
        raise TransportRefused(reason)
    for peer in dict.fromkeys(peers):
        try:
            reason = bookie_refusal(registry.registration(peer))
        except BookieNotRegistered:
            continue  # not running: the copy reads the other peers
        except BookieNotResolved as exc:
            reason = str(exc)
        if reason is not None:
            raise TransportRefused(f"{reason}; its copies cannot be read: nothing is moved")
    usable, refused = [], {}
    for target in dict.fromkeys(targets):
        try:
            reason = bookie_refusal(registry.registration(target))
        except BookieNotResolved as exc:
            reason = str(exc)
        if reason is None:
            usable.append(target)
        else:
            refused[target] = reason
    return Screened(tuple(usable), refused)
