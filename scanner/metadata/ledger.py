"""Ledger metadata as the cluster stores it: the model, its V1/V2/V3 serde, and write sets.

A ledger znode holds ``BookieMetadataFormatVersion<TAB><version>\\n`` and then a body:
V1 plain text lines, V2 protobuf text, V3 a varint32 length and binary protobuf
(``LedgerMetadataFormat``). Which bookie must hold which entry follows from the ensembles
(segments) and round-robin striping: entry ``e`` lives on ensemble indexes ``(e + k) mod E``
for ``k < Wq``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass

from typing import TYPE_CHECKING

from scanner.storage.entry import DigestType

if TYPE_CHECKING:
    from scanner.metadata.proto.data_formats_pb2 import LedgerMetadataFormat

# protobuf is imported where a message is decoded or built: its import costs a scan that decodes metadata in C
# (scanner.scan.lean_metadata) a tenth of a second.

HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
MAX_VERSION_DIGITS = 10
SUPPORTED_VERSIONS = (1, 2, 3)
REWRITABLE_VERSIONS = (2, 3)  # replace_ensemble_member keeps a format it rewrites; V1 text is only read
MAX_LEDGER_ID = 2**63 - 1
_V1_CLOSED_TAG = "CLOSED"
_V1_IN_RECOVERY_ENTRY_ID = -102
_MAX_VARINT32_BYTES = 5
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class MetadataFormatError(ValueError):
    """Ledger metadata bytes (or a model built by hand) that BookKeeper could not have produced."""


class LedgerState(enum.IntEnum):
    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


@dataclass(frozen=True, slots=True)
class Fragment:
    """One ensemble's share of a ledger: entries ``first_entry_id..last_entry_id`` on ``bookies``.

    ``index`` is the position of the segment in ``LedgerMetadata.segments``.
    """

    index: int
    first_entry_id: int
    last_entry_id: int | None  # inclusive; None = open-ended last fragment of a non-closed ledger
    bookies: tuple[str, ...]
    ensemble_size: int
    write_quorum: int
    is_last: bool

    def bookie_index(self, bookie_id: str) -> int | None:
        """The ensemble index of ``bookie_id`` in this fragment, or None if it is not a member."""
        try:
            return self.bookies.index(bookie_id)
        except ValueError:
            return None

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        """Ensemble indexes that must store ``entry_id`` (64-bit arithmetic, like getWriteSet)."""
        return tuple((entry_id + k) % self.ensemble_size for k in range(self.write_quorum))

    def holds(self, bookie_index: int, entry_id: int) -> bool:
        """True when the bookie at ``bookie_index`` is in the write set of ``entry_id``."""
        if not 0 <= bookie_index < self.ensemble_size:
            return False
        return (bookie_index - entry_id) % self.ensemble_size < self.write_quorum

    def entries_of(self, bookie_index: int, upto: int | None = None) -> Iterator[int]:
        """Entry ids of this fragment that the bookie at ``bookie_index`` must hold, ascending.

        ``upto`` (inclusive) caps the range; it is required for an open-ended fragment.
        """
        if not 0 <= bookie_index < self.ensemble_size:
            raise ValueError(f"bookie index {bookie_index} outside ensemble of {self.ensemble_size}")
        last = self.last_entry_id
        if upto is not None:
            last = upto if last is None else min(last, upto)
        if last is None:
            raise ValueError(f"fragment {self.index} is open-ended: pass upto (the last entry to consider)")
        return self._striped(bookie_index, last)

    def _striped(self, bookie_index: int, last: int) -> Iterator[int]:
        first, size = self.first_entry_id, self.ensemble_size
        # The placement repeats every E entries, so one period of offsets is enough.
        offsets = [o for o in range(size) if self.holds(bookie_index, first + o)]
        for base in range(first, last + 1, size):
            for offset in offsets:
                if base + offset > last:
                    return
                yield base + offset


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    """Decoded ledger metadata; construction checks the invariants BookKeeper enforces."""

    ledger_id: int
    format_version: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    last_entry_id: int  # -1 unless CLOSED
    length: int  # 0 unless CLOSED
    segments: tuple[tuple[int, tuple[str, ...]], ...]  # (first_entry_id, bookies), ascending
    digest_type: DigestType | None
    password: bytes | None  # None: no password stored (ledgers created by 4.1 or older)
    ctime: int | None
    custom_metadata: tuple[tuple[str, bytes], ...]
    ctoken: int | None

    def __post_init__(self) -> None:
        problem = _invariant_violation(self)
        if problem:
            raise MetadataFormatError(f"ledger {self.ledger_id}: {problem}")

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def fragments(self) -> tuple[Fragment, ...]:
        """The non-empty fragments, in entry order.

        A segment followed by one with the same first entry is empty and dropped. For a CLOSED
        ledger every fragment is cut at ``last_entry_id`` (so an empty ledger has none); for other
        states the last fragment is open-ended (``last_entry_id`` None).
        """
        spans: list[tuple[int, int, int | None]] = []
        for i, (first, _) in enumerate(self.segments):
            end = self.segments[i + 1][0] - 1 if i + 1 < len(self.segments) else None
            if self.is_closed:
                end = self.last_entry_id if end is None else min(end, self.last_entry_id)
            if end is not None and end < first:
                continue
            spans.append((i, first, end))
        return tuple(
            Fragment(
                index=i,
                first_entry_id=first,
                last_entry_id=end,
                bookies=self.segments[i][1],
                ensemble_size=self.ensemble_size,
                write_quorum=self.write_quorum,
                is_last=n == len(spans) - 1,
            )
            for n, (i, first, end) in enumerate(spans)
        )


def _invariant_violation(meta: LedgerMetadata) -> str | None:
    if not 0 <= meta.ledger_id <= MAX_LEDGER_ID:
        return f"ledger id {meta.ledger_id} outside 0..2^63-1"
    if meta.format_version not in SUPPORTED_VERSIONS:
        return f"format version {meta.format_version} is not one of {SUPPORTED_VERSIONS}"
    if not isinstance(meta.state, LedgerState):
        return f"state {meta.state!r} is not a LedgerState"
    if not 1 <= meta.write_quorum <= meta.ensemble_size:
        return f"write quorum {meta.write_quorum} must be between 1 and ensemble size {meta.ensemble_size}"
    if meta.ack_quorum > meta.write_quorum:
        return f"ack quorum {meta.ack_quorum} exceeds write quorum {meta.write_quorum}"
    if not meta.segments:
        return "no ensembles (segments): BookKeeper requires at least one"
    previous = None
    for first, bookies in meta.segments:
        if len(bookies) != meta.ensemble_size:
            return f"ensemble from entry {first} has {len(bookies)} bookies, expected ensemble size {meta.ensemble_size}"
        if previous is not None and first < previous:
            return f"ensemble first entry ids go backwards ({previous} then {first})"
        previous = first
    if not meta.is_closed and (meta.last_entry_id != -1 or meta.length != 0):
        return f"{meta.state.name} ledger must have last_entry_id -1 and length 0"
    if (meta.digest_type is None) != (meta.password is None):
        return "digest type and password must both be set or both be None"
    if meta.digest_type is not None and not isinstance(meta.digest_type, DigestType):
        return f"digest type {meta.digest_type!r} is not a DigestType"
    return None


def parse_ledger_metadata(
    ledger_id: int, data: bytes, znode_ctime: int | None = None, *, source: str | None = None
) -> LedgerMetadata:
    """Decode a ledger znode's bytes (format V1, V2 or V3).

    ``znode_ctime`` is the znode's creation time, used for V2/V3 metadata that stores no ctime.
    ``source`` names the bytes in error messages (default: ``ledger <id>``).
    Raises MetadataFormatError with the offset and what was expected.
    """
    where = source or f"ledger {ledger_id}"
    data = bytes(data)
    version, body_offset = _read_header(data, where)
    if version == 3:
        fields = _decode_v3(data, body_offset, where)
    elif version == 2:
        fields = _decode_v2(data, body_offset, where)
    elif version == 1:
        fields = _decode_v1(data, body_offset, where)
    else:
        raise MetadataFormatError(f"{where}: metadata format version {version}, expected one of {SUPPORTED_VERSIONS}")
    if version != 1 and fields["ctime"] is None:
        fields["ctime"] = znode_ctime
    try:
        return LedgerMetadata(ledger_id=ledger_id, format_version=version, **fields)
    except MetadataFormatError as exc:
        raise MetadataFormatError(f"{where}: {exc}") from None


def _read_header(data: bytes, where: str) -> tuple[int, int]:
    if not data.startswith(HEADER_PREFIX):
        at = next((i for i, (a, b) in enumerate(zip(data, HEADER_PREFIX)) if a != b), len(data))
        raise MetadataFormatError(f"{where}: metadata header corrupt at offset {at}: expected {HEADER_PREFIX!r} at offset 0")
    start = len(HEADER_PREFIX)
    end = data.find(b"\n", start, start + MAX_VERSION_DIGITS + 1)
    if end < 0:
        raise MetadataFormatError(
            f"{where}: no newline within {MAX_VERSION_DIGITS} bytes after the header at offset {start}"
        )
    digits = data[start:end]
    if not digits.isdigit() or not digits.isascii():
        raise MetadataFormatError(f"{where}: format version {digits!r} at offset {start} is not a decimal number")
    return int(digits), end + 1


def _decode_v3(data: bytes, offset: int, where: str) -> dict:
    size, offset = _read_varint32(data, offset, where)
    if size > len(data) - offset:
        raise MetadataFormatError(
            f"{where}: V3 body of {size} bytes at offset {offset} runs past the end ({len(data) - offset} bytes left)"
        )
    from google.protobuf.message import DecodeError
    from scanner.metadata.proto.data_formats_pb2 import LedgerMetadataFormat

    msg = LedgerMetadataFormat()
    try:
        msg.ParseFromString(data[offset : offset + size])
    except DecodeError as exc:
        raise MetadataFormatError(f"{where}: V3 protobuf at offset {offset} does not decode: {exc}") from None
    # BookKeeper ignores bytes after the delimited message, and so do we.
    return _fields_from_message(msg)


def _read_varint32(data: bytes, offset: int, where: str) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_VARINT32_BYTES):
        if offset + i >= len(data):
            raise MetadataFormatError(f"{where}: V3 length varint truncated at offset {offset + i}")
        byte = data[offset + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if value > _INT32[1]:
                raise MetadataFormatError(f"{where}: V3 length varint at offset {offset} is negative as int32")
            return value, offset + i + 1
    raise MetadataFormatError(f"{where}: V3 length varint at offset {offset} longer than {_MAX_VARINT32_BYTES} bytes")


def _decode_v2(data: bytes, offset: int, where: str) -> dict:
    try:
        text = data[offset:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetadataFormatError(f"{where}: V2 text is not UTF-8 at offset {offset + exc.start}") from None
    from google.protobuf import text_format
    from scanner.metadata.proto.data_formats_pb2 import LedgerMetadataFormat

    msg = LedgerMetadataFormat()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as exc:
        raise MetadataFormatError(f"{where}: V2 text after offset {offset} does not parse: {exc}") from None
    if not msg.IsInitialized():
        missing = ", ".join(msg.FindInitializationErrors())
        raise MetadataFormatError(f"{where}: V2 text after offset {offset} lacks required fields: {missing}")
    return _fields_from_message(msg)


# Enum members by value: a dict lookup costs a tenth of calling the enum, once per ledger of a pass.
_STATES = {state.value: state for state in LedgerState}
_DIGEST_TYPES = {digest_type.value: digest_type for digest_type in DigestType}


def _fields_from_message(msg: LedgerMetadataFormat) -> dict:
    state = _STATES.get(msg.state) or LedgerState(msg.state)
    closed = state is LedgerState.CLOSED
    has_password = msg.HasField("password")
    return {
        "ensemble_size": msg.ensembleSize,
        "write_quorum": msg.quorumSize,
        "ack_quorum": msg.ackQuorumSize if msg.HasField("ackQuorumSize") else msg.quorumSize,
        "state": state,
        # Readers ignore length and lastEntryId unless the ledger is closed.
        "last_entry_id": msg.lastEntryId if closed else -1,
        "length": msg.length if closed else 0,
        "segments": tuple([(s.firstEntryId, tuple(s.ensembleMember)) for s in msg.segment]),
        # An absent digestType reads as the enum's first value (CRC32), as in BookKeeper.
        "digest_type": (_DIGEST_TYPES.get(msg.digestType) or DigestType(msg.digestType)) if has_password else None,
        "password": bytes(msg.password) if has_password else None,
        "ctime": msg.ctime if msg.HasField("ctime") else None,
        "custom_metadata": tuple([(e.key, e.value) for e in msg.customMetadata]),
        "ctoken": msg.cToken if msg.HasField("cToken") else None,
    }


def _decode_v1(data: bytes, offset: int, where: str) -> dict:
    try:
        text = data[offset:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetadataFormatError(f"{where}: V1 text is not UTF-8 at offset {offset + exc.start}") from None
    lines = re.split(r"\r\n|\r|\n", text)
    if lines and lines[-1] == "":
        lines.pop()  # a final line terminator does not start another line
    if len(lines) < 3:
        raise MetadataFormatError(
            f"{where}: V1 body after offset {offset} has {len(lines)} lines, expected at least 3 "
            "(quorum size, ensemble size, length)"
        )
    write_quorum = _v1_number(lines[0], "quorum size", 1, where, _INT32)
    ensemble_size = _v1_number(lines[1], "ensemble size", 2, where, _INT32)
    length = _v1_number(lines[2], "length", 3, where, _INT64)
    segments = []
    state, last_entry_id = LedgerState.OPEN, -1
    for line_no, line in enumerate(lines[3:], start=4):
        parts = line.split("\t")
        if len(parts) < 2:
            raise MetadataFormatError(
                f"{where}: V1 line {line_no} {line!r}: expected '<firstEntryId>\\t<bookie>...' or '<lastEntryId>\\tCLOSED'"
            )
        number = _v1_number(parts[0], "entry id", line_no, where, _INT64)
        if parts[1] == _V1_CLOSED_TAG:
            if number == _V1_IN_RECOVERY_ENTRY_ID:
                state = LedgerState.IN_RECOVERY
            else:
                state, last_entry_id = LedgerState.CLOSED, number
            break  # BookKeeper stops reading at the state line
        segments.append((number, tuple(parts[1:])))
    return {
        "ensemble_size": ensemble_size,
        "write_quorum": write_quorum,
        "ack_quorum": write_quorum,
        "state": state,
        "last_entry_id": last_entry_id,
        "length": length if state is LedgerState.CLOSED else 0,
        "segments": tuple(segments),
        "digest_type": None,
        "password": None,
        "ctime": None,  # V1 never carries a ctime, and BookKeeper does not fall back to the znode's
        "custom_metadata": (),
        "ctoken": None,
    }


def _v1_number(text: str, what: str, line_no: int, where: str, bounds: tuple[int, int]) -> int:
    if not _DECIMAL.fullmatch(text) or not bounds[0] <= int(text) <= bounds[1]:
        raise MetadataFormatError(f"{where}: V1 line {line_no}: {what} {text!r} is not a decimal number in range")
    return int(text)


def move_refusal(meta: LedgerMetadata) -> str | None:
    """Why a fragment of this ledger cannot be moved by this scanner whatever its copies; None when it can.

    Format 1 (text, BookKeeper 4.1 and older) names no digest type or password: no copy can be verified,
    and its metadata is not rewritten here. Format 2 written by those versions can lack them too.
    """
    if meta.format_version not in REWRITABLE_VERSIONS:
        return (f"ledger {meta.ledger_id} has metadata format {meta.format_version} (text, BookKeeper 4.1 or "
                "older): it names no digest type or password, so no copy can be verified, and this scanner does "
                "not rewrite that format: not moved")
    if meta.digest_type is None:
        return (f"ledger {meta.ledger_id}'s metadata (format {meta.format_version}) has no digest type and password "
                "(a ledger of BookKeeper 4.1 or older): no copy can be verified")
    return None


def replace_ensemble_member(data: bytes, first_entry_id: int, old: str, new: str, *, source: str) -> bytes:
    """The znode bytes ``data`` with ``old`` replaced by ``new`` in the ensemble starting at ``first_entry_id``.

    What BookKeeper's fragment replication writes once it has copied a fragment to a new bookie. Only
    that member changes: the format version, every other field and any field this scanner does not
    know are kept as they were. V1 metadata (BookKeeper 4.1 and older) is not rewritten.
    Raises MetadataFormatError when the bytes do not decode, the ensemble is not there, it lacks
    ``old``, or already has ``new``.
    """
    from google.protobuf import text_format
    from google.protobuf.message import DecodeError
    from scanner.metadata.proto.data_formats_pb2 import LedgerMetadataFormat

    data = bytes(data)
    version, offset = _read_header(data, source)
    msg = LedgerMetadataFormat()
    if version == 3:
        size, offset = _read_varint32(data, offset, source)
        try:
            msg.ParseFromString(data[offset : offset + size])
        except DecodeError as exc:
            raise MetadataFormatError(f"{source}: V3 protobuf at offset {offset} does not decode: {exc}") from None
    elif version == 2:
        try:
            text_format.Parse(data[offset:].decode("utf-8"), msg)
        except (UnicodeDecodeError, text_format.ParseError) as exc:
            raise MetadataFormatError(f"{source}: V2 text after offset {offset} does not parse: {exc}") from None
    else:
        raise MetadataFormatError(f"{source}: metadata format version {version} is not rewritten "
                                  f"(only {' and '.join(f'V{v}' for v in REWRITABLE_VERSIONS)} are)")
    segment = next((s for s in msg.segment if s.firstEntryId == first_entry_id), None)
    if segment is None:
        raise MetadataFormatError(f"{source}: no ensemble starts at entry {first_entry_id}")
    members = list(segment.ensembleMember)
    if old not in members:
        raise MetadataFormatError(f"{source}: the ensemble at entry {first_entry_id} does not name {old}")
    if new in members:
        raise MetadataFormatError(f"{source}: the ensemble at entry {first_entry_id} already names {new}")
    segment.ensembleMember[members.index(old)] = new
    header = HEADER_PREFIX + str(version).encode() + b"\n"
    if version == 3:
        body = msg.SerializeToString()
        return header + _varint(len(body)) + body
    return header + text_format.MessageToString(msg).encode("utf-8")


def serialize_ledger_metadata(meta: LedgerMetadata, version: int = 3) -> bytes:
    """Encode ``meta`` as BookKeeper writes it in format ``version`` (for tests and demo data).

    V2 drops ``ctoken``; V1 also drops digest type, password, ack quorum, ctime and custom
    metadata, as BookKeeper does.
    """
    from google.protobuf import text_format

    header = HEADER_PREFIX + str(version).encode() + b"\n"
    if version == 3:
        body = _to_message(meta, with_ctoken=True).SerializeToString()
        return header + _varint(len(body)) + body
    if version == 2:
        return header + text_format.MessageToString(_to_message(meta, with_ctoken=False)).encode("utf-8")
    if version == 1:
        return header + _v1_body(meta).encode("utf-8")
    raise ValueError(f"metadata format version {version} is not one of {SUPPORTED_VERSIONS}")


def _to_message(meta: LedgerMetadata, with_ctoken: bool) -> LedgerMetadataFormat:
    from scanner.metadata.proto.data_formats_pb2 import LedgerMetadataFormat

    msg = LedgerMetadataFormat(
        quorumSize=meta.write_quorum,
        ensembleSize=meta.ensemble_size,
        length=meta.length,
        lastEntryId=meta.last_entry_id,
        state=int(meta.state),
        ackQuorumSize=meta.ack_quorum,
    )
    for first, bookies in meta.segments:
        msg.segment.add(firstEntryId=first, ensembleMember=bookies)
    if meta.password is not None:
        msg.digestType = int(meta.digest_type)
        msg.password = meta.password
    if meta.ctime is not None:
        msg.ctime = meta.ctime
    for key, value in meta.custom_metadata:
        msg.customMetadata.add(key=key, value=value)
    if with_ctoken and meta.ctoken is not None:
        msg.cToken = meta.ctoken
    return msg


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _v1_body(meta: LedgerMetadata) -> str:
    lines = [str(meta.write_quorum), str(meta.ensemble_size), str(meta.length)]
    lines += ["\t".join([str(first), *bookies]) for first, bookies in meta.segments]
    if meta.state is LedgerState.OPEN:
        return "".join(line + "\n" for line in lines)
    last = _V1_IN_RECOVERY_ENTRY_ID if meta.state is LedgerState.IN_RECOVERY else meta.last_entry_id
    # Every line but the state line ends in a newline.
    return "".join(line + "\n" for line in lines) + f"{last}\t{_V1_CLOSED_TAG}"
