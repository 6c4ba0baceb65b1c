"""Compiles a vector-add @triton.jit kernel for RDNA targets with the Triton the running
interpreter has (scripts/triton-venv installs Triton 3.5.1 from PyPI), no GPU needed, as
Triton does before it hands the code object to hipModuleLoadDataEx (kernel.asm["hsaco"]).

    python tests/triton/compile.py OUT_DIR

writes OUT_DIR/add-<gfx>-bufops<0|1>.hsaco for gfx1010 and gfx1030, with Triton's
AMDGCN_USE_BUFFER_OPS off (0) and on (1) (Triton 3.5.1's default is off; 3.9.0's on), and
two kernels with branches and loops for gfx1010 with buffer ops on: a row softmax
(softmax-gfx1010-bufops1.hsaco) and a matmul looping over K with tl.dot
(matmul-gfx1010-bufops1.hsaco); prints one line per object."""

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


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * n_cols + offs, mask=offs < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=offs < n_cols)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def save(kernel, name):
    path = os.path.join(out, name)
    with open(path, "wb") as f:
        f.write(kernel.asm["hsaco"])
    print(f"triton {triton.__version__} {name}: {path}")


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

os.environ["AMDGCN_USE_BUFFER_OPS"] = "1"
gfx1010 = GPUTarget("hip", "gfx1010", 32)
sig = {"out_ptr": "*fp32", "in_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"}
src = ASTSource(fn=softmax_kernel, signature=sig, constexprs={"BLOCK": 1024})
save(triton.compile(src, target=gfx1010), "softmax-gfx1010-bufops1.hsaco")
sig = {k: "*fp32" for k in ["a_ptr", "b_ptr", "c_ptr"]}
sig.update({k: "i32" for k in ["M", "N", "K", "sam", "sak", "sbk", "sbn", "scm", "scn"]})
sig.update({"BM": "constexpr", "BN": "constexpr", "BK": "constexpr"})
src = ASTSource(fn=matmul_kernel, signature=sig, constexprs={"BM": 32, "BN": 32, "BK": 16})
save(triton.compile(src, target=gfx1010), "matmul-gfx1010-bufops1.hsaco")
