"""Every command's ``--format text|json``: text for people, JSON in the tool's envelope for machines."""

from __future__ import annotations

import argparse
import sys

from scanner.envelope import envelope, write_document


def add_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text for people (default) or JSON (documented by schemas/<kind>.schema.json)")


def add_show_secrets_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--show-secrets", "--show-password", dest="show_secrets", action="store_true",
                        help="also print ledger passwords and master keys (SHA-1 of 'ledger' + password): "
                             "write credentials, which a recovery add to any bookie of the ledger accepts; "
                             "hidden by default, as BookKeeper's own toSafeString hides them")


def emit(args, kind: str, document: dict, text_lines: list[str]) -> None:
    """Print ``document`` as JSON of ``kind`` with ``--format json``, else the text lines."""
    if args.format == "json":
        write_document(envelope(kind, document))
    else:
        sys.stdout.write("\n".join(text_lines) + "\n")
