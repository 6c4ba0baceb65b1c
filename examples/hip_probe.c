/*
 * hip_probe.c - call HIP allocation functions and print what came back.
 *
 * One source, two shapes (rmcp-testkit/build.rs builds both, per HIP major version):
 *   - an executable (hip_probe5, hip_probe6, hip_probe7) linked with -lamdhip64, whose
 *     main() calls probe_main();
 *   - with -DHIP_PROBE_LIBRARY, a shared library (libframework5.so,
 *     libframework6.so, libframework7.so) linked with -lamdhip64 that exports probe_main(): the
 *     "framework library that a Python extension loads with RTLD_LOCAL" shape
 *     (run it with tests/c/dlopen_client).
 * No HIP headers are needed: the prototypes below are the stable C ABI.
 *
 * Build by hand:
 *   cc -O2 -o hip_probe examples/hip_probe.c -L<dir with libamdhip64.so> -lamdhip64 -ldl -pthread
 *
 * Arguments are steps, run in order:
 *   FUNC[:SIZE[:FLAGS[:null]]]   call FUNC (SIZE decimal or "max", default 4096;
 *                                FLAGS hex 0x.. or decimal, default 0; "null"
 *                                passes a NULL out-pointer / host pointer)
 *   all                          every FUNC once (hipMallocManaged with flags 1)
 *   procaddr:NAME                hipGetProcAddress(NAME), compared with dlsym
 *   entrypoint:NAME[:FLAGS]      hipGetDriverEntryPoint(NAME, FLAGS), compared with dlsym
 *   entrypoint_spt:NAME          hipGetDriverEntryPoint_spt(NAME, 0) (per-thread streams)
 *   memcreate:SIZE:LOC           hipMemCreate(SIZE) with a pinned hipMemAllocationProp at
 *                                location type LOC (1 device, 2 host; id 0), then release
 *   device:N                     hipSetDevice(N)
 *   rtldnext                     is dlsym(RTLD_NEXT, "hipHostMalloc") non-NULL?
 *   maps                         libamdhip64* files mapped in this process
 *   dlopen-fail                  a dlopen that fails, leaving a dlerror() message pending
 *   dlerror                      print "dlerror=MESSAGE" or "dlerror=none" (and clear it)
 *   threads:N:FUNC[:...]         run a FUNC step in N threads at once
 *   setenv:NAME=VALUE            setenv(NAME, VALUE) in this process (as a program that
 *                                sets a variable before its first HIP call does)
 * Exit status: 0, or 2 if an argument cannot be parsed (nothing is run then).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;

hipError_t hipMalloc(void **p, size_t n);
hipError_t hipExtMallocWithFlags(void **p, size_t n, unsigned flags);
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags);
hipError_t hipHostAlloc(void **p, size_t n, unsigned flags);
hipError_t hipMallocHost(void **p, size_t n);
hipError_t hipMemAllocHost(void **p, size_t n);
hipError_t hipMallocManaged(void **p, size_t n, unsigned flags);
hipError_t hipHostRegister(void *p, size_t n, unsigned flags);
hipError_t hipHostUnregister(void *p);
hipError_t hipHostGetFlags(unsigned *flags, void *p);
hipError_t hipFree(void *p);
hipError_t hipHostFree(void *p);
hipError_t hipMallocAsync(void **p, size_t n, void *stream);
hipError_t hipMallocFromPoolAsync(void **p, size_t n, void *pool, void *stream);
hipError_t hipSetDevice(int dev);
/* hipMemAllocationProp's leading fields; the rest (win32HandleMetaData, allocFlags) zero. */
struct mem_alloc_prop {
    int type;
    int requested_handle_type;
    int location_type;
    int location_id;
    void *win32_handle_meta_data;
    unsigned char alloc_flags[8];
};
hipError_t hipMemCreate(unsigned long long *handle, size_t size,
                        const struct mem_alloc_prop *prop, unsigned long long flags);
hipError_t hipMemRelease(unsigned long long handle);

typedef hipError_t (*get_proc_address_fn)(const char *symbol, void **pfn, int hipVersion,
                                          uint64_t flags, int *symbolStatus);
typedef hipError_t (*driver_entry_point_fn)(const char *symbol, void **pfn,
                                            unsigned long long flags, int *status);
typedef hipError_t (*host_malloc_fn)(void **p, size_t n, unsigned flags);

#define HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND 302

enum func_id {
    F_MALLOC,
    F_EXT_MALLOC_WITH_FLAGS,
    F_HOST_MALLOC,
    F_HOST_ALLOC,
    F_MALLOC_HOST,
    F_MEM_ALLOC_HOST,
    F_MALLOC_MANAGED,
    F_HOST_REGISTER,
    F_MALLOC_ASYNC,
    F_MALLOC_FROM_POOL_ASYNC,
    F_COUNT
};

static const char *const func_names[F_COUNT] = {
    "hipMalloc",        "hipExtMallocWithFlags", "hipHostMalloc",   "hipHostAlloc",
    "hipMallocHost",    "hipMemAllocHost",       "hipMallocManaged", "hipHostRegister",
    "hipMallocAsync",   "hipMallocFromPoolAsync",
};

enum step_kind {
    S_CALL,
    S_ALL,
    S_PROCADDR,
    S_ENTRYPOINT,
    S_MEMCREATE,
    S_DEVICE,
    S_RTLDNEXT,
    S_MAPS,
    S_THREADS,
    S_DLOPEN_FAIL,
    S_DLERROR,
    S_SETENV
};

struct call {
    int func;
    size_t size;
    unsigned flags;
    int null_ptr;
};

struct step {
    int kind;
    struct call call;
    const char *name; /* procaddr, entrypoint */
    long number;      /* device ordinal, thread count, entrypoint flags (-1: the _spt form) */
    char buf[128];    /* entrypoint: NAME without its flags */
};

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */
/* ------------------------------------------------------------------------ */

static int parse_u64(const char *s, size_t len, unsigned long long *out, int allow_max)
{
    char buf[64];
    char *end;
    int base = 10;
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (allow_max && strcmp(buf, "max") == 0) {
        *out = SIZE_MAX;
        return 0;
    }
    if (buf[0] == '-' || buf[0] == '+')
        return -1;
    if (len > 2 && buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'))
        base = 16;
    *out = strtoull(buf, &end, base);
    return *end == '\0' ? 0 : -1;
}

static int parse_call(const char *arg, struct call *c)
{
    const char *fields[5];
    size_t lens[5];
    int nf = 0, i;
    const char *p = arg;
    unsigned long long v;

    for (;;) {
        const char *colon = strchr(p, ':');
        if (nf == 5)
            return -1;
        fields[nf] = p;
        lens[nf] = colon ? (size_t)(colon - p) : strlen(p);
        nf++;
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    if (nf > 4)
        return -1;
    c->func = -1;
    for (i = 0; i < F_COUNT; i++)
        if (strlen(func_names[i]) == lens[0] && strncmp(func_names[i], fields[0], lens[0]) == 0)
            c->func = i;
    if (c->func < 0)
        return -1;
    c->size = 4096;
    c->flags = 0;
    c->null_ptr = 0;
    if (nf > 1) {
        if (parse_u64(fields[1], lens[1], &v, 1) != 0)
            return -1;
        c->size = (size_t)v;
    }
    if (nf > 2) {
        if (parse_u64(fields[2], lens[2], &v, 0) != 0 || v > 0xffffffffull)
            return -1;
        c->flags = (unsigned)v;
    }
    if (nf > 3) {
        if (lens[3] != 4 || strncmp(fields[3], "null", 4) != 0)
            return -1;
        c->null_ptr = 1;
    }
    return 0;
}

static int parse_step(const char *arg, struct step *s)
{
    unsigned long long v;
    memset(s, 0, sizeof *s);
    if (strcmp(arg, "all") == 0) {
        s->kind = S_ALL;
        return 0;
    }
    if (strcmp(arg, "rtldnext") == 0) {
        s->kind = S_RTLDNEXT;
        return 0;
    }
    if (strcmp(arg, "maps") == 0) {
        s->kind = S_MAPS;
        return 0;
    }
    if (strcmp(arg, "dlopen-fail") == 0) {
        s->kind = S_DLOPEN_FAIL;
        return 0;
    }
    if (strcmp(arg, "dlerror") == 0) {
        s->kind = S_DLERROR;
        return 0;
    }
    if (strncmp(arg, "setenv:", 7) == 0) {
        const char *eq = strchr(arg + 7, '=');
        size_t len = eq ? (size_t)(eq - (arg + 7)) : 0;
        if (len == 0 || len >= sizeof s->buf)
            return -1;
        s->kind = S_SETENV;
        memcpy(s->buf, arg + 7, len);
        s->buf[len] = '\0';
        s->name = eq + 1;
        return 0;
    }
    if (strncmp(arg, "procaddr:", 9) == 0) {
        s->kind = S_PROCADDR;
        s->name = arg + 9;
        return s->name[0] != '\0' ? 0 : -1;
    }
    if (strncmp(arg, "entrypoint:", 11) == 0 || strncmp(arg, "entrypoint_spt:", 15) == 0) {
        int spt = arg[10] == '_';
        const char *n = arg + (spt ? 15 : 11);
        const char *colon = strchr(n, ':');
        size_t len = colon ? (size_t)(colon - n) : strlen(n);
        s->kind = S_ENTRYPOINT;
        s->number = spt ? -1 : 0;
        if (len == 0 || len >= sizeof s->buf)
            return -1;
        memcpy(s->buf, n, len);
        s->buf[len] = '\0';
        s->name = s->buf;
        if (colon != NULL) {
            if (spt || parse_u64(colon + 1, strlen(colon + 1), &v, 0) != 0 || v > 0xff)
                return -1;
            s->number = (long)v;
        }
        return 0;
    }
    if (strncmp(arg, "memcreate:", 10) == 0) {
        const char *n = arg + 10;
        const char *colon = strchr(n, ':');
        if (colon == NULL || parse_u64(n, (size_t)(colon - n), &v, 1) != 0)
            return -1;
        s->kind = S_MEMCREATE;
        s->call.size = (size_t)v;
        if (parse_u64(colon + 1, strlen(colon + 1), &v, 0) != 0 || v > 0xff)
            return -1;
        s->number = (long)v;
        return 0;
    }
    if (strncmp(arg, "device:", 7) == 0) {
        const char *n = arg + 7;
        char *end;
        long d = strtol(n, &end, 10);
        if (*n == '\0' || *end != '\0')
            return -1;
        s->kind = S_DEVICE;
        s->number = d;
        return 0;
    }
    if (strncmp(arg, "threads:", 8) == 0) {
        const char *n = arg + 8;
        const char *colon = strchr(n, ':');
        if (colon == NULL || parse_u64(n, (size_t)(colon - n), &v, 0) != 0 || v == 0 ||
            v > 1024)
            return -1;
        s->kind = S_THREADS;
        s->number = (long)v;
        return parse_call(colon + 1, &s->call);
    }
    s->kind = S_CALL;
    return parse_call(arg, &s->call);
}

/* ------------------------------------------------------------------------ */
/* Calls                                                                    */
/* ------------------------------------------------------------------------ */

static int is_host_alloc(int func)
{
    return func == F_HOST_MALLOC || func == F_HOST_ALLOC || func == F_MALLOC_HOST ||
           func == F_MEM_ALLOC_HOST;
}

/* Runs one call and formats its result line (with the trailing newline). */
static void run_call(const struct call *c, char *line, size_t linelen)
{
    void *ptr = NULL;
    void **out = c->null_ptr ? NULL : &ptr;
    void *reg_buf = NULL;
    int rc = 0, got;
    int n;

    switch (c->func) {
    case F_MALLOC:
        rc = hipMalloc(out, c->size);
        break;
    case F_EXT_MALLOC_WITH_FLAGS:
        rc = hipExtMallocWithFlags(out, c->size, c->flags);
        break;
    case F_HOST_MALLOC:
        rc = hipHostMalloc(out, c->size, c->flags);
        break;
    case F_HOST_ALLOC:
        rc = hipHostAlloc(out, c->size, c->flags);
        break;
    case F_MALLOC_HOST:
        rc = hipMallocHost(out, c->size);
        break;
    case F_MEM_ALLOC_HOST:
        rc = hipMemAllocHost(out, c->size);
        break;
    case F_MALLOC_MANAGED:
        rc = hipMallocManaged(out, c->size, c->flags);
        break;
    case F_HOST_REGISTER:
        if (!c->null_ptr) {
            /* A huge SIZE cannot be backed; register a page with that size. */
            reg_buf = malloc(c->size <= ((size_t)1 << 30) ? (c->size ? c->size : 1) : 4096);
            ptr = reg_buf;
        }
        rc = hipHostRegister(ptr, c->size, c->flags);
        break;
    case F_MALLOC_ASYNC:
        rc = hipMallocAsync(out, c->size, NULL);
        break;
    case F_MALLOC_FROM_POOL_ASYNC:
        rc = hipMallocFromPoolAsync(out, c->size, NULL, NULL);
        break;
    default:
        rc = -1;
        break;
    }

    got = ptr != NULL;
    n = snprintf(line, linelen, "%s size=%zu flags=0x%x rc=%d ptr=%d", func_names[c->func],
                 c->size, c->flags, rc, got);
    if (n < 0 || (size_t)n >= linelen)
        n = (int)linelen - 1;

    if (c->func == F_HOST_REGISTER) {
        if (rc == 0 && reg_buf != NULL)
            hipHostUnregister(reg_buf);
        free(reg_buf);
    } else if (rc == 0 && got) {
        if (is_host_alloc(c->func)) {
            unsigned hf = 0;
            int frc = hipHostGetFlags(&hf, ptr);
            if (frc == 0)
                n += snprintf(line + n, linelen - (size_t)n, " hostflags=0x%x", hf);
            else
                n += snprintf(line + n, linelen - (size_t)n, " hostflags=err%d", frc);
            if (n < 0 || (size_t)n >= linelen)
                n = (int)linelen - 1;
            hipHostFree(ptr);
        } else {
            hipFree(ptr);
        }
    }
    snprintf(line + n, linelen - (size_t)n, "\n");
}

static void do_call(const struct call *c)
{
    char line[512];
    run_call(c, line, sizeof line);
    fputs(line, stdout);
    fflush(stdout);
}

static void do_all(void)
{
    int i;
    for (i = 0; i < F_COUNT; i++) {
        struct call c;
        c.func = i;
        c.size = 4096;
        c.flags = (i == F_MALLOC_MANAGED) ? 1u /* hipMemAttachGlobal */ : 0u;
        c.null_ptr = 0;
        do_call(&c);
    }
}

/* The address the probe itself gets for NAME. In the RTLD_LOCAL library
 * shape the runtime is not in the global scope, so fall back to RTLD_NEXT
 * (which searches this object's own dependency scope). */
static void *lookup(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (f == NULL)
        f = dlsym(RTLD_NEXT, name);
    return f;
}

static void do_procaddr(const char *name)
{
    get_proc_address_fn gpa = (get_proc_address_fn)lookup("hipGetProcAddress");
    void *pfn = NULL, *direct;
    int status = -1, rc;

    if (gpa == NULL) {
        printf("procaddr %s rc=%d missing=1\n", name, HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND);
        fflush(stdout);
        return;
    }
    rc = gpa(name, &pfn, 60000000, 0, &status);
    direct = lookup(name);
    printf("procaddr %s rc=%d status=%d found=%d same_as_direct=%d\n", name, rc, status,
           pfn != NULL, pfn != NULL && pfn == direct);
    fflush(stdout);
    if (pfn != NULL && strcmp(name, "hipHostMalloc") == 0) {
        void *p = NULL;
        int crc = ((host_malloc_fn)pfn)(&p, 4096, 0);
        printf("procaddr-call rc=%d ptr=%d\n", crc, p != NULL);
        fflush(stdout);
        if (crc == 0 && p != NULL)
            hipHostFree(p);
    }
}

/* hipGetDriverEntryPoint (7.1+), or its _spt form when flags < 0. */
static void do_entrypoint(const char *name, long flags)
{
    const char *fn = flags < 0 ? "hipGetDriverEntryPoint_spt" : "hipGetDriverEntryPoint";
    driver_entry_point_fn gep = (driver_entry_point_fn)lookup(fn);
    void *pfn = NULL, *direct;
    int status = -1, rc;
    const char *tag = flags < 0 ? "entrypoint_spt" : "entrypoint";

    if (gep == NULL) {
        printf("%s %s rc=%d missing=1\n", tag, name, HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND);
        fflush(stdout);
        return;
    }
    rc = gep(name, &pfn, flags < 0 ? 0ull : (unsigned long long)flags, &status);
    direct = lookup(name);
    printf("%s %s rc=%d status=%d found=%d same_as_direct=%d\n", tag, name, rc, status,
           pfn != NULL, pfn != NULL && pfn == direct);
    fflush(stdout);
    if (pfn != NULL && strcmp(name, "hipHostMalloc") == 0) {
        void *p = NULL;
        int crc = ((host_malloc_fn)pfn)(&p, 4096, 0);
        printf("%s-call rc=%d ptr=%d\n", tag, crc, p != NULL);
        fflush(stdout);
        if (crc == 0 && p != NULL)
            hipHostFree(p);
    }
}

static void do_memcreate(size_t size, long location)
{
    struct mem_alloc_prop prop;
    unsigned long long handle = 0;
    int rc;
    memset(&prop, 0, sizeof prop);
    prop.type = 1; /* hipMemAllocationTypePinned */
    prop.location_type = (int)location;
    rc = hipMemCreate(&handle, size, &prop, 0);
    printf("hipMemCreate size=%zu location=%ld rc=%d handle=%d\n", size, location, rc,
           handle != 0);
    fflush(stdout);
    if (rc == 0 && handle != 0)
        hipMemRelease(handle);
}

static void do_device(long n)
{
    int rc = hipSetDevice((int)n);
    printf("device %ld rc=%d\n", n, rc);
    fflush(stdout);
}

static void do_rtldnext(void)
{
    void *f = dlsym(RTLD_NEXT, "hipHostMalloc");
    printf("rtldnext hipHostMalloc=%d\n", f != NULL);
    fflush(stdout);
}

static int starts_with_runtime(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    return strncmp(base, "libamdhip64", 11) == 0;
}

static void do_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[8192];
    char **seen = NULL;
    size_t nseen = 0, i;

    if (f == NULL) {
        printf("maps count=0\n");
        fflush(stdout);
        return;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        char *path = strchr(line, '/');
        size_t len;
        int dup = 0;
        char **grown;
        if (path == NULL)
            continue;
        len = strlen(path);
        while (len > 0 && (path[len - 1] == '\n' || path[len - 1] == ' '))
            path[--len] = '\0';
        if (!starts_with_runtime(path))
            continue;
        for (i = 0; i < nseen; i++)
            if (strcmp(seen[i], path) == 0)
                dup = 1;
        if (dup)
            continue;
        grown = realloc(seen, (nseen + 1) * sizeof *seen);
        if (grown == NULL)
            break;
        seen = grown;
        seen[nseen] = strdup(path);
        if (seen[nseen] == NULL)
            break;
        nseen++;
    }
    fclose(f);
    for (i = 0; i < nseen; i++) {
        printf("maps %s\n", seen[i]);
        free(seen[i]);
    }
    free(seen);
    printf("maps count=%zu\n", nseen);
    fflush(stdout);
}

struct thread_arg {
    const struct call *call;
    pthread_barrier_t *barrier;
    char line[512];
};

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    pthread_barrier_wait(a->barrier);
    run_call(a->call, a->line, sizeof a->line);
    return NULL;
}

static void do_threads(const struct call *c, long n)
{
    pthread_barrier_t barrier;
    pthread_t *tids = calloc((size_t)n, sizeof *tids);
    struct thread_arg *args = calloc((size_t)n, sizeof *args);
    long i, started = 0;

    if (tids == NULL || args == NULL) {
        free(tids);
        free(args);
        fprintf(stderr, "hip_probe: out of memory\n");
        return;
    }
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (i = 0; i < n; i++) {
        args[i].call = c;
        args[i].barrier = &barrier;
        args[i].line[0] = '\0';
        if (pthread_create(&tids[i], NULL, thread_main, &args[i]) != 0) {
            fprintf(stderr, "hip_probe: pthread_create failed\n");
            exit(1); /* the barrier would never open */
        }
        started++;
    }
    for (i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (i = 0; i < started; i++)
        fputs(args[i].line, stdout);
    fflush(stdout);
    free(tids);
    free(args);
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

#ifdef HIP_PROBE_LIBRARY
__attribute__((visibility("default")))
#endif
int probe_main(int argc, char **argv);

int probe_main(int argc, char **argv)
{
    struct step *steps;
    int i, nsteps = argc > 1 ? argc - 1 : 0;

    steps = calloc((size_t)(nsteps ? nsteps : 1), sizeof *steps);
    if (steps == NULL)
        return 1;
    for (i = 0; i < nsteps; i++) {
        if (parse_step(argv[i + 1], &steps[i]) != 0) {
            fprintf(stderr, "hip_probe: cannot parse argument '%s'\n", argv[i + 1]);
            free(steps);
            return 2;
        }
    }
    for (i = 0; i < nsteps; i++) {
        const struct step *s = &steps[i];
        switch (s->kind) {
        case S_CALL:
            do_call(&s->call);
            break;
        case S_ALL:
            do_all();
            break;
        case S_PROCADDR:
            do_procaddr(s->name);
            break;
        case S_ENTRYPOINT:
            do_entrypoint(s->name, s->number);
            break;
        case S_MEMCREATE:
            do_memcreate(s->call.size, s->number);
            break;
        case S_DEVICE:
            do_device(s->number);
            break;
        case S_RTLDNEXT:
            do_rtldnext();
            break;
        case S_MAPS:
            do_maps();
            break;
        case S_DLOPEN_FAIL:
            if (dlopen("/nonexistent/rmcp-probe-missing.so", RTLD_NOW) != NULL)
                printf("dlopen-fail: it loaded\n");
            break;
        case S_DLERROR: {
            const char *e = dlerror();
            printf("dlerror=%s\n", e ? e : "none");
            fflush(stdout);
            break;
        }
        case S_THREADS:
            do_threads(&s->call, s->number);
            break;
        case S_SETENV:
            if (setenv(s->buf, s->name, 1) != 0) {
                perror("hip_probe: setenv");
                return 1;
            }
            break;
        }
    }
    fflush(stdout);
    free(steps);
    return 0;
}

#ifndef HIP_PROBE_LIBRARY
int main(int argc, char **argv)
{
    return probe_main(argc, argv);
}
#endif
