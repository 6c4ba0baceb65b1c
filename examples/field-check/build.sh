#!/bin/sh
# Builds rmcp-field-check with hipcc: one code object per GPU target rmcp rewrites for by
# default (gfx1010-gfx1013, gfx1030-gfx1036), then checks that every one is in the binary.
#
#   examples/field-check/build.sh [OUTPUT]
#
# OUTPUT defaults to examples/field-check/build/rmcp-field-check; give it to `rmcp check` with
# --binary PATH or RMCP_FIELD_CHECK=PATH.
# Environment:
#   HIPCC              the compiler (default: hipcc)
#   FIELD_CHECK_ARCHS  space-separated targets (default: the list below); add yours if your
#                      GPU is not in it, e.g. FIELD_CHECK_ARCHS="gfx1100" ./build.sh
# Debian bookworm: apt-get install hipcc (ROCm 5.2.3, clang 15); its clang accepts every
# default target.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build/rmcp-field-check}
hipcc=${HIPCC:-hipcc}
archs=${FIELD_CHECK_ARCHS:-"gfx1010 gfx1011 gfx1012 gfx1013 gfx1030 gfx1031 gfx1032 gfx1033 gfx1034 gfx1035 gfx1036"}

if ! command -v "$hipcc" >/dev/null 2>&1; then
    echo "build.sh: $hipcc not found (Debian/Ubuntu: apt-get install hipcc; ROCm: /opt/rocm/bin/hipcc)" >&2
    exit 127
fi

flags=""
for a in $archs; do
    flags="$flags --offload-arch=$a"
done

mkdir -p "$(dirname "$out")"
# -O2: the kernels are tiny; the point is that the atomics are real device atomics.
# shellcheck disable=SC2086
"$hipcc" -O2 -std=c++17 -Wall $flags -o "$out" "$here/field_check.hip"

# Every target must have its code object in the binary: a missing one means the program
# cannot run on that GPU (hipErrorNoBinaryForGpu) and reports "could not measure".
bundler=""
for b in clang-offload-bundler clang-offload-bundler-15 /usr/lib/llvm-15/bin/clang-offload-bundler /opt/rocm/llvm/bin/clang-offload-bundler; do
    if command -v "$b" >/dev/null 2>&1; then bundler=$b; break; fi
done
if [ -n "$bundler" ] && command -v objcopy >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    objcopy -O binary --only-section=.hip_fatbin "$out" "$tmp/fatbin"
    "$bundler" --list --type=o --input="$tmp/fatbin" >"$tmp/list"
    missing=""
    for a in $archs; do
        grep -q -- "-$a\$" "$tmp/list" || grep -q -- "-$a:" "$tmp/list" || missing="$missing $a"
    done
    if [ -n "$missing" ]; then
        echo "build.sh: no code object for:$missing (the bundle has: $(tr '\n' ' ' <"$tmp/list"))" >&2
        exit 1
    fi
    echo "build.sh: $out: code objects for $(echo $archs | tr ' ' ',')"
else
    echo "build.sh: $out built (clang-offload-bundler or objcopy not found: code objects not listed)"
fi
