/*
 * never_worse.c - the loading shapes of issue 22 ("never worse, round two"), one
 * subcommand each, for rmcp-shim/tests/never_worse.rs. Not linked to a HIP runtime: every
 * runtime comes in through dlopen, directly or as a plugin's dependency (tests/c/
 * nw_plugin.c: nw_host, nw_device, nw_count). Each prints what its calls returned; the
 * test runs the same command with and without the shim and compares.
 *
 *   reload N PLUGIN...        N rounds of: for each PLUGIN, dlopen it RTLD_NOW|RTLD_LOCAL,
 *                             nw_host(0) and nw_device, dlclose it (its runtime goes too)
 *   jit SONAME local|global   dlopen the runtime, dlsym(handle, "hipHostMalloc"), and call
 *                             it from code written into an anonymous executable mapping
 *   many DIR N                dlopen DIR/libnw<i>.so for i < N (copies of one plugin: N
 *                             distinct objects), RTLD_LOCAL, and call each one's nw_host(0)
 *   forkdl PLUGIN CYCLE N     the plugin loaded and its runtime initialised (nw_count), no
 *                             hooked call; a thread dlopens and dlcloses CYCLE in a loop
 *                             while the main thread forks N children, each calling
 *                             nw_device under alarm(3)
 *   statswait PLUGIN GO N     nw_host(0) N times, create GO.<pid>, then wait (at most
 *                             20 s) for file GO
 *   frontunload LIB SONAME    dlopen SONAME RTLD_GLOBAL, dlopen LIB RTLD_LOCAL, call its
 *                             hipHostMalloc, dlclose LIB, fork a child that exits 0, exit
 *   twocopies now|lazy|late PLUGIN SECOND
 *                             dlopen PLUGIN (now: RTLD_NOW, lazy and late: RTLD_LAZY;
 *                             RTLD_LOCAL); lazy: call nw_device once; dlopen SECOND
 *                             RTLD_GLOBAL; call nw_device
 *   byname FIRST SONAME       dlopen FIRST RTLD_LOCAL (a bundled copy), then SONAME
 *                             RTLD_LOCAL; dlsym hipHostMalloc and hipHostFree on its handle;
 *                             allocate and free through them
 *   deepbind PLUGIN           dlopen PLUGIN RTLD_NOW|RTLD_LOCAL|RTLD_DEEPBIND, nw_host(0)
 *   deepexit LIB              an exit handler registered first (prints "deepexit body=B",
 *                             B 1 when librmcp_shim_body.so is mapped when it runs), then
 *                             dlopen LIB RTLD_NOW|RTLD_LOCAL|RTLD_DEEPBIND; exit
 *   deepfork LIB CYCLE N      dlopen LIB with RTLD_DEEPBIND; a thread dlopens and dlcloses
 *                             CYCLE in a loop while the main thread forks N children, each
 *                             ending with exit(0) under alarm(3)
 *   localfork PLUGIN          dlopen PLUGIN RTLD_NOW|RTLD_LOCAL, nw_host(0), then fork a
 *                             child that exits 0
 *   cancel pending|race PLUGIN
 *                             a thread's nw_host(0) is the process's first hooked call;
 *                             pending: the thread is cancelled before it makes it (the
 *                             cancellation is acted on at the first cancellation point);
 *                             race: cancelled a few microseconds after it starts it
 * Exit status: 0 when the program ran (what the calls returned is printed), 3 when a
 * dlopen/dlsym it needs fails, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*host_fn)(unsigned, int *);
typedef int (*device_fn)(int *);
typedef int (*count_fn)(void);
typedef int (*alloc3_fn)(void **, size_t, unsigned);
typedef int (*free_fn)(void *);

static void *open_or_die(const char *path, int mode)
{
    void *h = dlopen(path, mode);
    if (h == NULL) {
        printf("dlopen failed: %s\n", dlerror());
        fflush(stdout);
        exit(3);
    }
    return h;
}

static void *sym_or_die(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (p == NULL) {
        printf("dlsym %s failed: %s\n", name, dlerror());
        fflush(stdout);
        exit(3);
    }
    return p;
}

/* How many libamdhip64 files are mapped. */
static int runtimes_mapped(void)
{
    char line[4096], seen[8][4096];
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (path == NULL || strstr(path, "libamdhip64") == NULL)
            continue;
        path[strcspn(path, "\n")] = 0;
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= strcmp(seen[i], path) == 0;
        if (!dup && n < 8)
            snprintf(seen[n++], sizeof seen[0], "%s", path);
    }
    fclose(f);
    return n;
}

static int reload(int rounds, int nplugins, char **plugins)
{
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nplugins; i++) {
            void *h = open_or_die(plugins[i], RTLD_NOW | RTLD_LOCAL);
            int hfree, dfree;
            int hrc = ((host_fn)sym_or_die(h, "nw_host"))(0, &hfree);
            int drc = ((device_fn)sym_or_die(h, "nw_device"))(&dfree);
            dlclose(h);
            printf("round %d plugin %d host rc=%d free=%d device rc=%d free=%d mapped_after=%d\n",
                   r, i, hrc, hfree, drc, dfree, runtimes_mapped());
            fflush(stdout);
        }
    return 0;
}

static int jit(const char *soname, const char *scope)
{
    int mode = RTLD_NOW | (strcmp(scope, "global") == 0 ? RTLD_GLOBAL : RTLD_LOCAL);
    void *h = open_or_die(soname, mode);
    void *f = sym_or_die(h, "hipHostMalloc");
    free_fn hfree = (free_fn)sym_or_die(h, "hipHostFree");
    /* sub rsp,8; mov rax,imm64; call rax; add rsp,8; ret: the call's return address is in
     * the anonymous mapping, as it is for a JIT's call. */
    unsigned char code[] = {0x48, 0x83, 0xEC, 0x08, 0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0,
                            0xFF, 0xD0, 0x48, 0x83, 0xC4, 0x08, 0xC3};
    memcpy(code + 6, &f, sizeof f);
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        printf("mmap failed\n");
        return 3;
    }
    memcpy(page, code, sizeof code);
    __builtin___clear_cache((char *)page, (char *)page + sizeof code);
    void *p = NULL;
    int rc = ((alloc3_fn)page)(&p, 4096, 0);
    int frc = rc == 0 ? hfree(p) : -1;
    printf("jit rc=%d ptr=%d free=%d\n", rc, p != NULL, frc);
    return 0;
}

static int many(const char *dir, int n)
{
    int ok = 0, failed = 0, first_failed = -1, last_rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/libnw%d.so", dir, i);
        void *h = open_or_die(path, RTLD_NOW | RTLD_LOCAL);
        int frc, rc = ((host_fn)sym_or_die(h, "nw_host"))(0, &frc);
        if (rc == 0 && frc == 0) {
            ok++;
        } else {
            failed++;
            last_rc = rc;
            if (first_failed < 0)
                first_failed = i;
        }
    }
    printf("many objects=%d ok=%d failed=%d first_failed=%d rc=%d\n", n, ok, failed,
           first_failed, last_rc);
    return 0;
}

static volatile int cycling = 1;
static const char *cycle_path;

static void *cycle(void *arg)
{
    (void)arg;
    while (cycling) {
        void *h = dlopen(cycle_path, RTLD_NOW | RTLD_LOCAL);
        if (h != NULL)
            dlclose(h);
    }
    return NULL;
}

/* Waits for the children of forkdl/deepfork and prints how each ended, in one line on
 * stdout (what the tests compare) and the unexpected endings on stderr. */
static void tally(const char *what, const pid_t *kids, int n)
{
    int ok = 0, hung = 0, failed = 0, signalled = 0;
    for (int i = 0; i < n; i++) {
        int st;
        if (kids[i] < 0) {
            failed++;
            fprintf(stderr, "%s: fork failed\n", what);
            continue;
        }
        waitpid(kids[i], &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            ok++;
        } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) {
            hung++;
        } else if (WIFSIGNALED(st)) {
            signalled++;
            fprintf(stderr, "%s: a child was killed by signal %d\n", what, WTERMSIG(st));
        } else {
            failed++;
            fprintf(stderr, "%s: a child exited with status %d\n", what, WEXITSTATUS(st));
        }
    }
    printf("%s children=%d ok=%d hung=%d signalled=%d failed=%d\n", what, n, ok, hung,
           signalled, failed);
}

static int forkdl(const char *plugin, const char *cyc, int n)
{
    void *h = open_or_die(plugin, RTLD_NOW | RTLD_LOCAL);
    device_fn device = (device_fn)sym_or_die(h, "nw_device");
    ((count_fn)sym_or_die(h, "nw_count"))();
    cycle_path = cyc;
    pthread_t t;
    pthread_create(&t, NULL, cycle, NULL);
    pid_t kids[1024];
    if (n > 1024)
        n = 1024;
    for (int i = 0; i < n; i++) {
        struct timespec ts = {0, 200000 + (i % 7) * 37000};
        nanosleep(&ts, NULL);
        kids[i] = fork();
        if (kids[i] == 0) {
            alarm(3);
            int frc, rc = device(&frc);
            _exit(rc == 0 && frc == 0 ? 0 : 1);
        }
    }
    cycling = 0;
    pthread_join(t, NULL);
    tally("forkdl", kids, n);
    return 0;
}

static int statswait(const char *plugin, const char *go, int n)
{
    void *h = open_or_die(plugin, RTLD_NOW | RTLD_LOCAL);
    host_fn host = (host_fn)sym_or_die(h, "nw_host");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int frc;
        bad += host(0, &frc) != 0;
    }
    char ready[4096];
    snprintf(ready, sizeof ready, "%s.%ld", go, (long)getpid());
    int fd = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    for (int i = 0; i < 200000; i++) {
        struct stat st;
        if (stat(go, &st) == 0)
            break;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    printf("statswait calls=%d failed=%d\n", n, bad);
    return 0;
}

static int frontunload(const char *lib, const char *soname)
{
    open_or_die(soname, RTLD_NOW | RTLD_GLOBAL);
    void *h = open_or_die(lib, RTLD_NOW | RTLD_LOCAL);
    alloc3_fn f = (alloc3_fn)sym_or_die(h, "hipHostMalloc");
    void *p = NULL;
    int rc = f(&p, 4096, 0);
    dlclose(h);
    fflush(stdout);
    pid_t kid = fork();
    if (kid == 0)
        _exit(0);
    int st = -1;
    waitpid(kid, &st, 0);
    printf("frontunload rc=%d child_exited=%d child_status=%d child_signal=%d\n", rc,
           WIFEXITED(st), WIFEXITED(st) ? WEXITSTATUS(st) : -1,
           WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return 0;
}

static int twocopies(const char *mode, const char *plugin, const char *second)
{
    int lazy = strcmp(mode, "lazy") == 0;
    int now = strcmp(mode, "now") == 0;
    void *h = open_or_die(plugin, (now ? RTLD_NOW : RTLD_LAZY) | RTLD_LOCAL);
    device_fn device = (device_fn)sym_or_die(h, "nw_device");
    int frc, rc;
    if (lazy) {
        rc = device(&frc);
        printf("before device rc=%d free=%d\n", rc, frc);
    }
    open_or_die(second, RTLD_NOW | RTLD_GLOBAL);
    rc = device(&frc);
    printf("after device rc=%d free=%d\n", rc, frc);
    return 0;
}

static int byname(const char *first, const char *soname)
{
    open_or_die(first, RTLD_NOW | RTLD_LOCAL);
    void *h = open_or_die(soname, RTLD_NOW | RTLD_LOCAL);
    alloc3_fn f = (alloc3_fn)sym_or_die(h, "hipHostMalloc");
    free_fn hfree = (free_fn)sym_or_die(h, "hipHostFree");
    void *p = NULL;
    int rc = f(&p, 4096, 0);
    int frc = rc == 0 ? hfree(p) : -1;
    printf("byname rc=%d free=%d\n", rc, frc);
    return 0;
}

static int deepbind(const char *plugin)
{
    void *h = open_or_die(plugin, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    int frc, rc = ((host_fn)sym_or_die(h, "nw_host"))(0, &frc);
    printf("deepbind rc=%d free=%d\n", rc, frc);
    return 0;
}

static host_fn cancel_host;
static pthread_mutex_t cancel_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cancel_cond = PTHREAD_COND_INITIALIZER;
static int cancel_stage;

static void *cancel_pending(void *arg)
{
    (void)arg;
    int frc;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_mutex_lock(&cancel_lock);
    cancel_stage = 1;
    pthread_cond_broadcast(&cancel_cond);
    while (cancel_stage != 2)
        pthread_cond_wait(&cancel_cond, &cancel_lock);
    pthread_mutex_unlock(&cancel_lock);
    /* Deferred: nothing happens until a cancellation point. */
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    cancel_host(0, &frc);
    pthread_testcancel();
    return NULL;
}

static void *cancel_race(void *arg)
{
    (void)arg;
    int frc;
    cancel_host(0, &frc);
    pthread_testcancel();
    return NULL;
}

static int cancel(const char *how, const char *plugin)
{
    void *h = open_or_die(plugin, RTLD_NOW | RTLD_LOCAL);
    cancel_host = (host_fn)sym_or_die(h, "nw_host");
    pthread_t t;
    void *result = NULL;
    if (strcmp(how, "pending") == 0) {
        pthread_create(&t, NULL, cancel_pending, NULL);
        pthread_mutex_lock(&cancel_lock);
        while (cancel_stage != 1)
            pthread_cond_wait(&cancel_cond, &cancel_lock);
        pthread_cancel(t);
        cancel_stage = 2;
        pthread_cond_broadcast(&cancel_cond);
        pthread_mutex_unlock(&cancel_lock);
    } else {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        struct timespec ts = {0, (now.tv_nsec / 1000 % 300) * 1000};
        pthread_create(&t, NULL, cancel_race, NULL);
        nanosleep(&ts, NULL);
        pthread_cancel(t);
    }
    pthread_join(t, &result);
    printf("cancel %s thread=%s\n", how, result == PTHREAD_CANCELED ? "cancelled" : "returned");
    return 0;
}

static void body_at_exit(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int body = 0;
    while (f && fgets(line, sizeof line, f))
        body |= strstr(line, "librmcp_shim_body") != NULL;
    if (f)
        fclose(f);
    printf("deepexit body=%d\n", body);
}

static int deepexit(const char *lib)
{
    atexit(body_at_exit);
    if (dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
        return 3;
    }
    return 0;
}

static int deepfork(const char *lib, const char *cyc, int n)
{
    open_or_die(lib, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    cycle_path = cyc;
    pthread_t t;
    pthread_create(&t, NULL, cycle, NULL);
    pid_t kids[1024];
    if (n > 1024)
        n = 1024;
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            alarm(3);
            exit(0);
        }
    }
    cycling = 0;
    pthread_join(t, NULL);
    tally("deepfork", kids, n);
    return 0;
}

static int localfork(const char *plugin)
{
    void *h = open_or_die(plugin, RTLD_NOW | RTLD_LOCAL);
    host_fn host = (host_fn)sym_or_die(h, "nw_host");
    int frc, rc = host(0, &frc);
    fflush(stdout);
    pid_t kid = fork();
    if (kid == 0)
        _exit(0);
    int st = -1;
    waitpid(kid, &st, 0);
    printf("localfork rc=%d free=%d child_status=%d\n", rc, frc,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "reload") == 0 && argc >= 4)
        return reload(atoi(argv[2]), argc - 3, argv + 3);
    if (strcmp(cmd, "jit") == 0 && argc == 4)
        return jit(argv[2], argv[3]);
    if (strcmp(cmd, "many") == 0 && argc == 4)
        return many(argv[2], atoi(argv[3]));
    if (strcmp(cmd, "forkdl") == 0 && argc == 5)
        return forkdl(argv[2], argv[3], atoi(argv[4]));
    if (strcmp(cmd, "statswait") == 0 && argc == 5)
        return statswait(argv[2], argv[3], atoi(argv[4]));
    if (strcmp(cmd, "frontunload") == 0 && argc == 4)
        return frontunload(argv[2], argv[3]);
    if (strcmp(cmd, "twocopies") == 0 && argc == 5)
        return twocopies(argv[2], argv[3], argv[4]);
    if (strcmp(cmd, "byname") == 0 && argc == 4)
        return byname(argv[2], argv[3]);
    if (strcmp(cmd, "deepbind") == 0 && argc == 3)
        return deepbind(argv[2]);
    if (strcmp(cmd, "deepexit") == 0 && argc == 3)
        return deepexit(argv[2]);
    if (strcmp(cmd, "deepfork") == 0 && argc == 5)
        return deepfork(argv[2], argv[3], atoi(argv[4]));
    if (strcmp(cmd, "localfork") == 0 && argc == 3)
        return localfork(argv[2]);
    if (strcmp(cmd, "cancel") == 0 && argc == 4)
        return cancel(argv[2], argv[3]);
    fprintf(stderr, "usage: see the top of never_worse.c\n");
    return 2;
}
