"""Argument types shared by the commands: ids as BookKeeper spells them, rates with units, checked at parse time."""

from __future__ import annotations

import argparse
import re

from scanner.metadata.ledger import MAX_LEDGER_ID  # ledger ids are non-negative Java longs
from scanner.units import parse_quantity

MAX_ENTRY_LOG_ID = 2**32 - 1  # entry log ids are ints, written in hex as file names


def ledger_id(text: str) -> int:
    """A ledger id: a decimal from 0 to 2^63-1."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"ledger id {text!r}: expected a decimal number") from None
    if not 0 <= value <= MAX_LEDGER_ID:
        raise argparse.ArgumentTypeError(f"ledger id {text} is out of range: expected 0 to {MAX_LEDGER_ID}")
    return value


def entry_log_id(text: str) -> int:
    """An entry log id: decimal (26), or hex as the file is named (0x1a, 1a.log)."""
    decimal = text.isdigit()
    match = None if decimal else re.fullmatch(r"(0x[0-9a-fA-F]+|[0-9a-fA-F]+\.log)", text)
    if not decimal and match is None:
        raise argparse.ArgumentTypeError(f"entry log {text!r}: expected a decimal id (26), 0x1a or 1a.log")
    value = int(text, 10) if decimal else int(text.removesuffix(".log"), 16)
    if value > MAX_ENTRY_LOG_ID:
        raise argparse.ArgumentTypeError(f"entry log {text} is out of range: expected an id up to {MAX_ENTRY_LOG_ID}")
    return value


def rate(text: str) -> int:
    """Bytes per second, more than 0: ``50000000``, ``50M``, ``50MB/s``, ``48MiB``."""
    try:
        value = int(parse_quantity(text, "B"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"rate {exc}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"rate {text}: expected at least 1 byte per second")
    return value
