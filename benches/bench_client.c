/*
 * bench_client.c - librmcp_bench.so, the calling side of rmcp's benchmarks
 * (examples/bench.rs runs it; benches/README.md says what each mode measures).
 *
 * All hooked calls are made from this shared library, not from the executable, so that a
 * caller can be matched by RMCP_EXEMPT: the shim finds the caller with dladdr on the
 * return address, and glibc names the main program "" there. benches/bench_main.c is the
 * executable (rpath $ORIGIN); it is linked to this library, which is linked to
 * libamdhip64.so.6 (the fake runtime, found through LD_LIBRARY_PATH).
 *
 * Every call asks for 0 bytes: the fake runtime then answers without allocating or
 * calling the kernel, so what is timed is the call path (the shim's, if preloaded).
 *
 * Modes (FUNC: hipHostMalloc, hipExtMallocWithFlags, hipMalloc, hipLaunchKernel (a launch
 * the fake runtime answers at once), hipStreamSynchronize (on the null stream, answered at
 * once: a synchronize that returns in time) or hipHostMallocPair (hipHostMalloc then hipHostFree of
 * what it returned: run it with FAKEHIP_PATTERN=mod4, under which the fake runtime answers
 * size 0 with a fixed non-null address, so that the shim records the allocation, and its
 * free with success, neither allocating nor locking); FLAGS: C integer):
 *   loop FUNC FLAGS THREADS BATCH NBATCH
 *       One call on the main thread first (the shim builds its state there). Then
 *       THREADS threads start together (barrier) and each times NBATCH batches of BATCH
 *       calls with clock_gettime(CLOCK_MONOTONIC). Prints one line per batch:
 *       "batch <thread> <ns per call>".
 *   first FUNC FLAGS
 *       Times the process's first call of FUNC (the shim's first hooked call builds its
 *       state) and the second. Prints "first_ns=<n> second_ns=<n> first_minflt=<n>" (minor
 *       page faults taken during the first call: code and data touched for the first time).
 *   register N
 *       Calls __hipRegisterFunction N times, each with a stub and a name of its own (as a
 *       fat binary's constructor does for each of its kernels), timed as one, after one
 *       untimed registration (the first call); prints "register_ns=<ns per call>".
 *   launch
 *       One hipLaunchKernel with distinct values in every argument (registers and stack);
 *       prints "rc=<n>": the fake runtime's digest of the arguments it received.
 *   rss none|call
 *       Makes no call, or one hipHostMalloc call; prints "VmRSS=<kB> RssAnon=<kB>
 *       RssFile=<kB>" from /proc/self/status.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef int hipError_t;
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags);
hipError_t hipExtMallocWithFlags(void **p, size_t n, unsigned flags);
hipError_t hipMalloc(void **p, size_t n);
typedef struct { unsigned x, y, z; } dim3;
hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared,
                           void *stream);
hipError_t hipHostFree(void *p);
hipError_t hipStreamSynchronize(void *stream);
void __hipRegisterFunction(void **modules, const void *stub, char *device_function,
                           const char *name, unsigned thread_limit, void *tid, void *bid,
                           void *block_dim, void *grid_dim, int *wsize);

enum func { F_HOST_MALLOC, F_EXT_MALLOC, F_MALLOC, F_LAUNCH, F_PAIR, F_SYNC };

/* The "kernel" launched: its stub's address is all a launch passes on. */
static void stub(void) {}
static const dim3 one = {1, 1, 1};
/* Stream (void *)1: the fake runtime answers 0 at once (see fake_hip.c). */
#define LAUNCH() hipLaunchKernel((const void *)stub, one, one, NULL, 0, (void *)1)

static enum func g_func;
static unsigned g_flags;
static long g_batch, g_nbatch;
static pthread_barrier_t g_start;
static volatile long g_failed;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int parse_func(const char *s, enum func *out)
{
    if (strcmp(s, "hipHostMalloc") == 0)
        *out = F_HOST_MALLOC;
    else if (strcmp(s, "hipExtMallocWithFlags") == 0)
        *out = F_EXT_MALLOC;
    else if (strcmp(s, "hipMalloc") == 0)
        *out = F_MALLOC;
    else if (strcmp(s, "hipLaunchKernel") == 0)
        *out = F_LAUNCH;
    else if (strcmp(s, "hipHostMallocPair") == 0)
        *out = F_PAIR;
    else if (strcmp(s, "hipStreamSynchronize") == 0)
        *out = F_SYNC;
    else
        return -1;
    return 0;
}

static int call_once(enum func f, unsigned flags)
{
    void *p = NULL;
    switch (f) {
    case F_HOST_MALLOC: return hipHostMalloc(&p, 0, flags);
    case F_EXT_MALLOC: return hipExtMallocWithFlags(&p, 0, flags);
    case F_MALLOC: return hipMalloc(&p, 0);
    case F_LAUNCH: return LAUNCH();
    case F_SYNC: return hipStreamSynchronize(NULL);
    case F_PAIR: {
        int rc = hipHostMalloc(&p, 0, flags);
        return rc != 0 ? rc : hipHostFree(p);
    }
    }
    return -1;
}

/* One batch: BATCH calls of one function, the loop holding nothing but the call. Returns
 * the number of failed calls (there should be none). */
static long run_batch(enum func f, unsigned flags, long n)
{
    void *p = NULL;
    long failed = 0;
    switch (f) {
    case F_HOST_MALLOC:
        for (long i = 0; i < n; i++)
            failed += hipHostMalloc(&p, 0, flags) != 0;
        break;
    case F_EXT_MALLOC:
        for (long i = 0; i < n; i++)
            failed += hipExtMallocWithFlags(&p, 0, flags) != 0;
        break;
    case F_MALLOC:
        for (long i = 0; i < n; i++)
            failed += hipMalloc(&p, 0) != 0;
        break;
    case F_LAUNCH:
        for (long i = 0; i < n; i++)
            failed += LAUNCH() != 0;
        break;
    case F_PAIR:
        for (long i = 0; i < n; i++) {
            failed += hipHostMalloc(&p, 0, flags) != 0;
            failed += hipHostFree(p) != 0;
        }
        break;
    case F_SYNC:
        for (long i = 0; i < n; i++)
            failed += hipStreamSynchronize(NULL) != 0;
        break;
    }
    return failed;
}

struct worker {
    pthread_t thread;
    int index;
    double *ns;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    long failed = 0;
    failed += call_once(g_func, g_flags) != 0; /* this thread's first call (TLS set-up) */
    pthread_barrier_wait(&g_start);
    for (long b = 0; b < g_nbatch; b++) {
        long long t0 = now_ns();
        failed += run_batch(g_func, g_flags, g_batch);
        long long t1 = now_ns();
        w->ns[b] = (double)(t1 - t0) / (double)g_batch;
    }
    if (failed)
        __atomic_add_fetch(&g_failed, failed, __ATOMIC_RELAXED);
    return NULL;
}

static int mode_loop(int argc, char **argv)
{
    int threads;
    struct worker *ws;

    if (argc != 7 || parse_func(argv[2], &g_func) != 0)
        return 2;
    g_flags = (unsigned)strtoul(argv[3], NULL, 0);
    threads = atoi(argv[4]);
    g_batch = atol(argv[5]);
    g_nbatch = atol(argv[6]);
    if (threads < 1 || threads > 64 || g_batch < 1 || g_nbatch < 1)
        return 2;
    if (call_once(g_func, g_flags) != 0) /* the first call: state is built here */
        g_failed++;
    ws = calloc((size_t)threads, sizeof *ws);
    if (ws == NULL || pthread_barrier_init(&g_start, NULL, (unsigned)threads) != 0)
        return 3;
    for (int t = 0; t < threads; t++) {
        ws[t].index = t;
        ws[t].ns = calloc((size_t)g_nbatch, sizeof(double));
        if (ws[t].ns == NULL || pthread_create(&ws[t].thread, NULL, worker_main, &ws[t]) != 0)
            return 3;
    }
    for (int t = 0; t < threads; t++)
        pthread_join(ws[t].thread, NULL);
    for (int t = 0; t < threads; t++)
        for (long b = 0; b < g_nbatch; b++)
            printf("batch %d %.4f\n", t, ws[t].ns[b]);
    if (g_failed) {
        fprintf(stderr, "rmcp_bench: %ld calls failed\n", (long)g_failed);
        return 1;
    }
    return 0;
}

static int mode_first(int argc, char **argv)
{
    enum func f;
    unsigned flags;
    long long t0, first, second;
    int rc1, rc2;
    struct rusage r0, r1;

    if (argc != 4 || parse_func(argv[2], &f) != 0)
        return 2;
    flags = (unsigned)strtoul(argv[3], NULL, 0);
    now_ns(); /* the vDSO clock's own first use is not the call's */
    getrusage(RUSAGE_SELF, &r0);
    t0 = now_ns();
    rc1 = call_once(f, flags);
    first = now_ns() - t0;
    getrusage(RUSAGE_SELF, &r1);
    t0 = now_ns();
    rc2 = call_once(f, flags);
    second = now_ns() - t0;
    printf("first_ns=%lld second_ns=%lld first_minflt=%ld\n", first, second,
           r1.ru_minflt - r0.ru_minflt);
    return rc1 != 0 || rc2 != 0;
}

static int mode_register(int argc, char **argv)
{
    long n;
    char *stubs, *names;
    long long t0, t;

    if (argc != 3 || (n = atol(argv[2])) < 1)
        return 2;
    /* Distinct stubs (one byte each) and names (16 bytes each), as a fat binary has. */
    stubs = calloc((size_t)n, 1);
    names = calloc((size_t)n, 16);
    if (stubs == NULL || names == NULL)
        return 3;
    for (long i = 0; i < n; i++)
        snprintf(names + i * 16, 16, "_Z1k%07lxv", (unsigned long)i & 0xfffffff);
    /* One first, untimed: the process's first call into the shim maps its body (the
     * first-call figure, measured on its own). */
    __hipRegisterFunction(NULL, (const void *)stub, (char *)"first", "first", (unsigned)-1,
                          NULL, NULL, NULL, NULL, NULL);
    t0 = now_ns();
    for (long i = 0; i < n; i++)
        __hipRegisterFunction(NULL, stubs + i, names + i * 16, names + i * 16, (unsigned)-1,
                              NULL, NULL, NULL, NULL, NULL);
    t = now_ns() - t0;
    printf("register_ns=%.2f\n", (double)t / (double)n);
    return 0;
}

static int mode_launch(void)
{
    dim3 grid = {3, 5, 7}, block = {11, 13, 17};
    /* Fixed values, not addresses (which differ from process to process): the fake
     * runtime only digests them. */
    printf("rc=%d\n", hipLaunchKernel((const void *)0x1234, grid, block, (void **)0x5678, 19,
                                       (void *)23));
    return 0;
}

static long status_kb(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? atol(p + strlen(key)) : -1;
}

static int mode_rss(int argc, char **argv)
{
    char buf[8192];
    size_t n;
    FILE *f;

    if (argc != 3)
        return 2;
    if (strcmp(argv[2], "call") == 0) {
        if (call_once(F_HOST_MALLOC, 0) != 0)
            return 1;
    } else if (strcmp(argv[2], "none") != 0) {
        return 2;
    }
    f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return 3;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    printf("VmRSS=%ld RssAnon=%ld RssFile=%ld\n", status_kb(buf, "VmRSS:"),
           status_kb(buf, "RssAnon:"), status_kb(buf, "RssFile:"));
    return 0;
}

__attribute__((visibility("default"))) int rmcp_bench_main(int argc, char **argv)
{
    int rc = 2;
    if (argc >= 2 && strcmp(argv[1], "loop") == 0)
        rc = mode_loop(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "first") == 0)
        rc = mode_first(argc, argv);
    else if (argc == 2 && strcmp(argv[1], "launch") == 0)
        rc = mode_launch();
    else if (argc >= 2 && strcmp(argv[1], "rss") == 0)
        rc = mode_rss(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "register") == 0)
        rc = mode_register(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: rmcp_bench loop FUNC FLAGS THREADS BATCH NBATCH\n"
                        "       rmcp_bench first FUNC FLAGS\n"
                        "       rmcp_bench register N\n"
                        "       rmcp_bench rss none|call\n");
    fflush(stdout);
    return rc;
}
