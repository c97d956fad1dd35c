"""``bookie-scanner pause`` / ``resume``: stop and restart scanning; the pause survives restarts."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    for name, paused, text in (("pause", True, "pause scanning (persisted: survives restarts)"),
                               ("resume", False, "resume scanning after 'pause'")):
        parser = subparsers.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        parser.add_argument("--config", metavar="FILE", type=Path, required=True, help="the agent's TOML config")
        parser.set_defaults(func=lambda args, paused=paused: run(args, paused))


def run(args, paused: bool) -> int:
    from scanner.agent.control import AgentNotRunning, call_agent, persist_pause
    from scanner.commands.run import load, writable_state_dir
    from scanner.errors import UsageError

    config = load(args.config)
    writable_state_dir(config)
    word = "paused" if paused else "resumed"
    try:
        persist_pause(config.state_dir, paused)
    except OSError as exc:
        raise UsageError(f"cannot save the pause in {config.state_dir}: {exc.strerror or exc}") from None
    try:
        answer = call_agent(config.state_dir, "POST", "/pause" if paused else "/resume")
    except AgentNotRunning:
        print(f"scanning {word} (the agent is not running; it starts {word})")
        return 0
    if "error" in answer:
        raise UsageError(f"the agent answered: {answer['error']}")
    print(f"scanning {word}")
    return 0
