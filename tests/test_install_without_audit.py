"""A bookie host's install: the package without the `audit` extra in a fresh venv, so no PySpark, no
`java` on PATH, and no C compiler (the native record walker is not built: the Python walker walks, and
`--version` and the agent's health say so); `scan`, `run` and `export` work on a copy of a real corpus
bookie all the same.

The venv gets the lowest protobuf and pyarrow pyproject.toml allows (the rest of the suite runs on the
newest), so those floors are proven too."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from corpus import CORPUS
from test_agent_service import wait_for

pytestmark = pytest.mark.install

REPO = Path(__file__).resolve().parents[1]
DUMP = CORPUS / "zk-dump.json"
BOOKIE_CONF = CORPUS / "bookie-configs" / "bookie3.conf"
BOOKIE_ID = "127.0.0.1:3183"
AT_THEIR_FLOOR = ("protobuf", "pyarrow")


def floor_pins() -> list[str]:
    """``name==floor`` for the AT_THEIR_FLOOR dependencies, from pyproject.toml's ``name>=floor``."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [f"{match[1]}=={match[2]}" for dependency in dependencies
            if (match := re.match(r"([\w-]+)\s*>=\s*([\w.]+)", dependency)) and match[1] in AT_THEIR_FLOOR]
    assert len(pins) == len(AT_THEIR_FLOOR), dependencies
    return pins


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory) -> Path:
    """A fresh venv with ``pip install bookie-scanner`` from a copy of this checkout (the build writes beside it),
    built where the C compiler fails."""
    root = tmp_path_factory.mktemp("agent-install")
    source = root / "source"
    for package in ("scanner", "throttle"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    no_compiler = {**os.environ, "CC": "false"}
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                                str(source), *floor_pins()], capture_output=True, text=True, timeout=600,
                               env=no_compiler)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


@pytest.fixture
def bookie_copy(tmp_path) -> Path:
    copy = tmp_path / "bookie3-ledgers"
    shutil.copytree(CORPUS / "bookie3" / "ledgers", copy)
    return copy


def no_java_env(venv: Path, home: Path) -> dict[str, str]:
    """Nothing but the venv on PATH: no java, no JAVA_HOME, no Spark settings."""
    env = {"PATH": str(venv / "bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    assert shutil.which("java", path=env["PATH"]) is None
    return env


def bookie_scanner(venv: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "bookie-scanner"), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_install_has_no_spark_and_the_floor_versions(agent_venv):
    probe = subprocess.run([str(agent_venv / "bin" / "python"), "-c",
                            "import importlib.util as u; print([m for m in ('pyspark', 'py4j', 'pyarrow', 'rocksdict')"
                            " if u.find_spec(m)])"], capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "['pyarrow', 'rocksdict']"
    listed = subprocess.run([str(agent_venv / "bin" / "pip"), "list", "--format", "freeze",
                             "--disable-pip-version-check"], capture_output=True, text=True, check=True)
    assert set(floor_pins()) <= set(listed.stdout.lower().split())


def test_without_a_compiler_the_python_walker_walks_and_says_so(agent_venv, tmp_path):
    version = bookie_scanner(agent_venv, no_java_env(agent_venv, tmp_path), "--version")
    assert version.returncode == 0
    assert "(record walker: python, the native extension is not built" in version.stdout, version.stdout


def test_scan_and_export_without_java_and_the_audit_names_its_extra(agent_venv, bookie_copy, tmp_path):
    env = no_java_env(agent_venv, tmp_path)
    bookie = ["--bookie-conf", str(BOOKIE_CONF), "--ledger-dirs", str(bookie_copy), "--metadata", f"file:{DUMP}"]
    scan = bookie_scanner(agent_venv, env, "scan", *bookie, "--format", "json")
    assert scan.returncode == 1, scan.stderr
    report = json.loads(scan.stdout)
    assert [(f["category"], f["ledger_id"], f["entries"]) for f in report["findings"]
            if f["category"] == "missing_entry"] == [("missing_entry", 46, [[45, 45]])]

    exported = bookie_scanner(agent_venv, env, "export", *bookie, "--output", str(tmp_path / "exports"))
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith(f"exported 37 ledgers of bookie {BOOKIE_ID} to ")
    assert "WARNING" not in exported.stderr  # no JVM started to say "Using incubator modules"
    table = pq.ParquetFile(tmp_path / "exports" / "bookie_id=127.0.0.1%3A3183" / "part-00000.parquet").read()
    assert table.num_rows == 37 and sum(table.column("entry_count").to_pylist()) == 3078

    audit = bookie_scanner(agent_venv, env, "audit", "--exports", str(tmp_path / "exports"), "--metadata", f"file:{DUMP}")
    assert (audit.returncode, audit.stderr) == (2, "bookie-scanner audit: the audit runs on Spark and pyspark is not "
                                                   "installed: pip install 'bookie-scanner[audit]'\n")


def test_run_scans_a_pass_and_stops_on_sigterm_without_java(agent_venv, bookie_copy, tmp_path):
    state_dir = tmp_path / "state"
    config = tmp_path / "scanner.toml"
    config.write_text(f'[bookie]\nconf = "{BOOKIE_CONF}"\nledger_dirs = ["{bookie_copy}"]\n'
                      f'[metadata]\nuri = "file:{DUMP}"\n'
                      f'[agent]\nstate_dir = "{state_dir}"\nlisten = "127.0.0.1:0"\ncheckpoint_seconds = 0.2\nstart_jitter_minutes = 0\n'
                      f'period_days = {2 / 86400}\n'  # a pass every two seconds
                      '[throttle]\ndisk_backoff = false\n')
    with (tmp_path / "agent.err").open("wb") as err:
        agent = subprocess.Popen([str(agent_venv / "bin" / "bookie-scanner"), "run", "--config", str(config)],
                                 env=no_java_env(agent_venv, tmp_path), stdout=subprocess.DEVNULL, stderr=err)
    try:
        health = wait_for(lambda: _health(state_dir, agent.pid), 60,
                          f"no pass completed; stderr: {(tmp_path / 'agent.err').read_text()[-2000:]}")
        assert health["findings"].get("missing_entry") == 1
        assert health["record_walker"].startswith("python, the native extension is not built")
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=30)
    assert json.loads((state_dir / "cursor-0.json").read_text())["passes_completed"] >= 1


def _health(state_dir: Path, pid: int) -> dict | None:
    """The agent's /health once a pass over the bookie has completed, else None."""
    try:
        info = json.loads((state_dir / "agent.json").read_text())
        if info.get("pid") != pid:
            return None
        try:
            with urllib.request.urlopen(f"http://{info['listen']}/health", timeout=5) as response:
                health = json.loads(response.read())
        except urllib.error.HTTPError as answer:  # 503: the bookie's copy has damage (the verdict's rule)
            health = json.loads(answer.read())
    except (OSError, ValueError, KeyError):
        return None
    return health if health["scanners"] and health["scanners"][0]["passes_completed"] >= 1 else None
