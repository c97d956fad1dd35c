"""The audit as an operator runs it: exports in per-bookie subdirectories, exact entries, one-line errors."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from audit_exports import DUMP, export_bookie
from corpus import bookie_id
from json_schemas import assert_valid
from scanner.cli import main
from scanner.metadata.snapshot import SnapshotStore
from spark_session import spark  # noqa: F401 (fixture)
from test_audit_job import _damaged_copy_entries, _striped, entry_ids

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def per_bookie_exports(spark, tmp_path_factory):  # noqa: F811 (fixture)
    """Each bookie exported into its own subdirectory; bookie1 is its damaged copy."""
    parent = tmp_path_factory.mktemp("per-bookie-exports")
    for name in ("bookie1", "bookie2", "bookie3", "bookie4"):
        export_bookie(name, parent / name, damaged=name == "bookie1")
    return parent


def test_one_damaged_bookie_in_per_bookie_subdirectories_gives_exactly_its_damaged_entries(per_bookie_exports,
                                                                                            capsys):
    status = main(["audit", "--exports", str(per_bookie_exports), "--metadata", f"file:{DUMP}", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 1
    assert_valid(report)
    assert report["summary"]["bookies"] == 4
    under = [v for v in report["violations"] if v["category"] == "under_replicated_entry"]
    listed = [(v["ledger_id"], e) for v in under for e in entry_ids(v["entries"])]
    damaged_bookie = bookie_id("bookie1")
    with SnapshotStore(DUMP) as store:
        expected = {(ledger, entry) for ledger, entry, bookie in _damaged_copy_entries()
                    if bookie == damaged_bookie and _striped(store, ledger, entry, bookie)}
    assert len(expected) > 100
    assert len(listed) == len(set(listed)) == sum(v["entry_count"] for v in under)
    assert set(listed) == expected | {(46, 45)}  # 46/45: the corpus's one entry lost to an ensemble change


def test_a_directory_without_exports_says_which_layouts_it_expects(spark, tmp_path, capsys):  # noqa: F811
    (tmp_path / "empty-subdir").mkdir()
    assert main(["audit", "--exports", str(tmp_path), "--metadata", f"file:{DUMP}"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "bookie_id=<id>/ directories in it (every bookie exporting into it) or in its subdirectories" in line


def test_a_missing_local_exports_dir_is_one_line_before_spark_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the audit would put Spark's log
    assert main(["audit", "--exports", str(tmp_path / "nonexistent"), "--metadata", f"file:{DUMP}",
                 "--master", "spark://127.0.0.1:1"]) == 2  # a master nobody answers: Spark is not even asked
    [line] = capsys.readouterr().err.splitlines()
    assert line == (f"bookie-scanner audit: {tmp_path / 'nonexistent'}: no such directory "
                    "(expected the directory the bookies exported into)")
    assert list(tmp_path.iterdir()) == []


def test_pyspark_without_pandas_is_one_line_naming_the_extra(tmp_path):
    # pyspark installed on its own, not through the extra: its own complaint would come mid-audit, as a crash
    (tmp_path / "exports").mkdir()
    without_pandas = ("import sys\n"
                      "class NoPandas:  # what the import system says of a package not installed\n"
                      "    def find_spec(self, name, path=None, target=None):\n"
                      "        if name.split('.')[0] == 'pandas':\n"
                      "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
                      "sys.meta_path.insert(0, NoPandas())\n"
                      "from scanner.cli import main\n"
                      "sys.exit(main())\n")
    done = subprocess.run([sys.executable, "-c", without_pandas, "audit", "--exports", str(tmp_path / "exports"),
                           "--metadata", f"file:{DUMP}", "--master", "local[1]"],
                          capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (2, "bookie-scanner audit: the audit runs on Spark and pandas is not "
                                                 "installed: pip install 'bookie-scanner[audit]'\n")


def test_what_the_jvm_prints_goes_to_a_log_named_in_the_one_line(tmp_path):
    # a fresh process: the JVM starts here, and whatever it prints must not reach the terminal
    (tmp_path / "exports").mkdir()
    done = subprocess.run([sys.executable, "-m", "scanner.cli", "audit", "--exports", str(tmp_path / "exports"),
                           "--metadata", f"file:{DUMP}", "--master", "local[1]"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"bookie-scanner audit: {tmp_path / 'exports'}: no bookie exports")
    log = line.split("(Spark's log: ", 1)[1].rstrip(")")
    assert log.startswith(str(tmp_path)) and os.path.isfile(log)  # what the JVM printed is kept there


def test_an_audit_that_ends_otherwise_leaves_no_log(per_bookie_exports, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    (tmp_path / "a-file").write_text("")
    status = main(["audit", "--exports", str(per_bookie_exports), "--metadata", f"file:{DUMP}",
                   "--output", str(tmp_path / "a-file" / "violations")])  # the violations cannot be written
    assert status == 2 and "cannot write" in capsys.readouterr().err
    assert main(["audit", "--exports", str(per_bookie_exports), "--metadata", f"file:{DUMP}"]) == 1
    assert list((tmp_path / "temp").glob("bookie-scanner-audit-*")) == []
