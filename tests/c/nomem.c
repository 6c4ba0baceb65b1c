/*
 * nomem.c - a program whose heap runs out at a chosen point, to show that an allocation
 * failure inside the shim never ends the process: the program gets the runtime's own
 * answers and exits as it does without the shim (rmcp-shim/tests/reliability_nomem.rs).
 *
 * This executable's malloc family (malloc, calloc, realloc, memalign, aligned_alloc,
 * posix_memalign; every object in the process, glibc and the shim included, reaches these)
 * wraps glibc's and, once armed, fails from a chosen call on with ENOMEM.
 *
 * Usage: nomem STEP...   (run in order)
 *   arm:N               from now on, the malloc-family calls after the next N fail
 *                       (arm:0: every one from now on)
 *   disarm              allocations succeed again
 *   FUNC:SIZE:FLAGS[:K] call FUNC K times (default 1) with SIZE bytes and FLAGS; FUNC is
 *                       hipHostMalloc, hipHostAlloc, hipExtMallocWithFlags (FLAGS used),
 *                       hipMalloc, hipMallocHost, hipMemAllocHost (FLAGS ignored)
 * Prints, with write(2) from a stack buffer (stdio would allocate):
 *   FUNC rc=RC n=COUNT      for each step, one line per distinct answer, in order seen
 *   allocations=A failed=F  at the end of main: malloc-family calls since the first arm,
 *                           and how many of them failed
 *   exit allocations=A failed=F  the same, after every other exit handler (the shim's
 *                           stats report is written by one)
 * Exit status 0, or 2 for a bad argument.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hip_alloc.h"

/* ---- failing allocator ---------------------------------------------------- */

static atomic_int armed;
static atomic_long calls, failed, fail_from;

/* Counts the call; 1 if it must fail. */
static int must_fail(void)
{
    long n;
    if (!atomic_load(&armed))
        return 0;
    n = atomic_fetch_add(&calls, 1);
    if (n < atomic_load(&fail_from))
        return 0;
    atomic_fetch_add(&failed, 1);
    errno = ENOMEM;
    return 1;
}

void *malloc(size_t n)
{
    return must_fail() ? NULL : __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
    return must_fail() ? NULL : __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
    return must_fail() ? NULL : __libc_realloc(p, n);
}
void *memalign(size_t al, size_t n)
{
    return must_fail() ? NULL : __libc_memalign(al, n);
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
void *valloc(size_t n)
{
    return memalign((size_t)sysconf(_SC_PAGESIZE), n);
}
void *pvalloc(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return memalign(page, (n + page - 1) / page * page);
}
void free(void *p)
{
    __libc_free(p);
}

/* ---- output without the heap ---------------------------------------------- */
static void say(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        (void)!write(1, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* ---- steps -------------------------------------------------------------------- */
static const char *const names[] = {"hipHostMalloc", "hipHostAlloc",  "hipExtMallocWithFlags",
                                    "hipMalloc",     "hipMallocHost", "hipMemAllocHost"};

static int call(int f, size_t size, unsigned flags)
{
    void *p = NULL;
    switch (f) {
    case 0: return hipHostMalloc(&p, size, flags);
    case 1: return hipHostAlloc(&p, size, flags);
    case 2: return hipExtMallocWithFlags(&p, size, flags);
    case 3: return hipMalloc(&p, size);
    case 4: return hipMallocHost(&p, size);
    default: return hipMemAllocHost(&p, size);
    }
}

static int step(const char *arg)
{
    char name[64];
    unsigned long size = 0, count = 1;
    unsigned flags = 0;
    int f = -1, seen[8], n[8], distinct = 0;
    long arm;

    if (strcmp(arg, "disarm") == 0) {
        atomic_store(&armed, 0);
        return 0;
    }
    if (sscanf(arg, "arm:%ld", &arm) == 1) {
        atomic_store(&fail_from, atomic_load(&calls) + arm);
        atomic_store(&armed, 1);
        return 0;
    }
    if (sscanf(arg, "%63[^:]:%lu:%i:%lu", name, &size, (int *)&flags, &count) < 3)
        return -1;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (strcmp(name, names[k]) == 0)
            f = (int)k;
    if (f < 0)
        return -1;
    for (unsigned long i = 0; i < count; i++) {
        int rc = call(f, size, flags), j;
        for (j = 0; j < distinct && seen[j] != rc; j++)
            ;
        if (j == distinct) {
            if (distinct == 8)
                j = 7; /* more distinct answers than any test expects: lump them */
            else {
                seen[distinct] = rc;
                n[distinct++] = 0;
            }
        }
        n[j]++;
    }
    for (int j = 0; j < distinct; j++)
        say("%s rc=%d n=%d\n", name, seen[j], n[j]);
    return 0;
}

static void at_exit(void)
{
    say("exit allocations=%ld failed=%ld\n", (long)atomic_load(&calls),
        (long)atomic_load(&failed));
}

int main(int argc, char **argv)
{
    /* Registered first, so it runs last. */
    atexit(at_exit);
    for (int i = 1; i < argc; i++) {
        if (step(argv[i]) != 0) {
            say("nomem: bad step %s\n", argv[i]);
            return 2;
        }
    }
    say("allocations=%ld failed=%ld\n", (long)atomic_load(&calls), (long)atomic_load(&failed));
    return 0;
}
