/*
 * stress.c - N threads x M hooked calls over every hook the shim exports, for the exact
 * accounting test (rmcp-shim/tests/reliability_stress.rs) and the logging test.
 *
 *   stress THREADS CALLS_PER_THREAD
 *
 * Linked to the fake runtime (.so.6), run with FAKEHIP_PATTERN=mod4: the answer to an
 * allocation call follows its size (size%4: 0 success, 1 out of memory, 2 invalid value,
 * 3 invalid value only for the shapes the shim rewrites to). Each call's hook, flags
 * variant and size class come from a per-thread xorshift generator, so a run is the same
 * every time. Nothing is freed: under the pattern the runtime hands out a fixed address.
 *
 * Prints, summed over the threads, what the callers got back:
 *   tally FUNC FLAGS_OR_NAME class=C rc=RC n=N
 *   bytes FUNC N
 *   getproc substituted=N runtime=N
 * and exits 0 (the test judges the numbers).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
extern hipError_t hipMalloc(void **, size_t);
extern hipError_t hipExtMallocWithFlags(void **, size_t, unsigned);
extern hipError_t hipHostMalloc(void **, size_t, unsigned);
extern hipError_t hipHostAlloc(void **, size_t, unsigned);
extern hipError_t hipMallocHost(void **, size_t);
extern hipError_t hipMemAllocHost(void **, size_t);
extern hipError_t hipMallocManaged(void **, size_t, unsigned);
extern hipError_t hipHostRegister(void *, size_t, unsigned);
extern hipError_t hipMallocAsync(void **, size_t, void *);
extern hipError_t hipMallocFromPoolAsync(void **, size_t, void *, void *);
extern hipError_t hipGetProcAddress(const char *, void **, int, uint64_t, int *);

enum {
    H_MALLOC,
    H_EXT,
    H_HOST_MALLOC,
    H_HOST_ALLOC,
    H_MALLOC_HOST,
    H_MEM_ALLOC_HOST,
    H_MANAGED,
    H_REGISTER,
    H_ASYNC,
    H_POOL,
    H_GETPROC,
    NHOOKS
};

static const char *const hook_names[NHOOKS] = {
    "hipMalloc",       "hipExtMallocWithFlags", "hipHostMalloc",   "hipHostAlloc",
    "hipMallocHost",   "hipMemAllocHost",       "hipMallocManaged", "hipHostRegister",
    "hipMallocAsync",  "hipMallocFromPoolAsync", "hipGetProcAddress",
};

#define MAXV 8
/* Flags variants per hook (0-terminated lists would hide flags 0: counts instead). */
static const unsigned variants[NHOOKS][MAXV] = {
    [H_MALLOC] = {0},
    /* Default, Finegrained (rewritten), SignalMemory, Uncached, Contiguous */
    [H_EXT] = {0, 1, 2, 3, 4},
    /* 0, Portable, Mapped, Coherent, NonCoherent, both, Uncached, Mapped|Coherent */
    [H_HOST_MALLOC] = {0, 0x1, 0x2, 0x40000000u, 0x80000000u, 0xc0000000u, 0x10000000u,
                       0x40000002u},
    /* 0, Mapped, WriteCombined, all three (rewritten on >= 6.3); 0x8, NonCoherent (not) */
    [H_HOST_ALLOC] = {0, 0x2, 0x4, 0x7, 0x8, 0x80000000u},
    [H_MALLOC_HOST] = {0},
    [H_MEM_ALLOC_HOST] = {0},
    [H_MANAGED] = {1, 2},
    [H_REGISTER] = {0, 1, 2},
    [H_ASYNC] = {0},
    [H_POOL] = {0},
};
static const int nvariants[NHOOKS] = {1, 5, 8, 6, 1, 1, 2, 3, 1, 1, 5};
static const char *const proc_names[5] = {"hipMalloc", "hipHostMalloc", "hipExtMallocWithFlags",
                                          "hipFree", "hipNoSuchFunction"};
static void *proc_expected[5]; /* what the caller should get: the shim's hook, or the runtime's */

#define RCS 4 /* 0, 1, 2, anything else */
struct tally {
    unsigned long long n[NHOOKS][MAXV][4][RCS];
    unsigned long long bytes[NHOOKS];
    unsigned long long substituted, runtime_fn, wrong_fn;
    int other_rc;
};

static struct tally g_total;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static long g_calls;

static unsigned long long xorshift(unsigned long long *s)
{
    unsigned long long x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void *worker(void *arg)
{
    unsigned long long seed = 0x9E3779B97F4A7C15ULL * ((unsigned long long)(uintptr_t)arg + 1);
    struct tally *t = calloc(1, sizeof *t);
    static char region[4096];
    long i;
    int h, v, c, rc, rb, k;

    if (t == NULL)
        abort();
    for (i = 0; i < g_calls; i++) {
        unsigned long long r = xorshift(&seed);
        void *p = NULL;
        size_t size;
        unsigned f;

        h = (int)(r % NHOOKS);
        v = (int)((r >> 8) % (unsigned)nvariants[h]);
        c = (int)((r >> 16) % 4);
        k = 8 + (int)((r >> 24) % 64);
        size = (size_t)(4 * k + c);
        f = variants[h][v];
        switch (h) {
        case H_MALLOC: rc = hipMalloc(&p, size); break;
        case H_EXT: rc = hipExtMallocWithFlags(&p, size, f); break;
        case H_HOST_MALLOC: rc = hipHostMalloc(&p, size, f); break;
        case H_HOST_ALLOC: rc = hipHostAlloc(&p, size, f); break;
        case H_MALLOC_HOST: rc = hipMallocHost(&p, size); break;
        case H_MEM_ALLOC_HOST: rc = hipMemAllocHost(&p, size); break;
        case H_MANAGED: rc = hipMallocManaged(&p, size, f); break;
        case H_REGISTER: rc = hipHostRegister(region, size, f); break;
        case H_ASYNC: rc = hipMallocAsync(&p, size, NULL); break;
        case H_POOL: rc = hipMallocFromPoolAsync(&p, size, NULL, NULL); break;
        default: {
            int status = -1;
            c = 0;
            size = 0;
            rc = hipGetProcAddress(proc_names[v], &p, 600, 0, &status);
            if (rc == 0) {
                if (p == proc_expected[v] && v < 3)
                    t->substituted++;
                else if (p == proc_expected[v])
                    t->runtime_fn++;
                else
                    t->wrong_fn++;
            }
            break;
        }
        }
        if (h != H_GETPROC && h != H_REGISTER && (rc == 0) != (p != NULL))
            t->wrong_fn++; /* out-pointer set on failure or missing on success */
        rb = rc >= 0 && rc <= 2 ? rc : 3;
        if (rb == 3)
            t->other_rc = rc;
        t->n[h][v][c][rb]++;
        t->bytes[h] += size;
    }
    pthread_mutex_lock(&g_lock);
    {
        unsigned long long *a = &g_total.n[0][0][0][0], *b = &t->n[0][0][0][0];
        size_t j, cnt = sizeof t->n / sizeof t->n[0][0][0][0];
        for (j = 0; j < cnt; j++)
            a[j] += b[j];
        for (j = 0; j < NHOOKS; j++)
            g_total.bytes[j] += t->bytes[j];
        g_total.substituted += t->substituted;
        g_total.runtime_fn += t->runtime_fn;
        g_total.wrong_fn += t->wrong_fn;
        if (t->other_rc)
            g_total.other_rc = t->other_rc;
    }
    pthread_mutex_unlock(&g_lock);
    free(t);
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads, i, h, v, c, rb;
    pthread_t th[64];
    void *rt;

    if (argc != 3) {
        fprintf(stderr, "usage: %s THREADS CALLS_PER_THREAD\n", argv[0]);
        return 2;
    }
    nthreads = atoi(argv[1]);
    g_calls = atol(argv[2]);
    if (nthreads < 1 || nthreads > 64 || g_calls < 0)
        return 2;
    /* The hooked names resolve to the shim's exports (first in the search order); the
     * others to the runtime's own. */
    rt = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_NOLOAD);
    for (i = 0; i < 5; i++)
        proc_expected[i] = i < 3 ? dlsym(RTLD_DEFAULT, proc_names[i])
                                 : (rt ? dlsym(rt, proc_names[i]) : NULL);
    for (i = 0; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);

    for (h = 0; h < NHOOKS; h++) {
        for (v = 0; v < nvariants[h]; v++)
            for (c = 0; c < 4; c++)
                for (rb = 0; rb < RCS; rb++) {
                    unsigned long long n = g_total.n[h][v][c][rb];
                    if (n == 0)
                        continue;
                    if (h == H_GETPROC)
                        printf("tally %s %s class=%d rc=%d n=%llu\n", hook_names[h],
                               proc_names[v], c, rb == 3 ? g_total.other_rc : rb, n);
                    else
                        printf("tally %s 0x%x class=%d rc=%d n=%llu\n", hook_names[h],
                               variants[h][v], c, rb == 3 ? g_total.other_rc : rb, n);
                }
        printf("bytes %s %llu\n", hook_names[h], g_total.bytes[h]);
    }
    printf("getproc substituted=%llu runtime=%llu wrong=%llu\n", g_total.substituted,
           g_total.runtime_fn, g_total.wrong_fn);
    fflush(stdout);
    return 0;
}
