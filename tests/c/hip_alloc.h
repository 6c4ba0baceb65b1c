/* What the malloc-replacing C clients (hotpath.c, nomem.c, nw_sites.c) share: the prototypes of the
 * HIP allocation functions they call (the stable C ABI; no HIP headers needed) and glibc's
 * own allocator entry points, which their malloc family forwards to. */
#ifndef RMCP_HIP_ALLOC_H
#define RMCP_HIP_ALLOC_H

#include <stddef.h>

typedef int hipError_t;
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags);
hipError_t hipHostAlloc(void **p, size_t n, unsigned flags);
hipError_t hipExtMallocWithFlags(void **p, size_t n, unsigned flags);
hipError_t hipMalloc(void **p, size_t n);
hipError_t hipMallocHost(void **p, size_t n);
hipError_t hipMemAllocHost(void **p, size_t n);

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#endif
