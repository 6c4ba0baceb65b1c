// rocPRIM's block- and warp-level primitives in kernels of our own: radix sort, scan,
// reduce, exchange and discontinuity over shared memory, warp shuffles.
#include <hip/hip_runtime.h>
#include <rocprim/rocprim.hpp>

template <class T>
__global__ void block_sort(T* d) {
    using sort_t = rocprim::block_radix_sort<T, 256, 4>;
    __shared__ typename sort_t::storage_type st;
    T k[4];
    rocprim::block_load_direct_blocked(threadIdx.x, d + blockIdx.x * 1024, k);
    sort_t().sort(k, st);
    rocprim::block_store_direct_blocked(threadIdx.x, d + blockIdx.x * 1024, k);
}
template __global__ void block_sort<unsigned>(unsigned*);
template __global__ void block_sort<double>(double*);

__global__ void block_scan_reduce(const float* in, float* out, float* sums) {
    using scan_t = rocprim::block_scan<float, 256>;
    using reduce_t = rocprim::block_reduce<float, 256>;
    __shared__ typename scan_t::storage_type ss;
    __shared__ typename reduce_t::storage_type rs;
    float v = in[blockIdx.x * 256 + threadIdx.x];
    float s;
    scan_t().inclusive_scan(v, s, ss);
    out[blockIdx.x * 256 + threadIdx.x] = s;
    float r;
    reduce_t().reduce(v, r, rs);
    if (threadIdx.x == 0) sums[blockIdx.x] = r;
}

__global__ void warp_ops(const int* in, int* out) {
    using wr_t = rocprim::warp_reduce<int, 32>;
    using ws_t = rocprim::warp_scan<int, 32>;
    __shared__ typename wr_t::storage_type wrs[8];
    __shared__ typename ws_t::storage_type wss[8];
    int v = in[blockIdx.x * 256 + threadIdx.x];
    int r, s;
    wr_t().reduce(v, r, wrs[threadIdx.x / 32]);
    ws_t().exclusive_scan(v, s, 0, wss[threadIdx.x / 32]);
    out[blockIdx.x * 256 + threadIdx.x] = r + s + rocprim::warp_shuffle_xor(v, 5);
}

__global__ void exchange_flags(const long long* in, long long* out, int* heads) {
    using ex_t = rocprim::block_exchange<long long, 128, 4>;
    using dc_t = rocprim::block_discontinuity<long long, 128>;
    __shared__ typename ex_t::storage_type es;
    __shared__ typename dc_t::storage_type ds;
    long long v[4];
    rocprim::block_load_direct_striped<128>(threadIdx.x, in + blockIdx.x * 512, v);
    ex_t().striped_to_blocked(v, v, es);
    int f[4];
    dc_t().flag_heads(f, v, rocprim::not_equal_to<long long>(), ds);
    rocprim::block_store_direct_blocked(threadIdx.x, out + blockIdx.x * 512, v);
    heads[blockIdx.x * 128 + threadIdx.x] = f[0] + f[1] + f[2] + f[3];
}

__global__ void histogram_block(const unsigned char* in, unsigned* bins) {
    using h_t = rocprim::block_histogram<unsigned char, 256, 4, 256>;
    __shared__ typename h_t::storage_type hs;
    __shared__ unsigned hist[256];
    unsigned char v[4];
    rocprim::block_load_direct_blocked(threadIdx.x, in + blockIdx.x * 1024, v);
    h_t().histogram(v, hist, hs);
    __syncthreads();
    atomicAdd(&bins[threadIdx.x], hist[threadIdx.x]);
}
