"""``./dev``: the demo installs the package alone (no PySpark, no test tools), the tests add their extras.

The script runs for real in a copy of the checkout whose ``.venv`` holds recording stand-ins for ``pip``,
``python`` and ``bookie-scanner``: what it would install is what it asks pip for, without a download."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$(dirname "$0")/../calls"\n'


def checkout_with_recording_venv(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    for name in ("dev", "pyproject.toml"):  # with the native sources, what an install depends on
        shutil.copy2(REPO / name, checkout / name)
    shutil.copytree(REPO / "scanner" / "native", checkout / "scanner" / "native",
                    ignore=shutil.ignore_patterns("*.so", "*.py", "__pycache__"))
    for tool in ("pip", "python", "bookie-scanner"):
        path = checkout / ".venv" / "bin" / tool
        path.write_text(RECORDER)
        path.chmod(0o755)
    return checkout


def dev(checkout: Path, *args: str) -> list[str]:
    """Run ``./dev ARGS``; the calls it made into the venv since the last run."""
    calls = checkout / ".venv" / "calls"
    calls.unlink(missing_ok=True)
    environment = {k: v for k, v in os.environ.items() if k != "TEST_WORKERS"}
    subprocess.run([str(checkout / "dev"), *args], check=True, timeout=60, env=environment)
    return calls.read_text().splitlines() if calls.exists() else []


def test_the_demo_installs_the_package_alone_and_the_tests_add_the_audit_and_test_extras(tmp_path):
    checkout = checkout_with_recording_venv(tmp_path)
    pip = "pip install --quiet --disable-pip-version-check -e "
    assert dev(checkout, "demo") == [pip + ".", "bookie-scanner demo"]
    assert dev(checkout, "demo", "--format", "json") == ["bookie-scanner demo --format json"]  # installed already
    assert dev(checkout, "test", "-m", "not slow") == [pip + ".[audit,test]",
                                                       "python -m pytest -q -n 2 --dist loadgroup -m not slow"]
    assert dev(checkout, "demo") == ["bookie-scanner demo"]  # everything installed serves the demo too
    (checkout / "scanner" / "native" / "record_walk.c").write_text("/* the native walker's source changed */\n")
    assert dev(checkout, "demo") == [pip + ".", "bookie-scanner demo"]  # rebuilt
    (checkout / "scanner" / "native" / "native.h").write_text("/* the shared header changed */\n")
    assert dev(checkout, "demo") == [pip + ".", "bookie-scanner demo"]  # rebuilt
