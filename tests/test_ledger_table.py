"""The pass's compact table of ledgers: appended in any order, looked up by id once frozen."""

from __future__ import annotations

import random

from corpus import reference_walker
from scanner.native.switch import native_code
from scanner.scan.ledger_table import LedgerTable
from scanner.storage.entry import DigestType, build_entry, mac_key

PASSWORDS = (b"", b"secret", b"other")


def digest_of_ledger(ledger_id: int) -> DigestType | None:
    return None if ledger_id % 7 == 0 else list(DigestType)[ledger_id % len(DigestType)]


def test_ledgers_added_out_of_order_keep_their_digest_type_and_password():
    ids = list(range(5, 60_000, 3))  # enough that the table is sorted in bulk, not one by one
    random.Random(9).shuffle(ids)
    table = LedgerTable()
    for ledger_id in ids:
        table.add(ledger_id, digest_of_ledger(ledger_id), PASSWORDS[ledger_id % 3])
    table.freeze()
    assert len(table) == len(ids)
    assert list(table._ids) == sorted(ids)
    for ledger_id in ids[:2000]:
        listed, verifier = table.lookup(ledger_id)
        assert listed
        if digest_of_ledger(ledger_id) is None:
            assert verifier is None
            continue
        assert verifier.digest_type is digest_of_ledger(ledger_id)
        entry = build_entry(ledger_id, 0, -1, 3, b"abc", verifier.digest_type, PASSWORDS[ledger_id % 3])
        assert verifier.verify(memoryview(entry))
        if verifier.digest_type is DigestType.HMAC:  # the password went with its ledger through the sort
            wrong = build_entry(ledger_id, 0, -1, 3, b"abc", DigestType.HMAC, PASSWORDS[(ledger_id + 1) % 3])
            assert not verifier.verify(memoryview(wrong))
    assert 6 not in table and 60_002 not in table
    assert table.lookup(4) == (False, None)


def test_a_table_appended_in_order_is_looked_up_without_a_sort():
    table = LedgerTable()
    for ledger_id in (1, 2, 10, 2**63 - 1):
        table.add(ledger_id, DigestType.CRC32C, None)
    assert 2**63 - 1 in table and 3 not in table
    assert table.verifier(10).digest_type is DigestType.CRC32C


def test_more_kinds_than_a_byte_numbers_keep_their_ledgers_apart():
    table = LedgerTable()
    for ledger_id in range(600, 0, -1):  # 600 passwords: the kind numbers outgrow a byte, out of order
        table.add(ledger_id, DigestType.HMAC, b"password %d" % ledger_id)
    for ledger_id in (1, 255, 256, 257, 600):
        verifier = table.verifier(ledger_id)
        for password, right in ((b"password %d" % ledger_id, True), (b"password 0", False)):
            assert verifier.verify(memoryview(build_entry(ledger_id, 0, -1, 1, b"x", DigestType.HMAC, password))) is right


def test_the_native_sort_orders_the_table_as_pyarrow_does():
    rng = random.Random(4)
    ids = [rng.randrange(2**64) for _ in range(3000)] + [7] * 5 + [2**40 + 3] * 3  # repeats keep their order
    rng.shuffle(ids)

    def frozen() -> tuple[list[int], list[int]]:
        table = LedgerTable()
        for n, ledger_id in enumerate(ids):
            table.add(ledger_id, list(DigestType)[n % len(DigestType)], PASSWORDS[n % 3])
        table.freeze()
        return list(table._ids), list(table._kinds)

    assert native_code() is not None, "the native code is not built"
    native = frozen()
    with reference_walker():
        assert frozen() == native
    assert native[0] == sorted(ids)


def test_ledgers_added_together_are_the_ledgers_added_one_at_a_time():
    # 300 kinds (the numbers widen past a byte in the middle of a batch), given in batches or one at a time.
    kinds = [(DigestType.HMAC, bytes([k % 256, k // 256])) for k in range(300)] + [(None, b"")]
    ledgers = [(ledger_id * 7 % 1000, kinds[ledger_id % len(kinds)]) for ledger_id in range(1000)]
    one, batched = LedgerTable(), LedgerTable()
    for ledger_id, (digest_type, password) in ledgers:
        one.add(ledger_id, digest_type, password)
    for at in range(0, len(ledgers), 97):
        batch = ledgers[at:at + 97]
        batched.add_ledgers([ledger_id for ledger_id, _ in batch], [kind for _, kind in batch])
    ids, numbers, verifiers = batched.columns()
    assert (ids, numbers) == one.columns()[:2]
    assert [(v.digest_type, v.mac_key) if v else None for v in verifiers] == \
        [(v.digest_type, v.mac_key) if v else None for v in one.columns()[2]]
    for ledger_id, (digest_type, password) in ledgers[::37]:
        verifier = batched.verifier(ledger_id)
        assert (verifier.digest_type, verifier.mac_key) == (digest_type, mac_key(password)) if digest_type else verifier is None


def test_the_ledgers_a_table_lacks_are_told_among_any_ids():
    table = LedgerTable()
    for ledger_id in range(0, 10_000, 3):
        table.add(ledger_id, DigestType.CRC32C, b"p")
    asked = list(range(5, 50)) + [2**63 - 1, 9999, 0]
    assert table.lacking(asked) == {i for i in asked if i % 3 or i >= 10_000}
    assert table.lacking([]) == set() and table.lacking([9]) == set() and table.lacking([10]) == {10}
