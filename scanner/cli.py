"""The ``bookie-scanner`` command: one sub-command per module in ``scanner.commands``."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines ``register(subparsers)``, which adds its parser and sets ``func`` (args -> exit code).
# Modules import their heavy dependencies (kazoo, pyspark, rocksdict) inside ``func``, so --help stays fast.
COMMAND_MODULES = (
    "scan",
    "demo",
    "inspect",
    "metadata",
    "marks",
    "run",
    "status",
    "suspect",
    "pause",
    "export",
    "audit",
    "heal",
)

EXIT_USAGE = 2


class UsageError(Exception):
    """A problem the operator fixes on the command line or in a config file (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bookie-scanner",
        description=(
            "Read-only data-integrity scanner for Apache BookKeeper bookies. It walks a bookie's "
            "indexes and entry logs, verifies every entry's digest against the ledger metadata, "
            "and reports (optionally marks for re-replication) what is missing or corrupt."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"scanner.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"bookie-scanner {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    # Run through the package module, so commands raise the same UsageError class this main catches.
    from scanner.cli import main as package_main

    sys.exit(package_main())
