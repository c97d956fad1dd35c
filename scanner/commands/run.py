"""``bookie-scanner run``: the long-running agent (what the systemd unit starts)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from scanner.errors import UsageError

DESCRIPTION = """\
Run the scanning agent for one bookie until stopped: one scanner per ledger directory walks its
ledgers and entry logs in a full pass per period, throttled, suspects (from the bookie's log, the
endpoint or 'bookie-scanner suspect') first. Progress is saved in the state dir; a restart resumes.

Signals: SIGTERM/SIGINT stop at the next record (cursors saved, exit 0); SIGHUP reloads the config.
Endpoint: GET /health, GET /metrics, POST /suspects, POST /pause, POST /resume.
Exit status: 0 stopped, 2 configuration error (also: the state dir inside a bookie dir or not
writable, the listen port busy): restarting does not help; 70 an unexpected error: the unit restarts it.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run the background scanning agent",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="FILE", type=Path, required=True,
                        help="the agent's TOML config (see conf/scanner.toml)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="what the agent logs to stderr (default: INFO)")
    parser.set_defaults(func=run)


def load(path: Path):
    """The config at ``path``; a UsageError (one line) if it cannot be used."""
    from scanner.agent.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def writable_state_dir(config) -> None:
    """UsageError unless a command may write the config's state dir: outside the bookie's dirs and usable.

    Checked before anything is created there.
    """
    from scanner.agent import statedir
    from scanner.storage.layout import LayoutError

    try:
        layout = config.bookie_layout()
        statedir.make_ready(config.state_dir, layout)
    except (LayoutError, statedir.StateDirError) as exc:
        raise UsageError(str(exc)) from None


def log_format(environ) -> str:
    """The agent's log line: with a timestamp, unless stderr goes to systemd's journal, which adds its own."""
    plain = "%(levelname)s %(threadName)s %(name)s: %(message)s"
    return plain if _stderr_is_the_journal(environ) else "%(asctime)s " + plain


def _stderr_is_the_journal(environ) -> bool:
    """What systemd documents: $JOURNAL_STREAM names the device and inode of the stream it connected."""
    device, _, inode = environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        stat = os.fstat(2)
    except OSError:
        return False
    return f"{stat.st_dev}:{stat.st_ino}" == f"{device}:{inode}"


def run(args) -> int:
    import logging

    from scanner.agent.service import Agent, StartupError

    config = load(args.config)
    logging.basicConfig(level=args.log_level, format=log_format(os.environ))
    # kazoo logs every failed reconnect, the store every lost connection (for one-shot commands); the agent
    # says itself, once, when ZooKeeper is lost and when it is back.
    logging.getLogger("scanner.metadata.zookeeper").setLevel(logging.ERROR)
    # apscheduler warns each time a job is skipped because its last run goes on (a move of minutes, with the
    # follow-up due every second): expected, not worth a line; a job that raises is still logged (ERROR).
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    try:
        agent = Agent(config)
    except StartupError as exc:
        raise UsageError(str(exc)) from None
    try:
        return agent.run()
    except StartupError as exc:  # found once running: the metadata service shows the URI is wrong
        raise UsageError(str(exc)) from None
