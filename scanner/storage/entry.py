"""The stored entry: its 32-byte header and its digest (CRC32, CRC32C, HMAC-SHA1, DUMMY).

An entry, as a bookie stores it, is exactly what the client sent:
``>q ledgerId, >q entryId, >q lastAddConfirmed, >q length`` then the digest, then the payload.
The digest covers the 32-byte header followed by the payload, skipping the digest itself.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import struct
import zlib
from dataclasses import dataclass

METADATA_LENGTH = 32
HEADER = struct.Struct(">qqqq")
_CRC32_DIGEST = struct.Struct(">q")
_CRC32C_DIGEST = struct.Struct(">I")


class DigestType(enum.IntEnum):
    """Digest types with the numbers of BookKeeper's ``LedgerMetadataFormat.DigestType``."""

    CRC32 = 1
    HMAC = 2  # the client API calls it MAC
    CRC32C = 3
    DUMMY = 4


DIGEST_LENGTH = {DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.CRC32C: 4, DigestType.DUMMY: 0}


@dataclass(frozen=True, slots=True)
class EntryHeader:
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int


def parse_header(buf, offset: int = 0) -> EntryHeader:
    """The header of the entry starting at ``offset`` (the caller checked 32 bytes are there)."""
    return EntryHeader(*HEADER.unpack_from(buf, offset))


def master_key(password: bytes) -> bytes:
    """The key a bookie stores for a ledger: SHA-1("ledger" + password)."""
    return hashlib.sha1(b"ledger" + password).digest()


def mac_key(password: bytes) -> bytes:
    """The HMAC-SHA1 key BookKeeper derives from a ledger password: SHA-1("mac" + password)."""
    return hashlib.sha1(b"mac" + password).digest()


class DigestVerifier:
    """Checks stored entries of one ledger against its digest type (and password, for HMAC).

    ``verify`` works on a memoryview of the entry bytes and copies nothing: the digest runs over
    the header slice and the payload slice in two calls.
    """

    __slots__ = ("digest_type", "digest_length", "min_length", "mac_key", "_check")

    def __init__(self, digest_type: DigestType, password: bytes = b""):
        self.digest_type = DigestType(digest_type)
        self.digest_length = DIGEST_LENGTH[self.digest_type]
        self.min_length = METADATA_LENGTH + self.digest_length
        self.mac_key = mac_key(password) if self.digest_type is DigestType.HMAC else None
        if self.digest_type is DigestType.CRC32:
            self._check = _check_crc32
        elif self.digest_type is DigestType.CRC32C:
            self._check = _check_crc32c
        elif self.digest_type is DigestType.HMAC:
            self._check = _hmac_checker(self.mac_key)
        else:
            self._check = _check_dummy

    def verify(self, entry: memoryview) -> bool:
        """True when the entry is long enough and its stored digest matches its bytes."""
        if len(entry) < self.min_length:
            return False
        return self._check(entry)


def _check_crc32(entry: memoryview) -> bool:
    value = zlib.crc32(entry[40:], zlib.crc32(entry[:32]))
    return _CRC32_DIGEST.unpack_from(entry, 32)[0] == value


@functools.cache
def _crc32c():
    """The crc32c package's function, imported on first use: the import costs tens of milliseconds (the package reads
    its own installed metadata), which a scan whose records are verified in C need not pay."""
    from crc32c import crc32c

    return crc32c


def _check_crc32c(entry: memoryview) -> bool:
    crc32c = _crc32c()
    value = crc32c(entry[36:], crc32c(entry[:32]))
    return _CRC32C_DIGEST.unpack_from(entry, 32)[0] == value


def _check_dummy(entry: memoryview) -> bool:
    return True


def _hmac_checker(key: bytes):
    base = hmac.new(key, digestmod=hashlib.sha1)

    def check(entry: memoryview) -> bool:
        h = base.copy()
        h.update(entry[:32])
        h.update(entry[52:])
        return hmac.compare_digest(h.digest(), entry[32:52])

    return check


def digest_of(digest_type: DigestType, password: bytes, header: bytes, payload: bytes) -> bytes:
    """The digest bytes a BookKeeper client stores between ``header`` (32 bytes) and ``payload``."""
    digest_type = DigestType(digest_type)
    if digest_type is DigestType.CRC32:
        return _CRC32_DIGEST.pack(zlib.crc32(payload, zlib.crc32(header)))
    if digest_type is DigestType.CRC32C:
        crc32c = _crc32c()
        return _CRC32C_DIGEST.pack(crc32c(payload, crc32c(header)))
    if digest_type is DigestType.HMAC:
        return hmac.new(mac_key(password), header + payload, hashlib.sha1).digest()
    return b""


def build_entry(
    ledger_id: int,
    entry_id: int,
    last_add_confirmed: int,
    length: int,
    payload: bytes,
    digest_type: DigestType,
    password: bytes = b"",
) -> bytes:
    """The stored bytes of an entry, as a BookKeeper client sends them (for sample data and tests)."""
    header = HEADER.pack(ledger_id, entry_id, last_add_confirmed, length)
    return header + digest_of(digest_type, password, header, payload) + payload
