// benches/fatbin_startup.hip: the program of benches/fatbin_startup.sh. One fat binary,
// made large by KERNELS kernels of REPT instructions each (built with -DREPT=N), for every
// --offload-arch the script gives; its gfx1030 entry holds one s_inst_prefetch per kernel,
// which rmcp fixes in place under HSA_OVERRIDE_GFX_VERSION=10.3.0 on a gfx1010 (none with
// -DNO_PREFETCH).
//
// Prints "startup_us=N": the time from its first constructor (priority 101, before the one
// clang emits to register the fat binary) to main, which is what registering the fat binary
// (and its kernels) costs. No GPU is touched: the runtime reads no device to register.
#include <hip/hip_runtime.h>
#include <stdio.h>
#include <time.h>

#define STR2(x) #x
#define STR(x) STR2(x)
#if defined(__gfx1030__) && !defined(NO_PREFETCH)
#define PREFETCH "s_inst_prefetch 0x1\n"
#else
#define PREFETCH ""
#endif
#define KERNEL(n)                                                                          \
    extern "C" __global__ void big##n(int *p)                                              \
    {                                                                                      \
        asm volatile(PREFETCH ".rept " STR(REPT) "\nv_add_f32 v1, v2, v3\n.endr\n");       \
        p[threadIdx.x] = n;                                                                \
    }
KERNEL(0) KERNEL(1) KERNEL(2) KERNEL(3) KERNEL(4) KERNEL(5) KERNEL(6) KERNEL(7)

static struct timespec first_at;

__attribute__((constructor(101))) static void first(void)
{
    clock_gettime(CLOCK_MONOTONIC, &first_at);
}

int main(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long us = (now.tv_sec - first_at.tv_sec) * 1000000L + (now.tv_nsec - first_at.tv_nsec) / 1000;
    printf("startup_us=%ld\n", us);
    return 0;
}
