"""A bookie host without a compiler: the wheel ``./dev wheel`` builds (the native extension built in) installs
into a fresh venv with no C compiler on the PATH, walks with the native walker, and scans every corpus bookie
exactly as the source install does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from corpus import BOOKIES, CORPUS, scan_args, timeless

pytestmark = pytest.mark.install

REPO = Path(__file__).resolve().parents[1]
COMPILERS = ("cc", "gcc", "clang", "c99")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([str(REPO / "dev"), "wheel", str(out)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def wheel_venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("wheel-install") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--only-binary", ":all:", str(wheel)],
                               capture_output=True, text=True, timeout=600, env=no_compiler_env(venv))
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def no_compiler_env(venv: Path) -> dict[str, str]:
    """The venv alone on PATH (no C compiler there), CC naming none, and what pip needs to reach its index."""
    env = {name: value for name, value in os.environ.items() if name.startswith(("PIP_", "SSL_", "REQUESTS_"))}
    env.update(PATH=str(venv / "bin"), CC="false", HOME=str(venv.parent), LANG="C.UTF-8")
    assert not any(shutil.which(compiler, path=env["PATH"]) for compiler in COMPILERS)
    return env


def test_the_wheel_is_for_this_platform_and_holds_the_native_extension(wheel):
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("scanner/native/_native.") and n.endswith(".so") for n in names), names


def test_without_a_compiler_the_installed_wheel_walks_natively(wheel_venv):
    version = subprocess.run([str(wheel_venv / "bin" / "bookie-scanner"), "--version"], capture_output=True, text=True,
                             env=no_compiler_env(wheel_venv), timeout=60)
    assert version.returncode == 0, version.stderr
    assert "(record walker: native, CRC32C with " in version.stdout, version.stdout


@pytest.mark.parametrize("bookie", BOOKIES)
def test_the_wheel_scans_the_corpus_as_the_source_install_does(wheel_venv, bookie):
    args = ["scan", "--full-speed", *scan_args(bookie), "--metadata", f"file:{CORPUS / 'zk-dump.json'}",
            "--format", "json"]
    from_wheel = subprocess.run([str(wheel_venv / "bin" / "bookie-scanner"), *args], capture_output=True, text=True,
                                env=no_compiler_env(wheel_venv), timeout=120)
    from_source = subprocess.run([str(Path(sys.executable).parent / "bookie-scanner"), *args], capture_output=True,
                                 text=True, timeout=120)
    assert from_wheel.returncode == from_source.returncode, from_wheel.stderr
    wheel_report, source_report = json.loads(from_wheel.stdout), json.loads(from_source.stdout)
    assert source_report["summary"]["entries_verified"] > 0
    assert timeless(wheel_report) == timeless(source_report)
