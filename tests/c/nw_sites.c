/*
 * nw_sites.c - many call sites in one object (issue 22: past about 1,000 call sites a
 * hooked call takes a slow path). Linked to the .so.6 fake runtime. SITES distinct call
 * instructions of hipMalloc(&p, 0) (the fake answers size 0 without allocating) are each
 * made once; then, with this executable's malloc family counting, each is made again.
 * After a site's first call a hooked call allocates nothing (README's hot-path rule), so
 * any allocation counted in the second round is the shim's lookup of a caller it did not
 * keep.
 *
 * Usage: nw_sites SITES (at most 1200)
 * Prints: sites=<n> failed=<n> mallocs=<n>
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "hip_alloc.h"

static atomic_int armed;
static atomic_long mallocs;

#include "counting_malloc.h"

/* One call site per expansion: distinct call instructions, distinct return addresses. */
#define SITE                                                                                \
    if (k++ < limit) {                                                                      \
        void *p;                                                                            \
        failed += hipMalloc(&p, 0) != 0;                                                    \
    }
#define S10 SITE SITE SITE SITE SITE SITE SITE SITE SITE SITE
#define S100 S10 S10 S10 S10 S10 S10 S10 S10 S10 S10
#define S1200 S100 S100 S100 S100 S100 S100 S100 S100 S100 S100 S100 S100

__attribute__((noinline)) static int sites(int limit)
{
    int k = 0, failed = 0;
    S1200
    return failed;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n <= 0 || n > 1200) {
        fprintf(stderr, "usage: nw_sites SITES (1..1200)\n");
        return 2;
    }
    int failed = sites(n);
    armed = 1;
    failed += sites(n);
    armed = 0;
    printf("sites=%d failed=%d mallocs=%ld\n", n, failed, (long)mallocs);
    return 0;
}
