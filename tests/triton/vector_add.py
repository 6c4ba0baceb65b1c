"""Real Triton on the HIP runtime: compiles one @triton.jit kernel (a vector add) for the
current device, loads it and launches it, and prints what it can tell about each step and
the result, one line each. tests/triton_real.rs runs it in the ROCm 7.2.4 compat root on the
emulated RX 5700 XT (gfx1010) without rmcp and with the shim preloaded and compares the
lines; docs/compat.md, "Real Triton", says how to run it by hand.

The buffers are allocated and copied with the runtime's own functions through ctypes (the
stand-in `torch` of tests/triton/torch has no tensors). The emulated GPU completes every
packet without running it, so the output buffer holds what the allocation held: the sums
printed are what the memory had, not a kernel's work.
"""

import ctypes
import hashlib
import os

import triton
import triton.language as tl

HIP = os.environ.get("TRITON_LIBHIP_PATH", "libamdhip64.so")
hip = ctypes.CDLL(HIP)
N = 1024
BLOCK = 256


def check(what, rc):
    if rc != 0:
        raise SystemExit(f"{what}: hipError {rc}")


class Buffer:
    """Device memory that Triton takes as a pointer argument (data_ptr and dtype)."""

    def __init__(self, n):
        p = ctypes.c_void_p()
        check("hipMalloc", hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(n * 4)))
        self.ptr = p.value
        self.n = n
        self.dtype = "float32"

    def data_ptr(self):
        return self.ptr

    def ptr_range(self):
        """The bytes it spans: with AMDGCN_USE_BUFFER_OPS=1, Triton's AMD backend uses buffer
        instructions for pointers known to span less than 2 GiB (`is_within_2gb`)."""
        return self.n * 4


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def main():
    x, y, out = Buffer(N), Buffer(N), Buffer(N)
    host = (ctypes.c_float * N)(*range(N))
    for b in (x, y):
        check("hipMemcpy", hip.hipMemcpy(ctypes.c_void_p(b.ptr), host, ctypes.c_size_t(N * 4), 1))
    print("driver:", type(triton.runtime.driver.active).__name__)
    target = triton.runtime.driver.active.get_current_target()
    print("target:", target.backend, target.arch, "warp", target.warp_size)
    kernel = add_kernel[(N // BLOCK,)](x, y, out, N, BLOCK=BLOCK)
    check("hipDeviceSynchronize", hip.hipDeviceSynchronize())
    print("compiled for:", kernel.metadata.target.arch)
    print("amdgcn has add_kernel:", "add_kernel" in kernel.asm["amdgcn"])
    print("code object sha256:", hashlib.sha256(kernel.asm["hsaco"]).hexdigest())
    # RMCP_TEST_HSACO=FILE: the code object Triton handed hipModuleLoadDataEx, for a test to
    # compare with what the GPU was given (tests/module_load.rs).
    if os.environ.get("RMCP_TEST_HSACO"):
        with open(os.environ["RMCP_TEST_HSACO"], "wb") as f:
            f.write(kernel.asm["hsaco"])
    print("module loaded:", kernel.module is not None and kernel.module != 0)
    print("function found:", kernel.function is not None and kernel.function != 0)
    print("launched:", N // BLOCK, "blocks of", BLOCK)
    result = (ctypes.c_float * N)()
    check("hipMemcpy", hip.hipMemcpy(result, ctypes.c_void_p(out.ptr), ctypes.c_size_t(N * 4), 2))
    print("out[0:4]:", list(result[:4]), "sum:", sum(result))


main()
