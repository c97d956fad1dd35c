"""Where the shared corpus of real BookKeeper 4.16.7 data sits (beside the checkout), and its ground truth."""

from __future__ import annotations

import functools
import json
import os
from contextlib import contextmanager
from pathlib import Path

from scanner.cli import main
from scanner.native.switch import NATIVE_VARIABLE

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "real-bookkeeper-4.16.7"
BOOKIES = ("bookie1", "bookie2", "bookie3", "bookie4")


@functools.cache
def manifest() -> dict:
    return json.loads((CORPUS / "manifest.json").read_text())


@functools.cache
def corruption_report() -> dict:
    return json.loads((CORPUS / "corrupted" / "corruption-report.json").read_text())


def bookie_id(name: str) -> str:
    return next(b["bookie_id"] for b in manifest()["bookies"] if b["name"] == name)


def deleted_ledgers() -> set[int]:
    return {l["ledger_id"] for l in manifest()["ledgers"] if l["status"] == "DELETED"}


def scan_args(name: str, ledger_dir: Path | None = None) -> list[str]:
    """``bookie-scanner scan`` options for a corpus bookie (its conf names the original paths)."""
    return ["--bookie-conf", str(CORPUS / "bookie-configs" / f"{name}.conf"),
            "--ledger-dirs", str(ledger_dir or CORPUS / name / "ledgers")]


def scan(capsys, *args: str) -> tuple[int, dict]:
    status = main(["scan", "--full-speed", *args, "--format", "json"])
    return status, json.loads(capsys.readouterr().out)


@contextmanager
def reference_walker():
    """Walks in the context use the Python walker (the reference), whatever is built."""
    before = os.environ.get(NATIVE_VARIABLE)
    os.environ[NATIVE_VARIABLE] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[NATIVE_VARIABLE]
        else:
            os.environ[NATIVE_VARIABLE] = before


def scan_with_both_walkers(capsys, *args: str) -> tuple[int, dict]:
    """``scan`` as :func:`scan` runs it, and again with the reference walker: both must report the same."""
    status, report = scan(capsys, *args)
    with reference_walker():
        again, reference = scan(capsys, *args)
    assert (again, timeless(reference)) == (status, timeless(report)), "the walkers disagree"
    return status, report


def timeless(report: dict) -> dict:
    """A report without its envelope's time: two scans of the same thing compare equal."""
    return {key: value for key, value in report.items() if key != "generated_at"}


def by_category(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for finding in report["findings"]:
        out.setdefault(finding["category"], []).append(finding)
    return out


def entries_of(findings: list[dict]) -> set[tuple[int, int]]:
    return {(f["ledger_id"], e) for f in findings for first, last in f["entries"] for e in range(first, last + 1)}


def expected_missing(name: str) -> set[tuple[int, int]]:
    me = bookie_id(name)
    return {(l["ledger_id"], e) for l in manifest()["ledgers"]
            for e in (l.get("expected_minus_stored") or {}).get(me, [])}


def stored_deleted(name: str) -> set[int]:
    me = bookie_id(name)
    return {l["ledger_id"] for l in manifest()["ledgers"]
            if l["ledger_id"] in deleted_ledgers() and l["stored_on"].get(me)}


def assert_clean_report(name: str, status: int, report: dict) -> None:
    found = by_category(report)
    assert set(found) <= {"missing_entry", "orphan_ledger"}, found
    assert entries_of(found.get("missing_entry", [])) == expected_missing(name)
    assert {f["ledger_id"] for f in found.get("orphan_ledger", [])} == stored_deleted(name)
    assert status == (1 if expected_missing(name) else 0)
    assert report["bookie_id"] == bookie_id(name)
    stored = sum(len(l["stored_on"].get(bookie_id(name), [])) for l in manifest()["ledgers"]
                 if l["ledger_id"] not in deleted_ledgers())
    assert report["summary"]["entries_verified"] >= stored
