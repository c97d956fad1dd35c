"""The scanner's rooms (its packages, and its top-level modules) are stacked: a module imports only from its own room
and the rooms below it, at the top of the file or inside a function alike, so no import runs back up and no two
modules import each other, however indirectly."""

from __future__ import annotations

import ast
from pathlib import Path

SCANNER = Path(__file__).resolve().parents[1] / "scanner"

# Bottom to top.
ROOMS = ("scanner", "units", "errors", "envelope", "progress", "statefile", "native", "storage", "metadata", "checks",
         "report", "scan", "bookie_protocol", "repair", "sample", "agent", "audit", "commands", "cli", "spark_submit")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SCANNER.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The scanner modules (or packages) the file imports, wherever in it."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:  # ``from scanner.native import switch`` imports the module scanner.native.switch
                name = f"{base}.{alias.name}"
                as_path = SCANNER.parent / name.replace(".", "/")
                found.add(name if as_path.with_suffix(".py").exists() or as_path.is_dir() else base)
    return {name for name in found if name == "scanner" or name.startswith("scanner.")}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def import_graph() -> dict[str, set[str]]:
    return {module_name(path): imported(path) - {module_name(path)} for path in sorted(SCANNER.rglob("*.py"))}


def test_every_room_is_placed():
    assert {room(module) for module in import_graph()} == set(ROOMS)


def test_no_import_runs_back_up():
    rank = {name: i for i, name in enumerate(ROOMS)}
    upward = sorted((module, target) for module, targets in import_graph().items() for target in targets
                    if rank[room(target)] > rank[room(module)])
    assert upward == []


def test_no_modules_import_each_other_even_indirectly():
    graph = import_graph()
    done: set[str] = set()
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert cycles == []
