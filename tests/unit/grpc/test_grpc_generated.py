"""reach/grpc/v1 is what grpcio-tools makes of proto/ today: regenerated into a temporary directory, every file is
byte for byte the one checked in (after a change to the proto: `make proto`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROTO = Path("reach/grpc/v1/gateway.proto")
OUTPUTS = ("gateway_pb2.py", "gateway_pb2.pyi", "gateway_pb2_grpc.py")


def test_the_generated_code_is_current(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (the dev extra) generates the code")
    well_known = resources.files("grpc_tools") / "_proto"  # google/protobuf/struct.proto, as `python -m` adds it
    code = protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"-I{well_known}", f"--python_out={tmp_path}",
                        f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", str(ROOT / "proto" / PROTO)])
    assert code == 0
    for name in OUTPUTS:
        fresh = (tmp_path / PROTO.parent / name).read_bytes()
        assert fresh == (ROOT / PROTO.parent / name).read_bytes(), f"{name} is stale: run `make proto`"
