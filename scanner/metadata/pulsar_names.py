"""What a ledger holds for Apache Pulsar, from the custom metadata Pulsar's managed ledger writes on it.

Pulsar tags each ledger it creates (``LedgerMetadataUtils``): ``pulsar/managed-ledger`` names the
managed ledger (a topic's, e.g. ``public/default/persistent/orders``), ``pulsar/cursor`` a
subscription's cursor ledger, ``pulsar/compactedTopic`` a compacted topic's ledger and
``pulsar/schemaId`` a schema's. An operator reads from it which topic a damaged ledger belongs to.
"""

from __future__ import annotations

from collections.abc import Iterable

MANAGED_LEDGER = "pulsar/managed-ledger"
CURSOR = "pulsar/cursor"
COMPACTED_TOPIC = "pulsar/compactedTopic"
SCHEMA_ID = "pulsar/schemaId"


def pulsar_name(custom_metadata: Iterable[tuple[str, bytes]]) -> str | None:
    """"<managed ledger>", "<managed ledger> cursor <name>", "compacted topic <t>", "schema <id>", or None."""
    values = {key: value.decode("utf-8", errors="replace") for key, value in custom_metadata}
    if MANAGED_LEDGER in values:
        cursor = values.get(CURSOR)
        return values[MANAGED_LEDGER] + (f" cursor {cursor}" if cursor is not None else "")
    if COMPACTED_TOPIC in values:
        return f"compacted topic {values[COMPACTED_TOPIC]}"
    if SCHEMA_ID in values:
        return f"schema {values[SCHEMA_ID]}"
    return None
