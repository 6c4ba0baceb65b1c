#!/bin/bash
# The start-up cost of the fat binaries registered under an override (issue 40, item 2): a
# program built by hipcc (benches/fatbin_startup.hip) whose one fat binary is large (MIB MiB
# of code per target: gfx1030, which holds s_inst_prefetch, gfx1010 and gfx906), run
#   none      without rmcp,
#   rmcp      with rmcp, no override in the environment (one look at the environment),
#   off       with rmcp, HSA_OVERRIDE_GFX_VERSION=10.3.0, RMCP_OVERRIDE_FIXES=off,
#   fix       with rmcp, HSA_OVERRIDE_GFX_VERSION=10.3.0 (the gfx1030 entry read, scanned,
#             copied with its prefetches as s_nop 0),
#   clean     the same with the program built without s_inst_prefetch (-DNO_PREFETCH: the
#             entry read, no word to fix found, not scanned),
# on the rdna1 fixture's topology (an RX 5700 XT, gfx1010; RMCP_SYSFS_ROOT), interleaved,
# REPS runs each (default 7). Prints, per case, the medians (and fastest) of the time from
# the program's first constructor to main (what registering its fat binary costs) and of
# the whole run, in ms. Timings only: nothing is asserted.
#
#   benches/fatbin_startup.sh [REPS] [MIB]
#
# Needs hipcc and Debian's runtime (libamdhip64.so.5: apt-get install hipcc libamdhip64-dev),
# no GPU (registering a fat binary reads no device). The shim is SHIM, default
# target/release/librmcp_shim.so (built by `cargo build --release -p rmcp-shim` when
# missing).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-7}
MIB=${2:-8}
command -v hipcc >/dev/null || { echo "fatbin_startup: no hipcc (apt-get install hipcc)" >&2; exit 2; }
SHIM=${SHIM:-$PWD/${CARGO_TARGET_DIR:-target}/release/librmcp_shim.so}
[[ -e $SHIM ]] || cargo build --release -p rmcp-shim
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# 8 kernels; 4 bytes an instruction.
REPT=$((MIB * 1024 * 1024 / 4 / 8))
echo "building: 8 kernels of $REPT instructions for gfx1030, gfx1010 and gfx906 ..." >&2
for v in "" -DNO_PREFETCH; do
    # shellcheck disable=SC2086 # an empty $v is no argument
    hipcc -DREPT=$REPT $v --offload-arch=gfx1030 --offload-arch=gfx1010 --offload-arch=gfx906 \
        -O1 -o "$WORK/fatbin_startup$v" benches/fatbin_startup.hip
done
echo "program: $(stat -c %s "$WORK/fatbin_startup") bytes" >&2

run() { # CASE: prints "startup_us wall_us"
    local env=(env -u LD_PRELOAD -u HSA_OVERRIDE_GFX_VERSION)
    for v in $(env | sed -n 's/^\(RMCP_[A-Z_]*\)=.*/\1/p'); do env+=(-u "$v"); done
    env+=(RMCP_SYSFS_ROOT="$PWD/tests/fixtures/rdna1")
    case $1 in
    none) ;;
    rmcp) env+=(LD_PRELOAD="$SHIM") ;;
    off) env+=(LD_PRELOAD="$SHIM" HSA_OVERRIDE_GFX_VERSION=10.3.0 RMCP_OVERRIDE_FIXES=off) ;;
    fix | clean) env+=(LD_PRELOAD="$SHIM" HSA_OVERRIDE_GFX_VERSION=10.3.0 RMCP_LOG=off) ;;
    esac
    local program=$WORK/fatbin_startup t0 t1 out
    [[ $1 != clean ]] || program=$WORK/fatbin_startup-DNO_PREFETCH
    t0=$(date +%s%N)
    out=$("${env[@]}" "$program")
    t1=$(date +%s%N)
    echo "${out#startup_us=} $(((t1 - t0) / 1000))"
}

CASES="none rmcp off fix clean"
for c in $CASES; do : >"$WORK/$c"; done
for _ in $(seq "$REPS"); do
    for c in $CASES; do run "$c" >>"$WORK/$c"; done
done
median() { sort -n | awk '{v[NR]=$1} END {printf "%.1f", v[int((NR+1)/2)]/1000}'; }
fastest() { sort -n | awk 'NR==1 {printf "%.1f", $1/1000}'; }
echo "| case | constructors to main, ms (median, fastest) | whole run, ms (median, fastest) |"
echo "|---|---|---|"
for c in $CASES; do
    s_med=$(cut -d' ' -f1 "$WORK/$c" | median)
    s_min=$(cut -d' ' -f1 "$WORK/$c" | fastest)
    w_med=$(cut -d' ' -f2 "$WORK/$c" | median)
    w_min=$(cut -d' ' -f2 "$WORK/$c" | fastest)
    echo "| $c | $s_med ($s_min) | $w_med ($w_min) |"
done
echo "($REPS runs each, interleaved; $MIB MiB of code per target, 3 targets)"
