"""Where the shared corpus of real BookKeeper 4.16.7 data sits (beside the checkout), and its ground truth."""

from __future__ import annotations

import functools
import json
from pathlib import Path

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
