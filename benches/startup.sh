#!/bin/sh
# What librmcp_shim.so adds to the start of a process that never calls HIP, side by side
# with an empty C preload (issue 17's goal: at most 1.5x the empty library's figure).
#
#   cargo build --release && benches/startup.sh [STARTS]
#   RMCP_BENCH_SHIM=path/librmcp_shim.so benches/startup.sh   (another build, as "other")
#
# Builds the spawner (benches/startup.c) and an empty C shared library into a scratch
# directory, then, interleaved start by start: /bin/true STARTS times (default 3000) per
# kind, then `python3 -c pass` and a python3 importing 30 of the standard library's C
# extension modules (each one a dlopen and a dlsym of its PyInit_ function, which the
# shim's dlsym sees) STARTS/10 times per kind. Each figure is the mean of the kind's
# fastest quarter; "added" is against no preload, the last column against the empty
# library. Nothing is asserted.
set -eu
cd "$(dirname "$0")/.."
starts=${1:-3000}
shim=$PWD/target/release/librmcp_shim.so
[ -f "$shim" ] && [ -f "$PWD/target/release/librmcp_shim_body.so" ] ||
    { echo "startup.sh: run cargo build --release first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}
$cc -O2 -Wall -o "$work/rmcp_startup" benches/startup.c
printf 'void rmcp_bench_empty(void) {}\n' >"$work/empty.c"
$cc -O2 -shared -fPIC -o "$work/libempty.so" "$work/empty.c"
set -- none= empty="$work/libempty.so" librmcp_shim.so="$shim"
if [ -n "${RMCP_BENCH_SHIM:-}" ]; then set -- "$@" other="$RMCP_BENCH_SHIM"; fi
# Nothing of the caller's environment may change what is measured.
unset LD_PRELOAD RMCP_LOG RMCP_LOG_FILE RMCP_STATS_FILE 2>/dev/null || true

echo "### /bin/true, $starts starts per kind"
echo
"$work/rmcp_startup" "$starts" /bin/true -- "$@"
py=$(command -v python3 || true)
if [ -n "$py" ]; then
    n=$((starts / 10))
    echo
    echo "### python3 -c pass, $n starts per kind"
    echo
    "$work/rmcp_startup" "$n" "$py" -c pass -- "$@"
    mods="_ssl _hashlib _sqlite3 _decimal _ctypes _json _csv _bz2 _lzma zlib pyexpat"
    mods="$mods _elementtree _pickle _datetime array math select mmap _socket unicodedata"
    mods="$mods _multiprocessing _asyncio _queue _uuid _struct binascii _random _bisect"
    mods="$mods _heapq _contextvars"
    imports=$(echo "$mods" | tr ' ' ',')
    echo
    echo "### python3 importing 30 C extension modules, $n starts per kind"
    echo
    "$work/rmcp_startup" "$n" "$py" -c "import $imports" -- "$@"
fi
