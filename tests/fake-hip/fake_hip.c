/*
 * fake_hip.c - a tiny stand-in for libamdhip64 used by rmcp's tests.
 *
 * rmcp-testkit/build.rs compiles this file three times, as libamdhip64.so.5, .so.6 and
 * .so.7 (-DFAKEHIP_MAJOR=5/6/7), each with a GNU version script so that every
 * export carries the same version node as in the real runtime
 * (hipMalloc@@hip_4.2, hipMallocAsync@@hip_5.1, hipGetProcAddress@@hip_6.1, and in the .so.7
 * build hipGetDriverEntryPoint@@hip_7.1).
 *
 * Environment (read once, on the first call of any export):
 *   FAKEHIP_RECORD=path   append one line per call of any export:
 *       <func> size=<dec> flags=0x<hex> rc=<dec> caller=<obj> lib=<obj>[ symbol=<name>]
 *     Lines are written with a single write(2) on an O_APPEND descriptor.
 *     Calls made while another export of this library is running on the same
 *     thread (the .so.5 hipMemAllocHost -> hipHostMalloc PLT call, possibly
 *     through a preloaded hook) are written right after the outer call's line,
 *     in the same write(2): the file shows calls in the order they started.
 *   FAKEHIP_VERSION=int   value returned by hipRuntimeGetVersion.
 *   FAKEHIP_DEVICES=ids   comma-separated PCI bus ids; "" means no device.
 *   FAKEHIP_CURRENT=n     initial current device of every thread.
 *   FAKEHIP_FAIL=rules    FUNC:RC or FUNC@MASK:RC, comma-separated; FUNC may be
 *                         "*" (every allocation function). First match wins.
 *
 * For the reliability tests (rmcp-shim/tests/reliability_*.rs):
 *   FAKEHIP_COUNTS=path   count every call of every export in memory, lock-free, by
 *       (function, rc, flags), and write the counts to path at exit (a library
 *       destructor), one line each: <func> rc=<dec> flags=0x<hex> count=<dec>.
 *       "%p" in path becomes the process id; a forked child starts from zero.
 *       Independent of FAKEHIP_RECORD (which is far slower: dladdr and a write per call).
 *   FAKEHIP_PATTERN=mod4  allocation functions (and hipHostRegister) answer by size,
 *       before any other check and without allocating: size%4 == 0 -> hipSuccess with
 *       *ptr set to a fixed non-null address (freeing it answers hipSuccess and frees nothing),
 *       1 -> hipErrorOutOfMemory,
 *       2 -> hipErrorInvalidValue, 3 -> hipErrorInvalidValue for the shapes the shim
 *       rewrites to (hipHostMalloc with NonCoherent set, hipExtMallocWithFlags with
 *       flags 0), hipSuccess otherwise: a runtime that rejects the rewrite.
 *   FAKEHIP_BLOCK=FUNC:US sleep US microseconds inside every call of FUNC (allocation
 *       functions, frees and queries), after creating the file FAKEHIP_BLOCK_MARK
 *       (if set): a caller can wait for the mark to know a thread is inside FUNC.
 *
 * The real runtime's internal call shapes are mimicked: in the .so.5 build
 * hipMemAllocHost calls the exported hipHostMalloc through the PLT (as HIP
 * before 6.1 does); in .so.6/.so.7 every export only calls static code (the
 * 6.1+ dispatch-table shape), and hipGetProcAddress resolves names with dlsym
 * on this library's own handle.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef FAKEHIP_MAJOR
#error "compile with -DFAKEHIP_MAJOR=5, 6 or 7"
#endif

#define EXPORT __attribute__((visibility("default"), noinline))

enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
};

#define HOST_MALLOC_COHERENT 0x40000000u
#define HOST_MALLOC_NONCOHERENT 0x80000000u
#define MAX_ALLOC_SIZE (((size_t)1) << 40)

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

#define MAX_DEVICES 64
#define MAX_RULES 32
#define PCI_ID_LEN 32

struct fail_rule {
    char func[64];
    int has_mask;
    unsigned long long mask;
    int rc;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_record_fd = -1;
static int g_version;
static int g_ndevices;
static char g_devices[MAX_DEVICES][PCI_ID_LEN];
static int g_current_default;
static int g_nrules;
static struct fail_rule g_rules[MAX_RULES];
static char g_libname[256] = "?";

/* FAKEHIP_PATTERN, FAKEHIP_BLOCK (see the header). */
static int g_pattern;
static char g_sentinel[64];
static char g_block_func[64];
static unsigned long g_block_us;
static char g_block_mark[4096];

/* FAKEHIP_COUNTS: open addressing on (function, rc, flags); keys are claimed with CAS. */
#define COUNT_SLOTS 4096
static char g_counts_path[4096];
static int g_counting;
static unsigned long long g_count_key[COUNT_SLOTS];
static unsigned long long g_count_val[COUNT_SLOTS];
static unsigned long long g_count_dropped;
static const char *const g_count_funcs[] = {
    "hipMalloc",           "hipExtMallocWithFlags", "hipHostMalloc",        "hipHostAlloc",
    "hipMallocHost",       "hipMemAllocHost",       "hipMallocManaged",     "hipHostRegister",
    "hipHostUnregister",   "hipHostGetFlags",       "hipFree",              "hipHostFree",
    "hipMallocAsync",      "hipMallocFromPoolAsync", "hipRuntimeGetVersion", "hipGetDeviceCount",
    "hipGetDevice",        "hipSetDevice",          "hipDeviceGetPCIBusId", "hipGetProcAddress",
    "hipGetDriverEntryPoint", "hipGetDriverEntryPoint_spt", "hipMemCreate", "hipMemRelease",
};
#define COUNT_NFUNCS (sizeof g_count_funcs / sizeof g_count_funcs[0])
static __thread const char *t_count_last;
static __thread unsigned t_count_last_idx;

static void count_call(const char *func, unsigned long long flags, int rc)
{
    unsigned idx = COUNT_NFUNCS, i;
    unsigned long long key, h;

    if (func == t_count_last) {
        idx = t_count_last_idx;
    } else {
        for (i = 0; i < COUNT_NFUNCS; i++)
            if (strcmp(func, g_count_funcs[i]) == 0) {
                idx = i;
                break;
            }
        t_count_last = func;
        t_count_last_idx = idx;
    }
    key = (1ULL << 63) | ((unsigned long long)idx << 48) |
          ((unsigned long long)(unsigned short)rc << 32) | (flags & 0xffffffffULL);
    h = (key * 0x9E3779B97F4A7C15ULL) >> 52; /* 12 bits: COUNT_SLOTS */
    for (i = 0; i < COUNT_SLOTS; i++) {
        unsigned long long *k = &g_count_key[(h + i) % COUNT_SLOTS];
        unsigned long long cur = __atomic_load_n(k, __ATOMIC_ACQUIRE);
        if (cur == 0) {
            unsigned long long expected = 0;
            if (__atomic_compare_exchange_n(k, &expected, key, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                cur = key;
            else
                cur = expected;
        }
        if (cur == key) {
            __atomic_fetch_add(&g_count_val[(h + i) % COUNT_SLOTS], 1, __ATOMIC_RELAXED);
            return;
        }
    }
    __atomic_fetch_add(&g_count_dropped, 1, __ATOMIC_RELAXED);
}

static void counts_reset_in_child(void)
{
    memset(g_count_key, 0, sizeof g_count_key);
    memset(g_count_val, 0, sizeof g_count_val);
    g_count_dropped = 0;
}

__attribute__((destructor)) static void counts_dump(void)
{
    char path[4096 + 32];
    char line[256];
    const char *pp;
    unsigned i;
    int fd;

    if (!g_counting)
        return;
    /* "%p" -> pid */
    pp = strstr(g_counts_path, "%p");
    if (pp != NULL)
        snprintf(path, sizeof path, "%.*s%ld%s", (int)(pp - g_counts_path), g_counts_path,
                 (long)getpid(), pp + 2);
    else
        snprintf(path, sizeof path, "%s", g_counts_path);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "fakehip: cannot write FAKEHIP_COUNTS=%s: %s\n", path, strerror(errno));
        return;
    }
    for (i = 0; i < COUNT_SLOTS; i++) {
        unsigned long long key = __atomic_load_n(&g_count_key[i], __ATOMIC_ACQUIRE);
        unsigned idx;
        int n;
        if (key == 0)
            continue;
        idx = (unsigned)((key >> 48) & 0x7fff);
        n = snprintf(line, sizeof line, "%s rc=%d flags=0x%llx count=%llu\n",
                     idx < COUNT_NFUNCS ? g_count_funcs[idx] : "?",
                     (int)(short)(unsigned short)((key >> 32) & 0xffff), key & 0xffffffffULL,
                     __atomic_load_n(&g_count_val[i], __ATOMIC_RELAXED));
        if (n > 0 && write(fd, line, (size_t)n) < 0)
            break;
    }
    if (g_count_dropped != 0) {
        int n = snprintf(line, sizeof line, "dropped count=%llu\n", g_count_dropped);
        if (n > 0)
            (void)!write(fd, line, (size_t)n);
    }
    close(fd);
}

static void maybe_block(const char *func)
{
    struct timespec ts;
    if (g_block_us == 0 || strcmp(func, g_block_func) != 0)
        return;
    if (g_block_mark[0] != '\0') {
        int fd = open(g_block_mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
    }
    ts.tv_sec = (time_t)(g_block_us / 1000000);
    ts.tv_nsec = (long)(g_block_us % 1000000) * 1000;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* FAKEHIP_PATTERN=mod4: the answer for an allocation call of this size and flags. */
static int pattern_answer(const char *func, unsigned long long n, unsigned flags)
{
    switch (n % 4) {
    case 1:
        return hipErrorOutOfMemory;
    case 2:
        return hipErrorInvalidValue;
    case 3:
        if ((strcmp(func, "hipHostMalloc") == 0 && (flags & HOST_MALLOC_NONCOHERENT) != 0) ||
            (strcmp(func, "hipExtMallocWithFlags") == 0 && flags == 0))
            return hipErrorInvalidValue;
        return hipSuccess;
    default:
        return hipSuccess;
    }
}

static __thread int t_current = -1; /* -1: not yet initialised from the env */

static const char *base_name(const char *path)
{
    const char *slash;
    if (path == NULL || path[0] == '\0')
        return NULL;
    slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void init_devices(void)
{
    const char *env = getenv("FAKEHIP_DEVICES");
    const char *p;

    if (env == NULL)
        env = "0000:03:00.0";
    g_ndevices = 0;
    p = env;
    while (*p != '\0' && g_ndevices < MAX_DEVICES) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0) {
            if (len >= PCI_ID_LEN)
                len = PCI_ID_LEN - 1;
            memcpy(g_devices[g_ndevices], p, len);
            g_devices[g_ndevices][len] = '\0';
            g_ndevices++;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
}

static int parse_ull(const char *s, const char *end, unsigned long long *out)
{
    char buf[64];
    char *stop;
    size_t len = (size_t)(end - s);
    int base = 10;

    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (len > 2 && buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'))
        base = 16;
    errno = 0;
    *out = strtoull(buf, &stop, base);
    if (errno != 0 || *stop != '\0' || buf[0] == '-')
        return -1;
    return 0;
}

static void init_rules(void)
{
    const char *env = getenv("FAKEHIP_FAIL");
    const char *p = env;

    g_nrules = 0;
    if (env == NULL)
        return;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        const char *stop = end ? end : p + strlen(p);
        const char *colon = NULL, *at = NULL, *q;
        struct fail_rule r;
        unsigned long long v;
        int ok = 1;

        memset(&r, 0, sizeof r);
        for (q = p; q < stop; q++) {
            if (*q == '@' && at == NULL && colon == NULL)
                at = q;
            else if (*q == ':')
                colon = q;
        }
        if (stop == p) {
            /* empty item: skip silently */
            ok = -1;
        } else if (colon == NULL) {
            ok = 0;
        } else {
            const char *fend = at ? at : colon;
            size_t flen = (size_t)(fend - p);
            if (flen == 0 || flen >= sizeof r.func)
                ok = 0;
            else {
                memcpy(r.func, p, flen);
                r.func[flen] = '\0';
            }
            if (ok && at != NULL) {
                if (parse_ull(at + 1, colon, &v) != 0)
                    ok = 0;
                r.has_mask = 1;
                r.mask = v;
            }
            if (ok) {
                const char *rs = colon + 1;
                int neg = (*rs == '-');
                if (parse_ull(rs + neg, stop, &v) != 0)
                    ok = 0;
                r.rc = neg ? -(int)v : (int)v;
            }
        }
        if (ok == 1 && g_nrules < MAX_RULES)
            g_rules[g_nrules++] = r;
        else if (ok == 0)
            fprintf(stderr, "fakehip: ignoring malformed FAKEHIP_FAIL rule '%.*s'\n",
                    (int)(stop - p), p);
        if (end == NULL)
            break;
        p = end + 1;
    }
}

static void fake_init_once(void)
{
    const char *rec = getenv("FAKEHIP_RECORD");
    const char *ver = getenv("FAKEHIP_VERSION");
    const char *cur = getenv("FAKEHIP_CURRENT");
    Dl_info info;

    if (rec != NULL && rec[0] != '\0') {
        g_record_fd = open(rec, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (g_record_fd < 0)
            fprintf(stderr, "fakehip: cannot open FAKEHIP_RECORD=%s: %s\n", rec,
                    strerror(errno));
    }

#if FAKEHIP_MAJOR == 5
    g_version = 50221153;
#elif FAKEHIP_MAJOR == 6
    g_version = 60443483;
#else
    g_version = 70253211; /* Debian's 7.2.4 */
#endif
    if (ver != NULL && ver[0] != '\0')
        g_version = (int)strtol(ver, NULL, 0);

    g_current_default = 0;
    if (cur != NULL && cur[0] != '\0')
        g_current_default = (int)strtol(cur, NULL, 10);

    init_devices();
    init_rules();

    {
        const char *counts = getenv("FAKEHIP_COUNTS");
        const char *pattern = getenv("FAKEHIP_PATTERN");
        const char *block = getenv("FAKEHIP_BLOCK");
        const char *mark = getenv("FAKEHIP_BLOCK_MARK");
        if (counts != NULL && counts[0] != '\0' && strlen(counts) < sizeof g_counts_path) {
            snprintf(g_counts_path, sizeof g_counts_path, "%s", counts);
            pthread_atfork(NULL, NULL, counts_reset_in_child);
            g_counting = 1;
        }
        if (pattern != NULL && pattern[0] != '\0') {
            if (strcmp(pattern, "mod4") == 0)
                g_pattern = 1;
            else
                fprintf(stderr, "fakehip: ignoring unknown FAKEHIP_PATTERN=%s\n", pattern);
        }
        if (block != NULL && block[0] != '\0') {
            const char *colon = strrchr(block, ':');
            if (colon != NULL && (size_t)(colon - block) < sizeof g_block_func) {
                memcpy(g_block_func, block, (size_t)(colon - block));
                g_block_func[colon - block] = '\0';
                g_block_us = strtoul(colon + 1, NULL, 10);
            } else {
                fprintf(stderr, "fakehip: ignoring malformed FAKEHIP_BLOCK=%s\n", block);
            }
        }
        if (mark != NULL)
            snprintf(g_block_mark, sizeof g_block_mark, "%s", mark);
    }

    memset(&info, 0, sizeof info);
    if (dladdr((void *)&fake_init_once, &info) != 0 && info.dli_fname != NULL) {
        const char *b = base_name(info.dli_fname);
        if (b != NULL)
            snprintf(g_libname, sizeof g_libname, "%s", b);
    }
}

static void fake_init(void)
{
    pthread_once(&g_once, fake_init_once);
}

static int current_device(void)
{
    if (t_current < 0)
        t_current = g_current_default;
    return t_current;
}

/* ------------------------------------------------------------------------ */
/* Recording                                                                */
/* ------------------------------------------------------------------------ */

#define NEST_BUF 16384
static __thread int t_depth;
static __thread size_t t_len;
static __thread char t_buf[NEST_BUF];

static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(g_record_fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

static void copy_str(char *out, size_t outlen, const char *src)
{
    size_t n = strlen(src);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, src, n);
    out[n] = '\0';
}

static void caller_name(void *ra, char *out, size_t outlen)
{
    Dl_info info;
    const char *b = NULL;

    memset(&info, 0, sizeof info);
    if (ra != NULL && dladdr(ra, &info) != 0)
        b = base_name(info.dli_fname);
    if (b == NULL && ra != NULL && info.dli_fbase != NULL) {
        /* glibc reports the main program with an empty name. */
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = '\0';
            b = base_name(exe);
            if (b != NULL) {
                copy_str(out, outlen, b);
                return;
            }
        }
    }
    copy_str(out, outlen, b ? b : "?");
}

/* Begin a call: returns the position at which its line will be inserted. */
static size_t rec_enter(void)
{
    fake_init();
    t_depth++;
    return t_len;
}

static void rec_leave(size_t start, const char *func, unsigned long long size,
                      unsigned long long flags, int rc, void *ra, const char *symbol)
{
    char line[1024];
    char caller[256];
    int n;

    t_depth--;
    if (g_counting)
        count_call(func, flags, rc);
    if (g_record_fd < 0) {
        if (t_depth == 0)
            t_len = 0;
        return;
    }
    caller_name(ra, caller, sizeof caller);
    if (symbol != NULL)
        n = snprintf(line, sizeof line,
                     "%s size=%llu flags=0x%llx rc=%d caller=%s lib=%s symbol=%s\n", func,
                     size, flags, rc, caller, g_libname, symbol);
    else
        n = snprintf(line, sizeof line, "%s size=%llu flags=0x%llx rc=%d caller=%s lib=%s\n",
                     func, size, flags, rc, caller, g_libname);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }

    if (start > t_len)
        start = t_len;
    if (t_len + (size_t)n <= NEST_BUF) {
        /* Insert our line before the lines of the calls we made. */
        memmove(t_buf + start + n, t_buf + start, t_len - start);
        memcpy(t_buf + start, line, (size_t)n);
        t_len += (size_t)n;
    } else {
        /* Nesting buffer full: flush everything now (order degrades only). */
        write_all(t_buf, t_len);
        t_len = 0;
        write_all(line, (size_t)n);
    }
    if (t_depth == 0 && t_len > 0) {
        write_all(t_buf, t_len);
        t_len = 0;
    }
}

#define CALL_BEGIN()                                                                      \
    void *ra__ = __builtin_return_address(0);                                             \
    size_t rs__ = rec_enter()
#define CALL_END(func, size, flags, rc) rec_leave(rs__, func, (size), (flags), (rc), ra__, NULL)

/* ------------------------------------------------------------------------ */
/* Failure injection                                                        */
/* ------------------------------------------------------------------------ */

static int is_alloc_func(const char *func)
{
    static const char *const names[] = {
        "hipMalloc",       "hipExtMallocWithFlags", "hipHostMalloc",  "hipHostAlloc",
        "hipMallocHost",   "hipMemAllocHost",       "hipMallocManaged", "hipHostRegister",
        "hipMallocAsync",  "hipMallocFromPoolAsync", "hipMemCreate",
    };
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(func, names[i]) == 0)
            return 1;
    return 0;
}

/* Returns 1 and sets *rc when a FAKEHIP_FAIL rule matches this call. */
static int injected_failure(const char *func, unsigned long long flags, int *rc)
{
    int i;
    for (i = 0; i < g_nrules; i++) {
        const struct fail_rule *r = &g_rules[i];
        if (strcmp(r->func, "*") == 0) {
            if (!is_alloc_func(func))
                continue;
        } else if (strcmp(r->func, func) != 0) {
            continue;
        }
        if (r->has_mask && (flags & r->mask) == 0)
            continue;
        *rc = r->rc;
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Live allocation table                                                    */
/* ------------------------------------------------------------------------ */

enum alloc_kind { KIND_DEVICE = 1, KIND_HOST = 2, KIND_REGISTERED = 3 };

struct alloc_entry {
    void *ptr;
    unsigned flags;
    int kind;
};

static pthread_mutex_t g_table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc_entry *g_table;
static size_t g_table_len, g_table_cap;

static int table_add(void *ptr, unsigned flags, int kind)
{
    int ok = 1;
    pthread_mutex_lock(&g_table_lock);
    if (g_table_len == g_table_cap) {
        size_t cap = g_table_cap ? g_table_cap * 2 : 64;
        struct alloc_entry *t = realloc(g_table, cap * sizeof *t);
        if (t == NULL)
            ok = 0;
        else {
            g_table = t;
            g_table_cap = cap;
        }
    }
    if (ok) {
        g_table[g_table_len].ptr = ptr;
        g_table[g_table_len].flags = flags;
        g_table[g_table_len].kind = kind;
        g_table_len++;
    }
    pthread_mutex_unlock(&g_table_lock);
    return ok;
}

/* Finds ptr; if remove, deletes it. Returns 1 if found. */
static int table_find(const void *ptr, int remove, unsigned *flags, int *kind)
{
    size_t i;
    int found = 0;
    pthread_mutex_lock(&g_table_lock);
    for (i = g_table_len; i-- > 0;) {
        if (g_table[i].ptr == ptr) {
            found = 1;
            if (flags)
                *flags = g_table[i].flags;
            if (kind)
                *kind = g_table[i].kind;
            if (remove)
                g_table[i] = g_table[--g_table_len];
            break;
        }
    }
    pthread_mutex_unlock(&g_table_lock);
    return found;
}

/* ------------------------------------------------------------------------ */
/* Internal implementations (static: never reached through the PLT)         */
/* ------------------------------------------------------------------------ */

static int do_alloc(const char *func, void **p, size_t n, unsigned flags, int kind)
{
    void *mem;
    int rc;

    maybe_block(func);
    if (g_pattern) {
        rc = pattern_answer(func, n, flags);
        if (p != NULL)
            *p = rc == hipSuccess ? (void *)g_sentinel : NULL;
        return rc;
    }
    if (injected_failure(func, flags, &rc)) {
        if (p != NULL)
            *p = NULL;
        return rc;
    }
    if (p == NULL)
        return hipErrorInvalidValue;
    *p = NULL;
    if (strcmp(func, "hipExtMallocWithFlags") == 0) {
        if (flags > 4)
            return hipErrorInvalidValue;
        if (flags == 2 && n != 8)
            return hipErrorInvalidValue;
    }
    if (strcmp(func, "hipHostMalloc") == 0 &&
        (flags & (HOST_MALLOC_COHERENT | HOST_MALLOC_NONCOHERENT)) ==
            (HOST_MALLOC_COHERENT | HOST_MALLOC_NONCOHERENT))
        return hipErrorInvalidValue;
    if (n > MAX_ALLOC_SIZE)
        return hipErrorOutOfMemory;
    if (n == 0)
        return hipSuccess;
    mem = calloc(1, n);
    if (mem == NULL)
        return hipErrorOutOfMemory;
    if (!table_add(mem, flags, kind)) {
        free(mem);
        return hipErrorOutOfMemory;
    }
    *p = mem;
    return hipSuccess;
}

static int do_free(const char *func, void *ptr)
{
    int rc, kind = 0;
    maybe_block(func);
    if (injected_failure(func, 0, &rc))
        return rc;
    if (ptr == NULL || (g_pattern && ptr == (void *)g_sentinel))
        return hipSuccess;
    if (!table_find(ptr, 0, NULL, &kind) || kind == KIND_REGISTERED)
        return hipErrorInvalidValue;
    table_find(ptr, 1, NULL, NULL);
    free(ptr);
    return hipSuccess;
}

static int do_host_register(void *ptr, size_t n, unsigned flags)
{
    int rc;
    maybe_block("hipHostRegister");
    if (g_pattern)
        return pattern_answer("hipHostRegister", n, flags);
    if (injected_failure("hipHostRegister", flags, &rc))
        return rc;
    if (ptr == NULL || n == 0)
        return hipErrorInvalidValue;
    if (table_find(ptr, 0, NULL, NULL))
        return hipErrorInvalidValue; /* already registered / runtime-owned */
    if (!table_add(ptr, flags, KIND_REGISTERED))
        return hipErrorOutOfMemory;
    return hipSuccess;
}

static int do_host_unregister(void *ptr)
{
    int rc, kind = 0;
    if (injected_failure("hipHostUnregister", 0, &rc))
        return rc;
    if (ptr == NULL)
        return hipErrorInvalidValue;
    if (!table_find(ptr, 0, NULL, &kind) || kind != KIND_REGISTERED)
        return hipErrorInvalidValue;
    table_find(ptr, 1, NULL, NULL);
    return hipSuccess;
}

static int do_host_get_flags(unsigned *flags_out, void *ptr)
{
    int rc, kind = 0;
    unsigned flags = 0;
    if (injected_failure("hipHostGetFlags", 0, &rc))
        return rc;
    if (flags_out == NULL || ptr == NULL)
        return hipErrorInvalidValue;
    if (!table_find(ptr, 0, &flags, &kind) || kind == KIND_DEVICE)
        return hipErrorInvalidValue;
    *flags_out = flags;
    return hipSuccess;
}

static int check_failure(const char *func, int *rc)
{
    maybe_block(func);
    return injected_failure(func, 0, rc);
}

/* ------------------------------------------------------------------------ */
/* Exported allocation API (version node hip_4.2 / hip_5.1)                 */
/* ------------------------------------------------------------------------ */

/* hipLaunchKernel (hip_4.2): launches nothing. Returns a digest of every argument (the
 * dim3s travel in registers, sharedMem and stream on the stack), so a caller can check that
 * an interposer passed each one on unchanged; 0 when stream is (void *)1, for loops that
 * count failures. Not recorded (it is on the benchmark's hot path). */
typedef struct { unsigned x, y, z; } fakehip_dim3;
EXPORT int hipLaunchKernel(const void *f, fakehip_dim3 grid, fakehip_dim3 block, void **args,
                           size_t shared, void *stream)
{
    if (stream == (void *)1)
        return 0;
    unsigned long long d = (unsigned long long)(uintptr_t)f;
    d = d * 31 + grid.x; d = d * 31 + grid.y; d = d * 31 + grid.z;
    d = d * 31 + block.x; d = d * 31 + block.y; d = d * 31 + block.z;
    d = d * 31 + (uintptr_t)args; d = d * 31 + shared; d = d * 31 + (uintptr_t)stream;
    return (int)(d & 0x7fffffff);
}

/* __hipRegisterFunction: a fat binary's constructor registers each kernel's host stub and
 * device name. Keeps nothing (the benchmark registers 100,000 at once); not recorded. */
EXPORT void __hipRegisterFunction(void **modules, const void *stub, char *device_function,
                                  const char *name, unsigned thread_limit, void *tid,
                                  void *bid, void *block_dim, void *grid_dim, int *wsize)
{
    (void)modules, (void)stub, (void)device_function, (void)name, (void)thread_limit;
    (void)tid, (void)bid, (void)block_dim, (void)grid_dim, (void)wsize;
}

EXPORT int hipMalloc(void **p, size_t n)
{
    CALL_BEGIN();
    int rc = do_alloc("hipMalloc", p, n, 0, KIND_DEVICE);
    CALL_END("hipMalloc", n, 0, rc);
    return rc;
}

EXPORT int hipExtMallocWithFlags(void **p, size_t n, unsigned flags)
{
    CALL_BEGIN();
    int rc = do_alloc("hipExtMallocWithFlags", p, n, flags, KIND_DEVICE);
    CALL_END("hipExtMallocWithFlags", n, flags, rc);
    return rc;
}

EXPORT int hipHostMalloc(void **p, size_t n, unsigned flags)
{
    CALL_BEGIN();
    int rc = do_alloc("hipHostMalloc", p, n, flags, KIND_HOST);
    CALL_END("hipHostMalloc", n, flags, rc);
    return rc;
}

EXPORT int hipHostAlloc(void **p, size_t n, unsigned flags)
{
    CALL_BEGIN();
    int rc = do_alloc("hipHostAlloc", p, n, flags, KIND_HOST);
    CALL_END("hipHostAlloc", n, flags, rc);
    return rc;
}

EXPORT int hipMallocHost(void **p, size_t n)
{
    CALL_BEGIN();
    int rc = do_alloc("hipMallocHost", p, n, 0, KIND_HOST);
    CALL_END("hipMallocHost", n, 0, rc);
    return rc;
}

EXPORT int hipMemAllocHost(void **p, size_t n)
{
    CALL_BEGIN();
    int rc;
#if FAKEHIP_MAJOR < 6
    /* Pre-6.1 shape: forward through the exported (interposable) symbol, so
     * the call goes through hipHostMalloc@plt and a preloaded hook sees it. */
    if (!injected_failure("hipMemAllocHost", 0, &rc))
        rc = hipHostMalloc(p, n, 0);
    else if (p != NULL)
        *p = NULL;
#else
    rc = do_alloc("hipMemAllocHost", p, n, 0, KIND_HOST);
#endif
    CALL_END("hipMemAllocHost", n, 0, rc);
    return rc;
}

EXPORT int hipMallocManaged(void **p, size_t n, unsigned flags)
{
    CALL_BEGIN();
    int rc = do_alloc("hipMallocManaged", p, n, flags, KIND_DEVICE);
    CALL_END("hipMallocManaged", n, flags, rc);
    return rc;
}

EXPORT int hipHostRegister(void *ptr, size_t n, unsigned flags)
{
    CALL_BEGIN();
    int rc = do_host_register(ptr, n, flags);
    CALL_END("hipHostRegister", n, flags, rc);
    return rc;
}

EXPORT int hipHostUnregister(void *ptr)
{
    CALL_BEGIN();
    int rc = do_host_unregister(ptr);
    CALL_END("hipHostUnregister", 0, 0, rc);
    return rc;
}

EXPORT int hipHostGetFlags(unsigned *flags, void *ptr)
{
    CALL_BEGIN();
    int rc = do_host_get_flags(flags, ptr);
    CALL_END("hipHostGetFlags", 0, 0, rc);
    return rc;
}

EXPORT int hipFree(void *ptr)
{
    CALL_BEGIN();
    int rc = do_free("hipFree", ptr);
    CALL_END("hipFree", 0, 0, rc);
    return rc;
}

/* hipDeviceSynchronize, hipStreamSynchronize (hip_4.2): nothing to wait for; answer 0 at
 * once. Not recorded (they are on the benchmark's hot path: the watchdog's marks). */
EXPORT int hipDeviceSynchronize(void)
{
    return 0;
}

EXPORT int hipStreamSynchronize(void *stream)
{
    (void)stream;
    return 0;
}

EXPORT int hipHostFree(void *ptr)
{
    CALL_BEGIN();
    int rc = do_free("hipHostFree", ptr);
    CALL_END("hipHostFree", 0, 0, rc);
    return rc;
}

EXPORT int hipMallocAsync(void **p, size_t n, void *stream)
{
    CALL_BEGIN();
    int rc;
    (void)stream;
    rc = do_alloc("hipMallocAsync", p, n, 0, KIND_DEVICE);
    CALL_END("hipMallocAsync", n, 0, rc);
    return rc;
}

EXPORT int hipMallocFromPoolAsync(void **p, size_t n, void *pool, void *stream)
{
    CALL_BEGIN();
    int rc;
    (void)pool;
    (void)stream;
    rc = do_alloc("hipMallocFromPoolAsync", p, n, 0, KIND_DEVICE);
    CALL_END("hipMallocFromPoolAsync", n, 0, rc);
    return rc;
}

/* hipMemCreate (hip_5.1): like the real runtimes' checks on hipMemAllocationProp
 * { int type; int requestedHandleType; { int type; int id; } location; ... }: handle, size,
 * flags 0, type Pinned (1); location Device (1) everywhere, Host (2) only in the .so.7 build
 * (7.2.4 accepts Host, not HostNuma/HostNumaCurrent). The record's flags field holds the
 * location type. The handle is the allocation's address. */
struct fake_mem_prop {
    int type;
    int handle_type;
    int location_type;
    int location_id;
};

EXPORT int hipMemCreate(unsigned long long *handle, size_t n, const void *prop_arg,
                        unsigned long long flags)
{
    CALL_BEGIN();
    const struct fake_mem_prop *prop = prop_arg;
    unsigned loc = prop != NULL ? (unsigned)prop->location_type : 0;
    int rc;
    if (handle == NULL || n == 0 || flags != 0 || prop == NULL || prop->type != 1)
        rc = hipErrorInvalidValue;
    else if (!(loc == 1 || (FAKEHIP_MAJOR >= 7 && loc == 2)))
        rc = hipErrorInvalidValue;
    else
        rc = do_alloc("hipMemCreate", (void **)handle, n, loc, KIND_DEVICE);
    CALL_END("hipMemCreate", n, loc, rc);
    return rc;
}

EXPORT int hipMemRelease(unsigned long long handle)
{
    CALL_BEGIN();
    int rc = do_free("hipMemRelease", (void *)(uintptr_t)handle);
    CALL_END("hipMemRelease", 0, 0, rc);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Exported queries                                                         */
/* ------------------------------------------------------------------------ */

EXPORT int hipRuntimeGetVersion(int *v)
{
    CALL_BEGIN();
    int rc;
    if (!check_failure("hipRuntimeGetVersion", &rc)) {
        if (v == NULL)
            rc = hipErrorInvalidValue;
        else {
            *v = g_version;
            rc = hipSuccess;
        }
    }
    CALL_END("hipRuntimeGetVersion", 0, 0, rc);
    return rc;
}

EXPORT int hipGetDeviceCount(int *count)
{
    CALL_BEGIN();
    int rc;
    if (!check_failure("hipGetDeviceCount", &rc)) {
        if (count == NULL)
            rc = hipErrorInvalidValue;
        else {
            *count = g_ndevices;
            rc = g_ndevices == 0 ? hipErrorNoDevice : hipSuccess;
        }
    }
    CALL_END("hipGetDeviceCount", 0, 0, rc);
    return rc;
}

EXPORT int hipGetDevice(int *dev)
{
    CALL_BEGIN();
    int rc;
    if (!check_failure("hipGetDevice", &rc)) {
        if (dev == NULL)
            rc = hipErrorInvalidValue;
        else if (g_ndevices == 0)
            rc = hipErrorNoDevice;
        else {
            *dev = current_device();
            rc = hipSuccess;
        }
    }
    CALL_END("hipGetDevice", 0, 0, rc);
    return rc;
}

EXPORT int hipSetDevice(int dev)
{
    CALL_BEGIN();
    int rc;
    if (!check_failure("hipSetDevice", &rc)) {
        if (dev < 0 || dev >= g_ndevices)
            rc = hipErrorInvalidDevice;
        else {
            t_current = dev;
            rc = hipSuccess;
        }
    }
    CALL_END("hipSetDevice", (unsigned long long)(long long)dev, 0, rc);
    return rc;
}

EXPORT int hipDeviceGetPCIBusId(char *buf, int len, int dev)
{
    CALL_BEGIN();
    int rc;
    if (!check_failure("hipDeviceGetPCIBusId", &rc)) {
        if (buf == NULL || len <= 12)
            rc = hipErrorInvalidValue;
        else if (dev < 0 || dev >= g_ndevices)
            rc = hipErrorInvalidDevice;
        else {
            snprintf(buf, (size_t)len, "%s", g_devices[dev]);
            rc = hipSuccess;
        }
    }
    CALL_END("hipDeviceGetPCIBusId", 0, 0, rc);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* hipGetProcAddress (hip_6.1; only in the .so.6 and .so.7 builds)          */
/* ------------------------------------------------------------------------ */

#if FAKEHIP_MAJOR >= 6
static pthread_once_t g_self_once = PTHREAD_ONCE_INIT;
static void *g_self_handle;

static void self_handle_once(void)
{
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (dladdr((void *)&self_handle_once, &info) != 0 && info.dli_fname != NULL)
        g_self_handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

/* Like ROCm/clr: dlsym on the runtime's own handle, so the answer is this
 * library's definition even when another object (a preloaded hook) defines
 * the same name. Unknown names: *pfn = NULL, *symbolStatus =
 * HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (1), return hipErrorInvalidValue, as
 * clr's hipGetProcAddress does. */
static int do_get_proc_address(const char *symbol, void **pfn, int *status)
{
    int rc;
    void *f;
    if (check_failure("hipGetProcAddress", &rc))
        return rc;
    if (symbol == NULL || symbol[0] == '\0' || pfn == NULL)
        return hipErrorInvalidValue;
    pthread_once(&g_self_once, self_handle_once);
    if (g_self_handle == NULL)
        return hipErrorInvalidValue;
    f = dlsym(g_self_handle, symbol);
    *pfn = f;
    if (f == NULL) {
        if (status != NULL)
            *status = 1;
        return hipErrorInvalidValue;
    }
    if (status != NULL)
        *status = 0;
    return hipSuccess;
}

EXPORT int hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
                             int *symbolStatus)
{
    CALL_BEGIN();
    int rc;
    (void)hipVersion;
    rc = do_get_proc_address(symbol, pfn, symbolStatus);
    rec_leave(rs__, "hipGetProcAddress", 0, (unsigned long long)flags, rc, ra__,
              symbol ? symbol : "(null)");
    return rc;
}
#endif

/* ------------------------------------------------------------------------ */
/* hipGetDriverEntryPoint (hip_7.1; only in the .so.7 build)                */
/* ------------------------------------------------------------------------ */

#if FAKEHIP_MAJOR >= 7
/* Like clr's hipGetDriverEntryPoint_common: flags must be hipEnableDefault (0),
 * hipEnableLegacyStream (1) or hipEnablePerThreadDefaultStream (2); with 2, NAME_spt is
 * looked up first, then NAME; dlsym on the runtime's own handle. Not found: *pfn = NULL,
 * *status = hipDriverEntryPointSymbolNotFound (1), hipErrorInvalidValue. */
static int do_get_driver_entry_point(const char *func, const char *symbol, void **pfn,
                                     unsigned long long flags, int *status)
{
    char spt[256];
    void *f = NULL;
    int rc;
    if (check_failure(func, &rc))
        return rc;
    if (symbol == NULL || symbol[0] == '\0' || pfn == NULL || flags > 2)
        return hipErrorInvalidValue;
    pthread_once(&g_self_once, self_handle_once);
    if (g_self_handle == NULL)
        return hipErrorInvalidValue;
    if (flags == 2 && snprintf(spt, sizeof spt, "%s_spt", symbol) < (int)sizeof spt)
        f = dlsym(g_self_handle, spt);
    if (f == NULL)
        f = dlsym(g_self_handle, symbol);
    *pfn = f;
    if (f == NULL) {
        if (status != NULL)
            *status = 1;
        return hipErrorInvalidValue;
    }
    if (status != NULL)
        *status = 0;
    return hipSuccess;
}

EXPORT int hipGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags,
                                  int *status)
{
    CALL_BEGIN();
    int rc = do_get_driver_entry_point("hipGetDriverEntryPoint", symbol, pfn, flags, status);
    rec_leave(rs__, "hipGetDriverEntryPoint", 0, flags, rc, ra__, symbol ? symbol : "(null)");
    return rc;
}

/* The per-thread-default-stream spelling: flags 0 means per-thread here. */
EXPORT int hipGetDriverEntryPoint_spt(const char *symbol, void **pfn, unsigned long long flags,
                                      int *status)
{
    CALL_BEGIN();
    int rc = do_get_driver_entry_point("hipGetDriverEntryPoint_spt", symbol, pfn,
                                       flags == 0 ? 2 : flags, status);
    rec_leave(rs__, "hipGetDriverEntryPoint_spt", 0, flags, rc, ra__,
              symbol ? symbol : "(null)");
    return rc;
}
#endif
