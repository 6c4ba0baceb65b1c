#!/bin/sh
# The gfx101x scan's speed beside LLVM's disassembler, on one large real gfx1030 object:
# rmcp_core::gfx101x::scan_image (card gfx1010) and `llvm-objdump -d --mcpu=gfx1030` on the
# same object, interleaved, REPS runs each (default 5), medians and fastest, MB/s of the
# whole object and of its functions' code (rmcp-core/examples/gfx101x_scan.rs).
#
#   benches/gfx101x_scan.sh [REPS] [OBJECT]
#
# OBJECT: an AMDGPU ELF or offload bundle with gfx103x code; by default the largest gfx1030
# entry of Debian's rocSPARSE (apt-get install librocsparse0; llvm-objdump from llvm-15).
set -eu
cd "$(dirname "$0")/.."
exec cargo run --quiet --release -p rmcp-core --example gfx101x_scan -- "$@"
