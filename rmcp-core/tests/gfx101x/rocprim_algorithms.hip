// More of rocPRIM's device-wide algorithms: reduce, scans, histogram, segmented reduce,
// select, merge sort.
#include <hip/hip_runtime.h>
#include <rocprim/rocprim.hpp>

hipError_t reduce(void* tmp, size_t& bytes, const float* in, float* out, unsigned n) {
    return rocprim::reduce(tmp, bytes, in, out, 0.0f, n, rocprim::plus<float>());
}

hipError_t scan(void* tmp, size_t& bytes, const int* in, int* out, unsigned n) {
    return rocprim::inclusive_scan(tmp, bytes, in, out, n, rocprim::plus<int>());
}

hipError_t escan(void* tmp, size_t& bytes, const double* in, double* out, unsigned n) {
    return rocprim::exclusive_scan(tmp, bytes, in, out, 1.0, n, rocprim::multiplies<double>());
}

hipError_t hist(void* tmp, size_t& bytes, const unsigned char* in, unsigned n, unsigned* h) {
    return rocprim::histogram_even(tmp, bytes, in, n, h, 257u, 0u, 256u);
}

hipError_t seg(void* tmp, size_t& bytes, const float* in, float* out, unsigned segs, const int* off) {
    return rocprim::segmented_reduce(tmp, bytes, in, out, segs, off, off + 1,
                                     rocprim::maximum<float>(), 0.0f);
}

hipError_t sel(void* tmp, size_t& bytes, const int* in, const unsigned char* flags, int* out,
               unsigned* nsel, unsigned n) {
    return rocprim::select(tmp, bytes, in, flags, out, nsel, n);
}

hipError_t msort(void* tmp, size_t& bytes, long long* in, long long* out, unsigned n) {
    return rocprim::merge_sort(tmp, bytes, in, out, n);
}
