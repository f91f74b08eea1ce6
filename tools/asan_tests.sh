#!/usr/bin/env bash
# Build cdynamo with AddressSanitizer + UBSan (CDYNAMO_SANITIZE=1) in a copy of the tree
# under a temp dir, then run a subset of the tests against that build:
#   tests/c/run.sh --asan        (compiler layer, standalone C, leak checking on)
#   pytest tests/test_reliability.py tests/test_fuzz.py tests/test_differential.py
# The extension runs inside the normal python, so libasan is LD_PRELOADed; the kernels the
# sanitized extension compiles are sanitized too (CDY_SANITIZE_KERNELS, csrc/compiler/cc.c).
# ASAN_OPTIONS=detect_leaks=0 for python: the interpreter (and torch) leak at exit by
# design, which LeakSanitizer would report on every run.
# Usage: tools/asan_tests.sh [pytest args...]     (PYTHON=... picks the interpreter)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
PY=${PYTHON:-$(command -v python)}
WORK=$(mktemp -d /tmp/cdynamo-asan.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
t0=$(date +%s)

echo "== asan: standalone C tests (tests/c/run.sh --asan)"
sh tests/c/run.sh --asan

echo "== asan: building the sanitized extension in $WORK"
cp -r setup.py pyproject.toml csrc python tests tools "$WORK"/
(cd "$WORK" && rm -rf python/cdynamo/_C*.so build && \
    CDYNAMO_SANITIZE=1 "$PY" setup.py -q build_ext --inplace -j "$(nproc)" >/dev/null)

LIBASAN=$(gcc -print-file-name=libasan.so)
LIBUBSAN=$(gcc -print-file-name=libubsan.so)
export LD_PRELOAD="$LIBASAN $LIBUBSAN"
# leaks off (see above); abort on the first error so that pytest reports it as a crash
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1:detect_odr_violation=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export CDYNAMO_FUZZ_CASES=${CDYNAMO_FUZZ_CASES:-150}

echo "== asan: pytest (LD_PRELOAD=$LD_PRELOAD, ASAN_OPTIONS=$ASAN_OPTIONS)"
cd "$WORK"
PYTHONPATH="$WORK/python" "$PY" -m pytest -q -p no:cacheprovider \
    tests/test_reliability.py tests/test_fuzz.py tests/test_differential.py "$@"
echo "== asan: passed in $(( $(date +%s) - t0 )) s"
