"""The agent's image, built and run for real beside a live BookKeeper cluster.

The image is built once per run from ``container/Containerfile`` on a Debian base made here (no registry is
needed: ``mmdebstrap`` makes a minimal bookworm, ``podman import`` names it ``localhost/...``, and it stays in
podman's store for the next run). The container runs with the host's network, as a sidecar shares its pod's,
the bookie's dirs mounted read-only, the bookie's settings given as a Pulsar bookie container gets them
(``PULSAR_PREFIX_<key>``), its state on a volume of its own and its root file system read-only. A first pass
over the running bookie finds nothing; the bookie is stopped, an entry's payload flipped, and the container's
next pass finds it: on its /health through the port, as an under-replication mark in ZooKeeper, and its health
check passes. The bookie's files are the same before and after the container read them.

podman runs as root with runc, cgroupfs and a file events log, ulimits within the shell's hard limits, from a
containers.conf of the test's own. The test skips only where no engine can run a container.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from live.faults_live import NothingToDamage, inject_all
from livebk import LIVE_SETTLE_SECONDS, LiveCluster, free_ports
from scanner.metadata.uri import open_metadata
from scanner.repair.marks import UnderreplicationMarks
from scanner.storage.layout import parse_properties
from test_agent_service import wait_for

REPO = Path(__file__).resolve().parents[2]
BASE = "localhost/bookie-scanner-base:bookworm"
IMAGE = "localhost/bookie-scanner:test"
MAX_IMAGE_BYTES = 300_000_000
AGENT_UID = 10001  # the image's user
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
"""
# a Debian as small as the registries' bookworm-slim: no documentation, merged /usr without the usrmerge package
MMDEBSTRAP = ("mmdebstrap", "--quiet", "--variant=minbase", "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
              "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
              "--dpkgopt=path-include=/usr/share/locale/locale.alias", "--dpkgopt=path-exclude=/usr/share/doc/*",
              "--dpkgopt=path-include=/usr/share/doc/*/copyright", "bookworm")
HOST_CA_BUNDLE = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")


class Podman:
    def __init__(self, conf: Path):
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr[-3000:]}"
        return done


@pytest.fixture(scope="module")
def podman(tmp_path_factory) -> Podman:
    """podman with the test's own containers.conf, the base image made if podman's store does not hold it."""
    if shutil.which("podman") is None:
        pytest.skip("no container engine: podman is not installed (./dev test installs it on Debian)")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    engine = Podman(conf)
    info = engine("info", check=False)
    if info.returncode != 0:
        pytest.skip(f"no container engine can run here: podman info: {info.stderr.strip()[-500:]}")
    if engine("image", "exists", BASE, check=False).returncode != 0:
        rootfs = conf.parent / "rootfs.tar"
        started = time.monotonic()
        made = subprocess.run([*MMDEBSTRAP, str(rootfs)], capture_output=True, text=True, timeout=900)
        assert made.returncode == 0, made.stderr[-3000:]
        engine("import", str(rootfs), BASE, timeout=300)
        rootfs.unlink()
        print(f"base image made in {time.monotonic() - started:.0f} s")
    runs = engine("run", "--rm", "--pull=never", "--network", "host", BASE, "true", check=False)
    if runs.returncode != 0:
        pytest.skip(f"no container engine can run here: podman run: {runs.stderr.strip()[-500:]}")
    return engine


@pytest.fixture(scope="module")
def image(podman) -> str:
    """The image built from this checkout (podman's layer cache makes a rebuild of unchanged parts quick)."""
    ca = ["-v", f"{HOST_CA_BUNDLE}:/run/host-ca.crt:ro", "--build-arg", "PIP_CERT=/run/host-ca.crt"] \
        if HOST_CA_BUNDLE.is_file() else []
    started = time.monotonic()
    podman("build", "--format", "docker", "--pull=never", "--network", "host", "--build-arg", f"BASE={BASE}", *ca,
           "-f", str(REPO / "container" / "Containerfile"), "-t", IMAGE, str(REPO), timeout=1200)
    print(f"image built in {time.monotonic() - started:.0f} s")
    _forget_older_builds(podman)
    return IMAGE


def _forget_older_builds(podman: Podman) -> None:
    """Earlier builds' images and build stages, now untagged (the newest build stage is the next build's cache):
    a machine that runs the tests again and again keeps one of each."""
    listed = podman("images", "--filter", "dangling=true", "--format",
                    '{{.CreatedAt}}\t{{.ID}}\t{{index .Labels "org.opencontainers.image.title"}}').stdout
    rows = sorted((line.split("\t") for line in listed.splitlines() if line.count("\t") == 2), reverse=True)
    build_stages = [image for _, image, title in rows if title == "bookie-scanner-build"]
    older = build_stages[1:] + [image for _, image, title in rows if title == "bookie-scanner"]
    if older:
        podman("rmi", *older, check=False)  # not --force: an image a container still runs stays


def test_the_image_is_small_runs_as_its_own_user_and_has_no_compiler_and_no_jvm(podman, image):
    size = json.loads(podman("image", "inspect", image).stdout)[0]["Size"]
    print(f"image size: {size / 1e6:.0f} MB")
    assert size < MAX_IMAGE_BYTES
    inside = podman("run", "--rm", "--pull=never", "--entrypoint", "sh", image, "-c",
                    "id -u; bookie-scanner --version; for tool in cc gcc clang java javac; do command -v $tool; done;"
                    " echo end", check=False)
    lines = inside.stdout.splitlines()
    assert lines[0] == str(AGENT_UID)
    assert "(record walker: native, CRC32C with " in lines[1]
    assert lines[2:] == ["end"], f"a compiler or a JVM in the image: {lines[2:]}"


def test_the_container_beside_a_live_bookie_finds_a_flipped_byte_and_marks_its_ledger(podman, image, tmp_path):
    with LiveCluster(tmp_path / "bk") as cluster:
        cluster.fill(20, seed=1)
        cluster.fill(8, seed=3, deletes="all")  # rotates the logs past the first ledgers: flushed, damageable
        bookie = cluster.bookies[1]  # DbLedgerStorage, as Pulsar's bookies run: RocksDB read from a read-only mount
        state = tmp_path / "state"
        state.mkdir()
        os.chown(state, AGENT_UID, AGENT_UID)
        port = free_ports(1)[0]
        name = f"bookie-scanner-test-{port}"
        settings = parse_properties(bookie.conf.read_text())
        environment = {**{f"PULSAR_PREFIX_{key}": value for key, value in settings.items()},
                       "BOOKIE_SCANNER_BOOKIE_CONF_FROM_ENV": "true",
                       "BOOKIE_SCANNER_AGENT_LISTEN": f"127.0.0.1:{port}",
                       "BOOKIE_SCANNER_AGENT_PERIOD_DAYS": str(5 / 86400),  # a pass every few seconds
                       "BOOKIE_SCANNER_AGENT_START_JITTER_MINUTES": "0",
                       "BOOKIE_SCANNER_AGENT_CHECKPOINT_SECONDS": "1",
                       "BOOKIE_SCANNER_AGENT_SETTLE_SECONDS": str(LIVE_SETTLE_SECONDS),
                       "BOOKIE_SCANNER_THROTTLE_DISK_BACKOFF": "false",
                       "BOOKIE_SCANNER_REPAIR_MARK": "true",
                       "BOOKIE_SCANNER_REPAIR_REREPLICATE": "false"}
        # a read-only root, as a pod's readOnlyRootFilesystem makes it (podman puts a tmpfs on /tmp)
        podman("run", "--detach", "--name", name, "--pull=never", "--network", "host", "--read-only",
               "-v", f"{bookie.home}:{bookie.home}:ro", "-v", f"{state}:/var/lib/bookie-scanner",
               *(f"--env={key}={value}" for key, value in environment.items()), image)
        try:
            clean = wait_for(lambda: _health(port, lambda h: h["scanners"][0]["passes_completed"] >= 1), 120,
                             f"no pass over the running bookie: {_logs(podman, name)}")
            assert {c for c, n in clean["findings"].items() if n and c != "orphan_ledger"} == set(), clean["findings"]
            with open_metadata(cluster.metadata_uri) as store:
                injected = _inject_payload_flip(cluster, bookie, store)
            before = _file_digests(bookie.home)
            injected_at = time.time()
            damaged = wait_for(lambda: _health(port, lambda h: h["scanners"][0]["pass_started"] > injected_at
                                               and h["scanners"][0]["phase"] == "waiting"), 120,
                               f"no whole pass after the damage: {_logs(podman, name)}")
            assert damaged["findings"].get("corrupt_entry") == 1, damaged["findings"]
            ledger = next(iter(injected.ledgers["payload"]))
            wait_for(lambda: ledger in _marked_ledgers(cluster), 60,
                     f"ledger {ledger} not marked under-replicated: {_logs(podman, name)}")
            healthcheck = podman("healthcheck", "run", name, check=False)
            assert healthcheck.returncode == 0, healthcheck.stdout + healthcheck.stderr
            written = podman("exec", name, "touch", str(bookie.home / "written-by-the-scanner"), check=False)
            assert written.returncode != 0 and "Read-only file system" in written.stderr
            rss = _peak_rss_mib(podman, name)
            print(f"agent in the container: peak RSS {rss} MiB; marked ledger {ledger}")
            podman("stop", "--time", "30", name, timeout=60)
            exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
            assert exit_code == "0", _logs(podman, name)
        finally:
            podman("rm", "--force", name, check=False)
        assert _file_digests(bookie.home) == before, "the bookie's files changed while the container read them"
        assert (state / "findings.db").exists()


def _inject_payload_flip(cluster, bookie, store):
    """One entry's payload byte flipped on the stopped bookie (more written first when too little is flushed);
    the bookie stays down, so its files stay as the damage left them."""
    for more in range(3):
        bookie.stop()
        try:
            return inject_all(bookie, store, kinds=("payload",))
        except NothingToDamage:
            if more == 2:
                raise
            bookie.start()
            cluster.fill(8, seed=4 + more)
    raise AssertionError("unreachable")


def _health(port: int, ready) -> dict | None:
    try:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                health = json.loads(response.read())
        except urllib.error.HTTPError as answer:  # 503: damage found, degraded (the verdict's rule)
            health = json.loads(answer.read())
    except (OSError, ValueError):  # not listening yet
        return None
    return health if health["scanners"] and ready(health) else None


def _marked_ledgers(cluster) -> list[int]:
    client = KazooClient(hosts=cluster.zk_connect_string, timeout=30)
    client.start(timeout=30)
    try:
        return UnderreplicationMarks(client, "/ledgers").marked_ledgers()
    finally:
        client.stop()
        client.close()


def _file_digests(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _peak_rss_mib(podman: Podman, name: str) -> int:
    pid = podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) // 1024


def _logs(podman: Podman, name: str) -> str:
    return podman("logs", "--tail", "30", name, check=False).stderr[-3000:]
