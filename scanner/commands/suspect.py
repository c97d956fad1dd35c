"""``bookie-scanner suspect``: have the agent scan a ledger or an entry log first."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "suspect", help="queue a ledger or entry log for the agent to scan first",
        description="Tell the agent a ledger or an entry log is suspect (read errors, a client's digest "
                    "failure). It is scanned before the regular pass, digests included. When the agent is "
                    "not running the suspect waits in its state dir and is scanned after it starts.")
    parser.add_argument("--config", metavar="FILE", type=Path, required=True, help="the agent's TOML config")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--ledger", metavar="ID", type=int, help="a ledger id")
    which.add_argument("--entry-log", metavar="ID", type=int,
                       help="an entry log id, decimal as the bookie logs it (0x1a.log is 26)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.agent.control import AgentNotRunning, call_agent
    from scanner.agent.suspects import ENTRY_LOG, LEDGER, append_to_inbox, parse_suspect
    from scanner.commands.run import load, writable_state_dir
    from scanner.errors import UsageError

    config = load(args.config)
    kind, value = (LEDGER, args.ledger) if args.ledger is not None else (ENTRY_LOG, args.entry_log)
    try:
        suspect = parse_suspect({kind: value})
    except ValueError as exc:
        raise UsageError(f"--{kind.replace('_', '-')} {value}: {exc}") from None
    writable_state_dir(config)
    try:
        answer = call_agent(config.state_dir, "POST", "/suspects", {kind: value})
    except AgentNotRunning:
        try:
            append_to_inbox(config.state_dir, suspect)
        except OSError as exc:
            raise UsageError(f"agent not running, and {kind} {value} cannot be left in {config.state_dir}: "
                             f"{exc.strerror or exc}") from None
        print(f"agent not running: {kind} {value} left in {config.state_dir} for when it starts")
        return 0
    if "error" in answer:
        raise UsageError(answer["error"])
    print(f"{kind} {value}: " + ("queued" if answer.get("queued") else "already queued or scanned recently"))
    return 0
