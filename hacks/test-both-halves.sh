#!/usr/bin/env bash
# `make test-parallel`: the landscape half (make test-landscape) and the rest (make test-main) at the same time.
# Not what `make test` and CI run: two landscapes side by side failed (docs/development/tests.md).
#
# Why at once: the landscape half mostly waits (nodes booting, kubelet and gardener-node-agent restarting,
# pods starting, controllers' sync periods), the other half mostly computes; one after the other they took
# 46-49 min warm on a 2-core machine (CI of 9d39087), against a 25-min budget.
# Determinism is unchanged: each half is its own pytest session with its own landscape or nodes (every
# landscape has its own network namespace, cgroup prefix and work dir), the one-file build they share is
# built once here first (hacks/build-executable.sh also takes a lock), and no test waits for a time.
#
# Output: the main half prints as usual; the landscape half's lines carry a "[landscape] " prefix. Each half
# also writes a JUnit report with every test's duration: _out/junit-main.xml, _out/junit-landscape.xml.
# Exit: 0 only when both halves pass; pytest's "collected nothing" (5) is a failure (Makefile run_pytest).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
make=${MAKE:-make}
mkdir -p _out

start=$SECONDS
bash hacks/build-executable.sh || exit 1

# Its own process group (setsid), so that a stopped run can stop the whole half.
setsid bash -c 'set -o pipefail; "$0" --no-print-directory test-landscape \
    PYTEST_ARGS="--junitxml=_out/junit-landscape.xml" 2>&1 | sed -u "s/^/[landscape] /"' "$make" &
landscape_pid=$!
# A test run stopped by a signal stops both halves.
trap 'kill -TERM -- "-$landscape_pid" 2>/dev/null' INT TERM

"$make" --no-print-directory test-main PYTEST_ARGS="--junitxml=_out/junit-main.xml"
main_rc=$?
main_s=$((SECONDS - start))
wait "$landscape_pid"
landscape_rc=$?
echo "test: main half exit $main_rc after ${main_s}s, landscape half exit $landscape_rc, both done after $((SECONDS - start))s"
[ "$main_rc" -eq 0 ] && [ "$landscape_rc" -eq 0 ]
