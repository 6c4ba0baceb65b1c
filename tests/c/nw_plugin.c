/*
 * nw_plugin.c - a plugin linked to a HIP runtime, for the "never worse" loading shapes
 * (rmcp-shim/tests/never_worse.rs, issue 22). rmcp-testkit/build.rs builds it once per
 * fake runtime (libnwplugin.so in nwplugin-5/ and nwplugin-6/, linked to libamdhip64.so.5
 * and .so.6), without a soname so that copies of it under other names are distinct
 * objects. It calls HIP through its own PLT, as a framework does, and prints nothing.
 */
#include <stddef.h>

typedef int hipError_t;
hipError_t hipMalloc(void **p, size_t n);
hipError_t hipFree(void *p);
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags);
hipError_t hipHostFree(void *p);
hipError_t hipGetDeviceCount(int *count);

#define EXPORT __attribute__((visibility("default")))

/* hipHostMalloc(4096, flags), then hipHostFree of what it gave (free_rc -1 if nothing). */
EXPORT int nw_host(unsigned flags, int *free_rc)
{
    void *p = NULL;
    int rc = hipHostMalloc(&p, 4096, flags);
    *free_rc = rc == 0 ? hipHostFree(p) : -1;
    return rc;
}

/* hipMalloc(64), then hipFree of what it gave (free_rc -1 if nothing). */
EXPORT int nw_device(int *free_rc)
{
    void *p = NULL;
    int rc = hipMalloc(&p, 64);
    *free_rc = rc == 0 ? hipFree(p) : -1;
    return rc;
}

/* An unhooked call: the runtime initialises, the shim is not involved. */
EXPORT int nw_count(void)
{
    int n = -1;
    return hipGetDeviceCount(&n);
}
