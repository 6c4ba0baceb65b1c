#!/bin/sh
# Instructions the shim adds, counted by valgrind's callgrind: unlike wall-clock time on
# a shared machine, the count repeats exactly for the same binaries and inputs.
#
#   benches/instructions.sh  (after `cargo build --release --workspace`; needs valgrind)
#   RMCP_BENCH_SHIM=path/librmcp_shim.so benches/instructions.sh   (another build of the shim)
#
# Per call: the difference between 20000 and 10000 calls of the bench client's loop,
# divided by 10000, with and without the shim (the fake runtime answers size 0 without
# allocating). First call: every instruction of a process that makes one hooked call, on
# the one-GPU and the eight-GPU fixture.
set -eu
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind" >&2; exit 2; }
out=$(ls -td target/release/build/rmcp-testkit-*/out 2>/dev/null | head -1)
[ -n "$out" ] || { echo "instructions.sh: run cargo build --release --workspace first" >&2; exit 2; }
bench=$out/bench/rmcp_bench
fake=$out/fake-hip-6
shim=${RMCP_BENCH_SHIM:-$PWD/target/release/librmcp_shim.so}
[ -f "$shim" ] || shim=$PWD/target/release/deps/librmcp_shim.so

PATTERN=
HANG=
run() { # preload fixture mode args...
    pre=$1 fx=$2 mode=$3
    shift 3
    if [ -n "$pre" ]; then set -- LD_PRELOAD="$pre" "$@"; fi
    env "$@" ${PATTERN:+FAKEHIP_PATTERN=$PATTERN} ${HANG:+RMCP_HANG_AFTER=$HANG} LD_LIBRARY_PATH="$fake" \
        RMCP_SYSFS_ROOT="tests/fixtures/$fx" RMCP_MODE="$mode" \
        valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bench" $ARGS 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
per_call() { # label fixture mode func flags
    ARGS="loop $4 $5 1 10000 1"; a=$(run "" "$2" "$3"); sa=$(run "$shim" "$2" "$3")
    ARGS="loop $4 $5 1 20000 1"; b=$(run "" "$2" "$3"); sb=$(run "$shim" "$2" "$3")
    n_without=$(( (b - a) / 10000 )); n_with=$(( (sb - sa) / 10000 ))
    printf '| %s | %s | %s | +%s |\n' "$1" "$n_without" "$n_with" $((n_with - n_without))
}
echo "| per call (instructions) | without shim | with shim | added |"
echo "|---|---|---|---|"
per_call "hipHostMalloc(0), rewritten (auto, rdna1)" rdna1 auto hipHostMalloc 0
per_call "hipExtMallocWithFlags(Finegrained), rewritten (auto, rdna1)" rdna1 auto hipExtMallocWithFlags 1
per_call "hipMalloc, counted only (auto, rdna1)" rdna1 auto hipMalloc 0
per_call "hipLaunchKernel, recorded in the launch ring (auto, rdna1)" rdna1 auto hipLaunchKernel 0
per_call "hipHostMalloc(0), mode off" rdna1 off hipHostMalloc 0
# A synchronize that returns in time, with the stall watchdog on (RMCP_HANG_AFTER's default:
# two stores to the thread's own mark, and a thread that sleeps) and off.
per_call "hipStreamSynchronize, returns at once, watchdog on (default)" rdna1 auto hipStreamSynchronize 0
HANG=off
per_call "hipStreamSynchronize, returns at once, RMCP_HANG_AFTER=off" rdna1 auto hipStreamSynchronize 0
HANG=
# Under the pattern the fake runtime answers size 0 with a non-null address: the allocation
# is recorded (allocation ring), and hipHostFree of it answers at once.
PATTERN=mod4
per_call "hipHostMalloc(0) + hipHostFree, rewritten and recorded (auto, rdna1)" \
    rdna1 auto hipHostMallocPair 0
PATTERN=
# Per registration: the difference between 100,000 and 50,000 kernels, over 50,000.
ARGS="register 50000"; a=$(run "" rdna1 auto); sa=$(run "$shim" rdna1 auto)
ARGS="register 100000"; b=$(run "" rdna1 auto); sb=$(run "$shim" rdna1 auto)
n_without=$(( (b - a) / 50000 )); n_with=$(( (sb - sa) / 50000 ))
printf '| %s | %s | %s | +%s |\n' "__hipRegisterFunction, per kernel (50,000 to 100,000)" \
    "$n_without" "$n_with" $((n_with - n_without))
echo
echo "| first hooked call (instructions, whole process) | without shim | with shim | added |"
echo "|---|---|---|---|"
for fx in rdna1 eight-gpu; do
    ARGS="first hipHostMalloc 0"
    a=$(run "" "$fx" auto); b=$(run "$shim" "$fx" auto)
    printf '| %s | %s | %s | +%s |\n' "$fx" "$a" "$b" $((b - a))
done
