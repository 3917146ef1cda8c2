"""The committed gRPC stubs match what `make proto` generates from resmgr/proto/*.proto (CI guard)."""

from __future__ import annotations

from pathlib import Path

from resmgr.proto import PROTO_FILES
from resmgr.proto.check import stale_files

REPO = Path(__file__).resolve().parents[4]


def test_generated_code_is_up_to_date():
    problems = stale_files(REPO)
    assert not problems, "\n".join(problems)


def test_the_check_notices_a_stale_file(tmp_path: Path):
    # Run the check on a copy whose generated file was edited: it must fail.
    for rel in PROTO_FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((REPO / rel).read_text())
        for generated in (REPO / rel).parent.glob("*_pb2*"):
            (tmp_path / rel).parent.joinpath(generated.name).write_text(generated.read_text())
    stale = tmp_path / "resmgr/proto/agent_pb2.py"
    stale.write_text(stale.read_text() + "# edited by hand\n")
    problems = stale_files(tmp_path)
    assert len(problems) == 1 and problems[0].startswith("resmgr/proto/agent_pb2.py: out of date")
