#!/bin/sh
# Time cdynamo's generated kernels against eager torch on a machine of many cores
# (the device machine: its Python 3.12 cannot run cdynamo itself).  make.py writes
# kernels/ where cdynamo runs; carry it:
#   run(command="sh tools/manycore_check/run.sh", carry=["tools/manycore_check/kernels"])
set -e
cd "$(dirname "$0")"
[ -f kernels/manifest.json ] || { echo "no kernels/: run python make.py [threads] first" >&2; exit 1; }
"${PYTHON:-python3}" run.py "$@"
