#!/bin/sh
# Check cdynamo's generated float32 GELU on this machine's CPU (its AVX-512 form
# where gcc's -march=native has AVX-512: CI's machines have only AVX2) against
# float64 and against this machine's torch F.gelu: max errors, and NaNs,
# infinities and signed zeros as eager's.  prologue.h comes from prologue.py
# (run where cdynamo runs; the device machine has Python 3.12, so carry it:
# run(..., carry=["tools/gelu_isa_check/prologue.h"])).  Needs torch and numpy.
set -e
cd "$(dirname "$0")"
[ -f prologue.h ] || { echo "no prologue.h: run python prologue.py first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${PYTHON:-python3}" mkref.py "$tmp/ref.bin"
gcc -O3 -march=native -fopenmp -std=c11 check.c -o "$tmp/check" -lm
"$tmp/check" "$tmp/ref.bin"
