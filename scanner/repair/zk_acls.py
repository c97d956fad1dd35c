"""The ACLs of the znodes the agent creates (marks, the ledger lock), as BookKeeper's own repairers set them.

BookKeeper creates every znode with ``ZkUtils.getACLs(conf)``: ``CREATOR_ALL_ACL`` when the config sets
``zkEnableSecurity=true``, else ``OPEN_ACL_UNSAFE``. With security on its processes authenticate to
ZooKeeper with SASL (a JAAS ``Client`` section: Kerberos or DIGEST-MD5), and a creator-only znode
belongs to that SASL identity. A mark or lock created open on such a cluster is writable by anyone;
created creator-only by a session without that identity it belongs to someone the Auditor and the
ReplicationWorkers are not (or ZooKeeper refuses it: a creator-only ACL needs an authenticated
creator). kazoo speaks SASL (``KazooClient(sasl_options=...)``, with the ``pure-sasl`` package); a
session that was not given SASL options cannot be the bookies' identity, and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

from scanner.bookie_protocol.transport import TransportRefused
from scanner.storage.layout import LayoutError, conf_bool

SECURITY_KEY = "zkEnableSecurity"


def zk_acls(conf: Mapping[str, str], client) -> list:
    """The ACL list for znodes this agent creates on the cluster of ``conf`` (a bookie's config) through ``client``.

    Raises TransportRefused when the cluster wants creator-only znodes and ``client`` (a KazooClient) has
    no SASL identity to create them under, or when the config's setting is not a boolean.
    """
    try:
        secured = conf_bool(conf, SECURITY_KEY, False, Path("the bookie's config"))
    except LayoutError as exc:
        raise TransportRefused(str(exc)) from None
    if not secured:
        return list(OPEN_ACL_UNSAFE)
    if not sasl_configured(client):
        raise TransportRefused(
            f"the bookie's config sets {SECURITY_KEY}=true: BookKeeper's znodes belong to its SASL identity, "
            "and this agent's ZooKeeper session has none (it would create marks and locks the Auditor and "
            "the ReplicationWorkers cannot remove): nothing is marked or moved")
    return list(CREATOR_ALL_ACL)


def sasl_configured(client) -> bool:
    """Whether the kazoo client authenticates with SASL (it was given ``sasl_options``).

    kazoo keeps them only on its connection handler (kazoo 2.x, ``ConnectionHandler.sasl_options``).
    """
    return getattr(getattr(client, "_connection", None), "sasl_options", None) is not None
