#!/bin/sh
# What the shim adds per launch and per allocation pair with 1, 2, 4 and 8 threads started
# together, and per kernel registration at 100,000 kernels (issue 35). Wall clock, so run it
# on a quiet machine; the figures are read, never asserted.
#
#   cargo build --release --workspace && benches/threads.sh [ROUNDS]
#   RMCP_BENCH_SHIM_BEFORE=path/librmcp_shim.so benches/threads.sh   (an older build too)
#
# Each round runs every case without the shim, with this build's shim and (if given) with
# the older one, in an order that turns from round to round, so that drift of the machine
# falls on every column. A run's figure is the median of its batches (20 batches of 20,000
# calls per thread, every thread's batches together); the table gives the median over the
# ROUNDS runs (5 unless given) and what the shim adds to the median without it.
# Launches: hipLaunchKernel on stream 1, which the fake runtime answers at once (recorded in
# the launch ring). Pairs: hipHostMalloc(0) (rewritten, auto mode on the rdna1 fixture)
# then hipHostFree, under FAKEHIP_PATTERN=mod4 so that the fake runtime answers with a fixed
# non-null address without allocating or locking: each allocation is recorded.
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-5}
out=$(ls -td target/release/build/rmcp-testkit-*/out 2>/dev/null | head -1)
[ -n "$out" ] || { echo "threads.sh: run cargo build --release --workspace first" >&2; exit 2; }
bench=$out/bench/rmcp_bench
fake=$out/fake-hip-6
after=${RMCP_BENCH_SHIM:-$PWD/target/release/librmcp_shim.so}
before=${RMCP_BENCH_SHIM_BEFORE:-}
kinds="none after"
[ -n "$before" ] && kinds="none before after"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

one() { # kind args... -> the run's figure
    kind=$1
    shift
    case $kind in
        none) pre= ;;
        before) pre=$before ;;
        after) pre=$after ;;
    esac
    env -i PATH="$PATH" ${pre:+LD_PRELOAD=$pre} LD_LIBRARY_PATH="$fake" \
        RMCP_SYSFS_ROOT=tests/fixtures/rdna1 FAKEHIP_PATTERN=mod4 "$bench" "$@"
}

turn() { # round kinds... -> the kinds, turned by round
    r=$1
    shift
    n=$#
    i=0
    while [ $i -lt $n ]; do
        j=$(( (i + r) % n + 1 ))
        eval "printf '%s ' \"\${$j}\""
        i=$((i + 1))
    done
}

for r in $(seq 1 "$rounds"); do
    for t in 1 2 4 8; do
        for f in hipLaunchKernel hipHostMallocPair; do
            for k in $(turn "$r" $kinds); do
                one "$k" loop "$f" 0 "$t" 20000 20 | awk '/^batch/ { print $3 }' | median \
                    >>"$tmp/$f.$t.$k"
            done
        done
    done
    for k in $(turn "$r" $kinds); do
        one "$k" register 100000 | sed -n 's/^register_ns=//p' >>"$tmp/register.$k"
    done
done

row() { # label file-prefix
    w=$(median <"$tmp/$2.none")
    printf '| %s | %.1f' "$1" "$w"
    for k in $kinds; do
        [ "$k" = none ] && continue
        v=$(median <"$tmp/$2.$k")
        awk -v v="$v" -v w="$w" 'BEGIN { printf " | %.1f (%+.1f)", v, v - w }'
    done
    printf ' |\n'
}
echo "machine: $(nproc) CPUs; $rounds rounds; ns per call, median of the rounds' medians (added)"
printf '| case | without shim'
for k in $kinds; do [ "$k" = none ] || printf ' | %s' "$k"; done
printf ' |\n|---|---'
for k in $kinds; do [ "$k" = none ] || printf '|---'; done
printf '|\n'
for f in hipLaunchKernel hipHostMallocPair; do
    for t in 1 2 4 8; do
        row "$f, $t thread$([ "$t" = 1 ] || echo s)" "$f.$t"
    done
done
row "__hipRegisterFunction, 100,000 kernels" register
