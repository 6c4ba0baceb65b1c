// rocPRIM's device-wide algorithms (Debian's librocprim-dev), instantiated from host code so
// that their kernels are emitted for the device: what a real HIP library's code looks like.
#include <hip/hip_runtime.h>
#include <rocprim/rocprim.hpp>

hipError_t sort_keys(void* tmp, size_t& bytes, const unsigned* in, unsigned* out, unsigned n) {
    return rocprim::radix_sort_keys(tmp, bytes, in, out, n);
}

hipError_t sort_pairs(void* tmp, size_t& bytes, const float* k, float* ko, const int* v, int* vo,
                      unsigned n) {
    return rocprim::radix_sort_pairs(tmp, bytes, k, ko, v, vo, n);
}
