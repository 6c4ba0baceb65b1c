// Kernels written to meet the rarer gfx101x bug classes in code as hipcc builds it:
// permlane16 after a compare (vcmpx-permlane), accesses through generic pointers at
// constant offsets (flat-segment-offset), LDS accesses of 8 and 16 bytes known aligned to
// 4 only (lds-misaligned), loops of 128-192 bytes (inst-fwd-prefetch), uniform loads
// feeding vector code, LDS and global accesses across branches (lds-branch-vmem), and a
// switch of many arms.
#include <hip/hip_runtime.h>

extern "C" __global__ void permlane(int* out, const int* in, int n) {
    int t = threadIdx.x;
    int v = in[t];
    if (v > n) v = __builtin_amdgcn_permlane16(v, v, 0x76543210, 0xfedcba98, false, false);
    if (v < 3 * n) v = __builtin_amdgcn_permlanex16(v, v, 0x01234567, 0x89abcdef, false, false);
    out[t] = v;
}

__device__ __attribute__((noinline)) void flat_store(int* p, int v) {
    p[0] = v;
    p[1] = v + 1;
    p[7] = v + 2;
    p[100] = v + 3;
}

__device__ __attribute__((noinline)) int flat_load(const int* p) { return p[2] + p[9] * p[300]; }

extern "C" __global__ void flat(int* out, int n) {
    __shared__ int s[512];
    int* p = (threadIdx.x & 1) ? out + threadIdx.x * 128 : s + (threadIdx.x & 3);
    flat_store(p, n);
    __syncthreads();
    out[threadIdx.x] += s[threadIdx.x] + flat_load(p);
}

typedef long long ll_a4 __attribute__((aligned(4)));
typedef int int4_a4 __attribute__((ext_vector_type(4), aligned(4)));
typedef int int4_a16 __attribute__((ext_vector_type(4)));

extern "C" __global__ void lds_wide(long long* out, const long long* in, int4_a4* o4, int4_a16* o16) {
    __shared__ int s[2048];
    int t = threadIdx.x;
    *(ll_a4*)(s + 1 + 2 * t) = in[t];
    *(int4_a4*)(s + 512 + 4 * t + 1) = (int4_a4){t, t + 1, t + 2, t + 3};
    *(int4_a16*)(s + 1024 + 4 * t) = (int4_a16){t, 2 * t, 3 * t, 4 * t};
    *(long long*)(s + 1536 + 2 * t) = in[t + 1];
    __syncthreads();
    out[t] = *(ll_a4*)(s + 1 + 2 * (t ^ 1)) + *(long long*)(s + 1536 + 2 * (t ^ 2));
    o4[t] = *(int4_a4*)(s + 512 + 4 * (t ^ 3) + 1);
    o16[t] = *(int4_a16*)(s + 1024 + 4 * (t ^ 5));
}

extern "C" __global__ void loops(float* out, const float* in, int n, int m) {
    float a = 0, b = 1, c = 2;
    for (int i = 0; i < n; i++) {
        float x = in[i * 64 + threadIdx.x];
        a = a * x + b;
        b = b * x - c;
        c = c * a + x * x;
        if (x > 3.0f) out[i] = a;
    }
    for (int j = 0; j < m; j++) {
        float y = in[j * 32 + threadIdx.x] * a;
        for (int i = 0; i < n; i++) {
            float x = in[i * 64 + j];
            a = __builtin_fmaf(a, x, b);
            b = __builtin_fmaf(b, y, c);
            c = c * 0.5f + a * b - x;
            out[i * m + j] = c;
        }
    }
    out[threadIdx.x] = a + b + c;
}

extern "C" __global__ void scalar_vector(const int* __restrict__ idx, int* out, const float* f,
                                         int n) {
    int t = threadIdx.x;
    int acc = 0;
    for (int i = 0; i < n; i++) {
        int k = idx[i];  // uniform: a scalar load
        float v = f[k * 256 + t];
        if (v > (float)k) acc += __builtin_amdgcn_readfirstlane(k) + idx[k & 63];
        else acc ^= k;
    }
    out[t] = acc;
}

extern "C" __global__ void lds_branch_global(const int* in, int* out, int n) {
    __shared__ int s[256];
    int t = threadIdx.x;
    s[t] = in[t];
    __syncthreads();
    int v = s[(t + 1) & 255];
    if (v & 1) {
        out[t] = v;
        s[t] = v + 1;
    } else {
        s[(t + 7) & 255] = v;
        out[t + 256] = in[t + v];
    }
    __syncthreads();
    if (s[t] > n) out[t + 512] = s[t ^ 1];
}

#define ARM(k) \
    case k: \
        acc = acc * (k + 3) + in[t + k]; \
        if (acc & (1 << (k % 31))) out[k] = acc; \
        break;

extern "C" __global__ void many_branches(const int* in, int* out, int sel) {
    int t = threadIdx.x;
    int acc = in[t];
    for (int r = 0; r < 4; r++) {
        switch ((sel + r + acc) & 31) {
            ARM(0) ARM(1) ARM(2) ARM(3) ARM(4) ARM(5) ARM(6) ARM(7) ARM(8) ARM(9) ARM(10)
            ARM(11) ARM(12) ARM(13) ARM(14) ARM(15) ARM(16) ARM(17) ARM(18) ARM(19) ARM(20)
            ARM(21) ARM(22) ARM(23) ARM(24) ARM(25) ARM(26) ARM(27) ARM(28) ARM(29) ARM(30)
            default: acc += 1;
        }
    }
    out[t] = acc;
}
