#!/usr/bin/env bash
# Build the single self-contained cri-resmgr executable (PyInstaller one-file).
#
# usage: hacks/build-executable.sh [OUTPUT]      (default: _out/bin/cri-resmgr)
#
# Writes OUTPUT (one file) and OUTPUT.dir/ (the same program unpacked, for images;
# see hacks/cri-resmgr.spec).
# One binary holds cri-resmgr, cri-resmgr-agent, cri-resmgr-agent-probe,
# cri-resmgr-installer, gardener-extension-cri-resmgr and
# gardener-extension-admission-cri-resmgr; it runs the command
# named by its own basename or by its first argument (hacks/exe_entry.py).
# The result runs on a node without Python (same or newer glibc than the
# build host). The build is slow, so it is cached: OUTPUT is rebuilt only when
# the hash of the sources, templates, this script and the installed Python
# packages changes (kept in OUTPUT.sha256, and the newest build under
# ${CRI_RESMGR_DEV_CACHE:-~/.cache/cri-resmgr-dev}/exe/HASH). FORCE=1 rebuilds anyway.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/_out/bin/cri-resmgr}
case $out in /*) ;; *) out=$PWD/$out ;; esac
python=${PYTHON:-$repo/.venv/bin/python}
work=$repo/_out/pyinstaller

if ! "$python" -c 'import PyInstaller' 2>/dev/null; then
    echo "build-executable: PyInstaller is missing in $python; run: $repo/.venv/bin/pip install -e '$repo[dev]'" >&2
    exit 1
fi

# Parallel builds (several test sessions) share the work dir: one at a time.
mkdir -p "$repo/_out"
exec 9>"$repo/_out/.build-executable.lock"
flock 9

# Content hash of everything that ends up in the binary.
hash=$(
    cd "$repo"
    {
        find resmgr installer noderecord extension admission -type f \( -name '*.py' -o -name '*.j2' -o -name '*.yaml' -o -name '*.proto' \) \
            -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum
        sha256sum hacks/exe_entry.py hacks/build-executable.sh hacks/cri-resmgr.spec
        "$python" -m pip freeze --exclude-editable 2>/dev/null
        "$python" -c 'import sys; print(sys.version)'
    } | sha256sum | cut -d' ' -f1
)

if [[ -z ${FORCE:-} && -x $out && -x $out.dir/cri-resmgr && -f $out.sha256 && $(cat "$out.sha256") == "$hash" ]]; then
    echo "build-executable: $out is up to date (sources $hash)"
    exit 0
fi

# Builds are also kept outside the checkout by content hash, so a fresh clone (CI) reuses them.
cache=${CRI_RESMGR_DEV_CACHE:-$HOME/.cache/cri-resmgr-dev}/exe/$hash
if [[ -z ${FORCE:-} && -x $cache/cri-resmgr && -x $cache/cri-resmgr.dir/cri-resmgr ]]; then
    mkdir -p "$(dirname "$out")"
    install -m 0755 "$cache/cri-resmgr" "$out.tmp"
    rm -rf "$out.dir.tmp" && cp -a "$cache/cri-resmgr.dir" "$out.dir.tmp"
    rm -rf "$out.dir" && mv "$out.dir.tmp" "$out.dir" && mv -f "$out.tmp" "$out"
    echo "$hash" > "$out.sha256"
    echo "build-executable: $out restored from the build cache $cache"
    exit 0
fi

echo "build-executable: building $out (sources $hash); this takes a few minutes"
start=$SECONDS
mkdir -p "$work" "$(dirname "$out")"
rm -rf "$work/dist"
CRI_RESMGR_REPO=$repo "$python" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$work/dist" --workpath "$work/build" "$repo/hacks/cri-resmgr.spec"
install -m 0755 "$work/dist/cri-resmgr" "$out.tmp"
rm -rf "$out.dir.tmp" && cp -a "$work/dist/cri-resmgr.dir" "$out.dir.tmp"
rm -f "$out.sha256"
rm -rf "$out.dir" && mv "$out.dir.tmp" "$out.dir"
mv -f "$out.tmp" "$out"
echo "$hash" > "$out.sha256"
# Keep only the newest build in the cache: one executable is ~150 MB with its unpacked copy.
rm -rf "$(dirname "$cache")" && mkdir -p "$cache.tmp"
cp -a "$out" "$cache.tmp/cri-resmgr" && cp -a "$out.dir" "$cache.tmp/cri-resmgr.dir" && mv "$cache.tmp" "$cache"
echo "build-executable: wrote $out ($(du -h "$out" | cut -f1)) and $out.dir/ ($(du -sh "$out.dir" | cut -f1)) in $((SECONDS - start))s"
