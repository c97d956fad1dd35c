"""The checked-in protobuf modules are what one protoc (Debian's protobuf-compiler) makes of the .proto files
beside them: none edited by hand, none left behind by a change to its .proto, none from another protoc."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTOS = ("scanner/metadata/proto/data_formats.proto", "scanner/storage/proto/db_ledger_storage.proto")


def test_both_generated_modules_are_what_protoc_makes_now(tmp_path):
    protoc = shutil.which("protoc")
    assert protoc, "protoc is missing: `./dev test` installs Debian's protobuf-compiler"
    subprocess.run([protoc, "-I.", f"--python_out={tmp_path}", *PROTOS], cwd=REPO, check=True)
    for proto in PROTOS:
        module = proto.removesuffix(".proto") + "_pb2.py"
        assert (tmp_path / module).read_text() == (REPO / module).read_text(), \
            f"{module} is not protoc's output for {proto}: regenerate both (see data_formats.proto)"
