// The project's other small HIP kernels (rmcp-testkit's and the fault tests'): a store, a
// per-thread store, and a copy through raw buffer loads and stores.
#include <hip/hip_runtime.h>

extern "C" __global__ void k(int* p) { p[0] = 1; }
extern "C" __global__ void k_threads(int* p) { p[threadIdx.x] = 1; }
__global__ void fill(int* p) { p[0] = 1; }
__global__ void poke(int* p) { p[1] = 2; }

typedef int v4i __attribute__((ext_vector_type(4)));
__device__ float raw_load(v4i rsrc, int voffset, int soffset, int aux)
    __asm("llvm.amdgcn.raw.buffer.load.f32");
__device__ void raw_store(float v, v4i rsrc, int voffset, int soffset, int aux)
    __asm("llvm.amdgcn.raw.buffer.store.f32");

__device__ v4i rsrc(const void* p, int bytes) {
    unsigned long long a = (unsigned long long)p;
    v4i r;
    r.x = (int)(unsigned)a;
    r.y = (int)(unsigned)(a >> 32) & 0xffff;
    r.z = bytes;
    r.w = 0x31027000;
    return r;
}

extern "C" __global__ void copy(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = raw_load(rsrc(in, n * 4), i * 4, 0, 0);
    raw_store(v + 1.0f, rsrc(out, n * 4), i * 4, 0, 0);
}
