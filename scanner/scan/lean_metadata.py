"""What a pass's index step needs from each ledger's metadata, decoded lean, a batch at a time.

The step needs, per ledger, its digest type and password (for the ledger table) and whether the index holds every
entry the write sets give this bookie (:func:`scanner.scan.completeness.holds_every_entry`); only a ledger found
short needs its whole metadata. Before a `.idx` bookie's index is read, whether each ledger's ensembles have this
bookie at all (:func:`placed_ledgers`): the index files of those alone are looked for. The native code
(``scanner/native/lean_metadata.c``), when it runs (:mod:`scanner.native.switch`), takes these from the znode bytes
of a batch at once, with no metadata object per ledger, for metadata in its common form (format version 3, known
fields, every invariant holding); it leaves any other ledger to :func:`lean_reference` (and :func:`placed_reference`),
the Python form, which decodes the whole metadata and is what the native code must agree with.
"""

from __future__ import annotations

from scanner.metadata.ledger import MetadataFormatError, parse_ledger_metadata
from scanner.native.switch import native_code
from scanner.scan.completeness import holds_every_entry

# (digest type number, 0 for none; password, None for none; whether the index holds every entry owed)
LeanLedger = tuple[int, bytes | None, bool]
# Whether an ensemble of a ledger has this bookie: False; where it has, True or (from the native code) its decode kept
# as bytes, which lean_ledgers answers from; None: to be decoded whole
Placement = bool | bytes | None


def lean_ledgers(ledger_ids: list[int], data: list[bytes | None], bookie_id: str, entry_ids: list,
                 placements: list[Placement] | None = None) -> list[LeanLedger | None]:
    """Each ledger's :data:`LeanLedger` from its znode's bytes (None: no znode) and its index's ascending entry ids
    (``array('Q')``); None where it must be decoded whole (:func:`scanner.metadata.store.MetadataStore.ledger_read`:
    no such ledger, or bytes that do not decode, which it words). ``placements``: the ledgers' :func:`placed_ledgers`
    answers, whose kept decodes the native code answers from instead of decoding the bytes again."""
    native = native_code()
    if native is not None:
        lean = (native.lean_batch(ledger_ids, data, bookie_id.encode(), entry_ids) if placements is None
                else native.lean_placed_batch(ledger_ids, placements, entry_ids))
        return [found if found is not None else lean_reference(ledger_id, raw, bookie_id, ids)
                for ledger_id, raw, ids, found in zip(ledger_ids, data, entry_ids, lean)]
    return [lean_reference(*ledger) for ledger in zip(ledger_ids, data, [bookie_id] * len(ledger_ids), entry_ids)]


def placed_ledgers(ledger_ids: list[int], data: list[bytes | None], bookie_id: str) -> list[Placement]:
    """Whether any ensemble of each ledger has this bookie, from its znode's bytes (None: no znode), as a
    :data:`Placement` (truthy where it has); None where it must be decoded whole (no such ledger, or bytes that do not
    decode)."""
    native = native_code()
    if native is not None:
        placed = native.placed_batch(data, bookie_id.encode())
        return [found if found is not None else placed_reference(ledger_id, raw, bookie_id)
                for ledger_id, raw, found in zip(ledger_ids, data, placed)]
    return [placed_reference(ledger_id, raw, bookie_id) for ledger_id, raw in zip(ledger_ids, data)]


def placed_reference(ledger_id: int, data: bytes | None, bookie_id: str) -> bool | None:
    """The Python form of :func:`placed_ledgers` for one ledger: the whole metadata decoded."""
    if data is None:
        return None
    try:
        meta = parse_ledger_metadata(ledger_id, data)
    except MetadataFormatError:
        return None
    return is_placed(meta, bookie_id)


def is_placed(meta, bookie_id: str) -> bool:
    """Whether any ensemble of the ledger has this bookie (then the bookie holds, or held, some of its entries)."""
    return any(bookie_id in bookies for _, bookies in meta.segments)


def lean_reference(ledger_id: int, data: bytes | None, bookie_id: str, entry_ids) -> LeanLedger | None:
    """The Python form: the whole metadata decoded, then the three fields taken from it."""
    if data is None or entry_ids is None:
        return None
    try:
        meta = parse_ledger_metadata(ledger_id, data)
    except MetadataFormatError:
        return None
    digest_type = 0 if meta.digest_type is None else int(meta.digest_type)
    return digest_type, meta.password, holds_every_entry(meta, bookie_id, entry_ids)
