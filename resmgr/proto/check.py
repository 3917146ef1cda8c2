"""Regenerate the gRPC stubs into a temporary directory and compare them with the committed ones.

Run as ``python -m resmgr.proto.check`` from the repository root (``make proto-check``);
exits 1 listing the stale files. Needs grpcio-tools (a dev dependency).
"""

from __future__ import annotations

import difflib
import sys
import tempfile
from pathlib import Path

from resmgr.proto import PROTO_FILES

GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(repo_root: Path, out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) exactly as ``make proto`` does, writing under ``out_dir``."""
    from grpc_tools import protoc  # dev dependency; imported here so the runtime never needs it

    args = ["protoc", "-I", str(repo_root), f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}", *(str(repo_root / p) for p in PROTO_FILES)]
    # grpc_tools needs its bundled well-known protos on the include path, like `python -m grpc_tools.protoc`.
    import importlib.resources

    args.insert(1, "-I" + str(importlib.resources.files("grpc_tools") / "_proto"))
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")


def stale_files(repo_root: Path) -> list[str]:
    """Generated files that differ from (or are missing next to) their .proto; empty when current."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="proto-check-") as tmp:
        generate(repo_root, Path(tmp))
        for proto in PROTO_FILES:
            stem = proto.removesuffix(".proto")
            for suffix in GENERATED_SUFFIXES:
                rel = stem + suffix
                fresh = (Path(tmp) / rel).read_text()
                try:
                    committed = (repo_root / rel).read_text()
                except FileNotFoundError:
                    problems.append(f"{rel}: missing (run `make proto`)")
                    continue
                if committed != fresh:
                    diff = list(difflib.unified_diff(committed.splitlines(), fresh.splitlines(), "committed",
                                                     "regenerated", lineterm="", n=0))
                    problems.append(f"{rel}: out of date (run `make proto`):\n" + "\n".join(diff[:20]))
    return problems


def main() -> int:
    repo_root = Path.cwd()
    if not (repo_root / PROTO_FILES[0]).exists():
        sys.stderr.write(f"proto-check: run from the repository root ({PROTO_FILES[0]} not found)\n")
        return 2
    problems = stale_files(repo_root)
    for problem in problems:
        sys.stderr.write(f"proto-check: {problem}\n")
    if not problems:
        print(f"proto-check: generated code for {len(PROTO_FILES)} proto files is up to date")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
