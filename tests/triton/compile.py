"""Compiles a vector-add @triton.jit kernel for RDNA targets with the Triton the running
interpreter has (scripts/triton-venv installs Triton 3.5.1 from PyPI), no GPU needed, as
Triton does before it hands the code object to hipModuleLoadDataEx (kernel.asm["hsaco"]).

    python tests/triton/compile.py OUT_DIR

writes OUT_DIR/add-<gfx>-bufops<0|1>.hsaco for gfx1010 and gfx1030, with Triton's
AMDGCN_USE_BUFFER_OPS off (0) and on (1), and prints one line per object."""

import os
import sys
import tempfile

out = sys.argv[1]
# Compile every variant afresh (Triton's cache key does not hold every knob's value).
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="rmcp-triton-cache-")
os.environ["TRITON_ALWAYS_COMPILE"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + y, mask=m)


sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
for arch in ["gfx1010", "gfx1030"]:
    for ops in ["0", "1"]:
        os.environ["AMDGCN_USE_BUFFER_OPS"] = ops
        src = ASTSource(fn=add_kernel, signature=sig, constexprs={"BLOCK": 1024})
        k = triton.compile(src, target=GPUTarget("hip", arch, 32))
        path = os.path.join(out, f"add-{arch}-bufops{ops}.hsaco")
        with open(path, "wb") as f:
            f.write(k.asm["hsaco"])
        print(f"triton {triton.__version__} {arch} AMDGCN_USE_BUFFER_OPS={ops}: {path}")
