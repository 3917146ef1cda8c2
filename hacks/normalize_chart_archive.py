#!/usr/bin/env python3
"""Rewrite a `helm package` archive so that the same chart always gives the same bytes.

helm stamps every entry with the packaging time, so each regeneration of the ControllerDeployment's
rawChart differed, and gardenlet re-rolled the extension on every seed. Here: the same files, sorted by
name, mtime 0, mode 0644, owner 0:0 without names, in a ustar archive compressed by gzip without a file
name and with mtime 0. Standard library only (hacks/generate-controller-registration.sh runs it).

Usage: normalize_chart_archive.py IN.tgz OUT.tgz
"""

from __future__ import annotations

import gzip
import io
import sys
import tarfile


def normalize(archive: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tin:
        files = sorted(((m.name, tin.extractfile(m).read()) for m in tin.getmembers() if m.isfile()),
                       key=lambda item: item[0])
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tout:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tout.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(argv[1], "rb") as f:
        data = normalize(f.read())
    with open(argv[2], "wb") as f:
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
