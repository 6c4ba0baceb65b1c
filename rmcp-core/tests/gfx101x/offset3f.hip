// Branches over blocks of 48 to 72 instructions (inline `s_nop 0`s and a store), so that
// some SOPP branch's offset is exactly 0x3f dwords (offset-3f): real code meets one only
// now and then.
#include <hip/hip_runtime.h>

#define N1 "s_nop 0\n"
#define N4 N1 N1 N1 N1
#define N16 N4 N4 N4 N4
#define N48 N16 N16 N16
#define ARM(i, more)                                 \
    if (x & (1u << i)) {                             \
        asm volatile(N48 more ::: "memory");         \
        out[i] = i;                                  \
    }

extern "C" __global__ void offset_3f(const unsigned* in, unsigned* out) {
    unsigned x = in[threadIdx.x];
    ARM(0, )
    ARM(1,  N1)
    ARM(2,  N1 N1)
    ARM(3,  N1 N1 N1)
    ARM(4,  N1 N1 N1 N1)
    ARM(5,  N1 N1 N1 N1 N1)
    ARM(6,  N1 N1 N1 N1 N1 N1)
    ARM(7,  N1 N1 N1 N1 N1 N1 N1)
    ARM(8,  N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(9,  N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(10,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(11,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(12,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(13,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(14,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(15,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(16,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(17,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(18,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(19,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(20,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(21,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(22,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(23,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
    ARM(24,  N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1 N1)
}
