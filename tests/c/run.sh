#!/bin/sh
# Build and run the standalone C tests of the compiler layer (no Python).
# Usage: tests/c/run.sh [--asan]
set -e
cd "$(dirname "$0")/../.."
extra=""
if [ "$1" = "--asan" ]; then
    extra="-g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
fi
gcc -std=c11 -Wall -Wextra -Werror $extra -Icsrc csrc/common/*.c csrc/compiler/*.c csrc/sym/expr.c csrc/sym/infer.c \
    tests/c/test_compiler.c -ldl -lm -o /tmp/test_compiler && /tmp/test_compiler || exit 1
gcc -std=c11 -Wall -Wextra -Werror $extra -Icsrc csrc/common/*.c csrc/sym/expr.c csrc/sym/infer.c csrc/sym/guards.c \
    tests/c/test_sym.c -lm -o /tmp/test_sym && /tmp/test_sym
