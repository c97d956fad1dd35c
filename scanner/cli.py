"""The ``bookie-scanner`` command: one sub-command per module in ``scanner.commands``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from typing import NoReturn

from scanner.errors import UsageError
from scanner.scan import allocator, collector

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
    "repair",
)

# Exit statuses every command shares; 0 and 1 are each command's own (clean, findings: see its --help).
EXIT_USAGE = 2  # the operator fixes the command line, the config or what they name: restarting does not help
EXIT_CRASH = 70  # an unexpected error (sysexits' EX_SOFTWARE): a bug or an unforeseen condition; worth a restart
EXIT_INTERRUPTED = 130  # as a shell reports SIGINT
EXIT_BROKEN_PIPE = 141  # as a shell reports SIGPIPE: whoever read the output stopped reading (`| head`)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a command-line mistake is one line on stderr (exit status 2), not usage plus error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _VersionAction(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked (it costs an import)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from scanner.envelope import tool_version
        from scanner.native.switch import walker_in_use

        print(f"{parser.prog} {tool_version()} (record walker: {walker_in_use()})")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="bookie-scanner",
        description=(
            "Read-only data-integrity scanner for Apache BookKeeper bookies. It walks a bookie's "
            "indexes and entry logs, verifies every entry's digest against the ledger metadata, "
            "and reports (optionally marks for re-replication) what is missing or corrupt."
        ),
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument("--verbose", action="store_true",
                        help="show Python tracebacks of unexpected errors and Spark's own logs on stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"scanner.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    allocator.give_back_freed_buffers()
    collector.collect_rarely()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a command-line mistake already told in one line
        return done.code
    try:
        status = args.func(args)
        sys.stdout.flush()  # a reader gone before the last buffered bytes is a broken pipe too
        return status
    except UsageError as exc:
        print(f"bookie-scanner {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"bookie-scanner {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug or an unforeseen condition: one line, the traceback only on request
        if args.verbose:
            traceback.print_exc()
        print(f"bookie-scanner {args.command}: unexpected {type(exc).__name__}: {_one_line(str(exc))} "
              + ("" if args.verbose else "(run with --verbose for the traceback)"), file=sys.stderr)
        return EXIT_CRASH


def _discard_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush at exit must not fail on the closed pipe again."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a test's capture): nothing will flush to a pipe
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _one_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no detail)"


if __name__ == "__main__":
    sys.exit(main())
