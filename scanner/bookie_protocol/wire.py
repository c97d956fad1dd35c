"""BookKeeper's bookie wire protocol, version 2 (binary), as a small asyncio client.

Two requests are enough to repair: read one entry, and add one entry with the recovery flag (the add
BookKeeper's own recovery uses: it is accepted on a fenced ledger and needs the ledger's master key).
Every frame is a 4-byte big-endian length and then the packet; a packet starts with an int holding
the protocol version (2), the operation and flags. An add carries the 20-byte master key and the
entry exactly as a client stores it (the entry's own first 16 bytes name ledger and entry); a read
carries ledger and entry id. A response holds the header, a return code, ledger and entry id and,
for a successful read, the stored entry. A bookie without an authentication plugin serves v2
requests as soon as the connection is up; it decides per connection between v2 and v3 from the
first packet. Nothing here fences a ledger (no fencing flag, no master key on reads).
"""

from __future__ import annotations

import asyncio
import enum
import struct
from dataclasses import dataclass

PROTOCOL_VERSION = 2
MASTER_KEY_LENGTH = 20
_FRAME_LENGTH = struct.Struct(">i")
_READ_REQUEST = struct.Struct(">iiqq")  # frame length, packet header, ledger id, entry id
_RESPONSE = struct.Struct(">iiqq")  # packet header, return code, ledger id, entry id
_ADD_PREFIX = struct.Struct(">ii")  # frame length, packet header; then master key and entry
_LEDGER_AND_ENTRY = struct.Struct(">qq")
MAX_RESPONSE_FRAME = 64 * 1024 * 1024  # a bookie's largest frame is a few MB (nettyMaxFrameSizeBytes)


class Operation(enum.IntEnum):
    ADD_ENTRY = 1
    READ_ENTRY = 2


class Flag(enum.IntFlag):
    NONE = 0
    DO_FENCING = 1
    RECOVERY_ADD = 2
    HIGH_PRIORITY = 4


class ReturnCode(enum.IntEnum):
    """The v2 return codes of BookieProtocol."""

    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102  # unauthorized: the master key does not match the ledger's
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWNLEDGERSTATE = 107


def code_name(code: int) -> str:
    try:
        return ReturnCode(code).name
    except ValueError:
        return f"return code {code}"


class BookieUnreachable(Exception):
    """No answer from a bookie: cannot connect, connection lost, timeout, or a reply that makes no sense."""


@dataclass(frozen=True, slots=True)
class Reply:
    code: int
    ledger_id: int
    entry_id: int
    body: bytes  # the stored entry of a successful read; empty otherwise

    @property
    def ok(self) -> bool:
        return self.code == ReturnCode.EOK


def packet_header(operation: Operation, flags: Flag = Flag.NONE) -> int:
    return (PROTOCOL_VERSION << 24) | (int(operation) << 16) | int(flags)


def read_request(ledger_id: int, entry_id: int) -> bytes:
    """A framed v2 read of one entry, without fencing."""
    return _READ_REQUEST.pack(_READ_REQUEST.size - _FRAME_LENGTH.size, packet_header(Operation.READ_ENTRY),
                              ledger_id, entry_id)


def recovery_add_request(entry: bytes, master_key: bytes) -> bytes:
    """A framed v2 add of ``entry`` (stored bytes: header, digest, payload) with the recovery flag."""
    if len(master_key) != MASTER_KEY_LENGTH:
        raise ValueError(f"a master key is {MASTER_KEY_LENGTH} bytes, got {len(master_key)}")
    if len(entry) < _LEDGER_AND_ENTRY.size:
        raise ValueError("an entry starts with its ledger and entry id (16 bytes)")
    length = _ADD_PREFIX.size - _FRAME_LENGTH.size + MASTER_KEY_LENGTH + len(entry)
    return _ADD_PREFIX.pack(length, packet_header(Operation.ADD_ENTRY, Flag.RECOVERY_ADD)) + master_key + entry


class BookieConnection:
    """One TCP connection to a bookie; one request at a time (the v2 protocol has no request ids)."""

    def __init__(self, bookie_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float):
        self.bookie_id = bookie_id
        self._reader = reader
        self._writer = writer
        self._timeout = timeout
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, bookie_id: str, address: tuple[str, int], timeout: float = 10.0) -> "BookieConnection":
        """A connection to ``bookie_id`` at ``address`` (host, port: where its registration says it is)."""
        host, port = address
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise BookieUnreachable(f"cannot connect to bookie {bookie_id} at {host}:{port}: "
                                    f"{exc or 'timed out'}") from None
        return cls(bookie_id, reader, writer, timeout)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass  # already reset by the peer: closed either way

    async def __aenter__(self) -> "BookieConnection":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def read_entry(self, ledger_id: int, entry_id: int) -> Reply:
        return await self._exchange(read_request(ledger_id, entry_id), Operation.READ_ENTRY, ledger_id, entry_id)

    async def recovery_add(self, entry: bytes, master_key: bytes) -> Reply:
        ledger_id, entry_id = _LEDGER_AND_ENTRY.unpack_from(entry)
        return await self._exchange(recovery_add_request(entry, master_key), Operation.ADD_ENTRY, ledger_id, entry_id)

    async def _exchange(self, frame: bytes, operation: Operation, ledger_id: int, entry_id: int) -> Reply:
        async with self._lock:
            try:
                self._writer.write(frame)
                await asyncio.wait_for(self._writer.drain(), self._timeout)
                packet = await asyncio.wait_for(self._read_frame(), self._timeout)
            except asyncio.TimeoutError:
                raise BookieUnreachable(f"bookie {self.bookie_id} did not answer within {self._timeout:g} s") from None
            except (OSError, asyncio.IncompleteReadError) as exc:
                raise BookieUnreachable(f"connection to bookie {self.bookie_id} lost: {exc}") from None
        header, code, got_ledger, got_entry = _RESPONSE.unpack_from(packet)
        if (header >> 16) & 0xFF != operation or (got_ledger, got_entry) != (ledger_id, entry_id):
            raise BookieUnreachable(
                f"bookie {self.bookie_id} answered operation {(header >> 16) & 0xFF} for {got_ledger}:{got_entry} "
                f"to operation {int(operation)} for {ledger_id}:{entry_id}")
        return Reply(code, got_ledger, got_entry, packet[_RESPONSE.size:])

    async def _read_frame(self) -> bytes:
        (length,) = _FRAME_LENGTH.unpack(await self._reader.readexactly(_FRAME_LENGTH.size))
        if not _RESPONSE.size <= length <= MAX_RESPONSE_FRAME:
            raise BookieUnreachable(f"bookie {self.bookie_id} sent a frame of {length} bytes: not a v2 response")
        return await self._reader.readexactly(length)
