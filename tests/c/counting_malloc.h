/* The malloc family of the clients that count the allocations a call makes (hotpath.c,
 * nw_sites.c): each allocating entry point counts one in `mallocs` while `armed` is set,
 * and forwards to glibc's own allocator. The includer declares `armed` (any int-like
 * lvalue, per thread or process-wide) and `mallocs` (an atomic_long) before including. */
#ifndef RMCP_COUNTING_MALLOC_H
#define RMCP_COUNTING_MALLOC_H

#include <errno.h>
#include <stddef.h>

#include "hip_alloc.h"

void *malloc(size_t n)
{
    if (armed)
        mallocs++;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
    if (armed)
        mallocs++;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
    if (armed)
        mallocs++;
    return __libc_realloc(p, n);
}
void *memalign(size_t al, size_t n)
{
    if (armed)
        mallocs++;
    return __libc_memalign(al, n);
}
void *aligned_alloc(size_t al, size_t n)
{
    return memalign(al, n);
}
int posix_memalign(void **out, size_t al, size_t n)
{
    void *p = memalign(al, n);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}
void free(void *p)
{
    __libc_free(p);
}

#endif
