/*
 * hotpath.c - shows that, after the first call, a hooked HIP call makes no heap
 * allocation and no system call in the calling thread.
 *
 * A worker thread makes every step once (the first call: the shim builds its state),
 * then installs a seccomp filter that traps every system call of that thread
 * (SECCOMP_RET_TRAP; a SIGSYS handler counts it and fails it with ENOSYS), arms the
 * malloc counters (this executable's malloc family wraps glibc's and counts while the
 * thread is armed), and makes every step N more times. The runtime is the fake one with
 * size 0, which answers without allocating or calling the kernel, so anything counted
 * came from the shim.
 *
 * With "threads=T", T more threads then start together, after the first worker is done, and
 * each arms itself before its own first call: the per-thread claim (the stats slot, which
 * also names the thread's launch and allocation rings) is counted too, and the T threads
 * make their N rounds at once.
 *
 * Usage: hotpath N STEP... [control] [threads=T]
 *   STEP: FUNC[:FLAGS] with FUNC one of hipHostMalloc, hipHostAlloc,
 *         hipExtMallocWithFlags, hipMalloc, hipMallocHost, hipMemAllocHost, or
 *         hipLaunchKernel (an observed entry: recorded in the launch ring, issue 28; the
 *         fake runtime answers a launch on stream (void *)1 at once)
 *   control: also make one malloc and one getpid() while armed (the counters must see them)
 * Prints: calls=<n> failed=<n> mallocs=<n> syscalls=<n>
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "hip_alloc.h"

typedef struct { unsigned x, y, z; } dim3;
int hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared,
                    void *stream);
static void kernel_stub(void) {}

/* ---- counting allocator ------------------------------------------------ */

static __thread int armed;
static atomic_long mallocs, syscalls;

#include "counting_malloc.h"

/* ---- syscall trap -------------------------------------------------------- */
static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    if (armed)
        syscalls++;
    ((ucontext_t *)uc)->uc_mcontext.gregs[REG_RAX] = -ENOSYS;
}

static int trap_syscalls(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_rt_sigreturn, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_exit, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_exit_group, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    /* Only this thread: no SECCOMP_FILTER_FLAG_TSYNC. */
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

/* ---- steps ------------------------------------------------------------------ */
struct step {
    int func;
    unsigned flags;
};
static struct step steps[32];
static int nsteps, control, nthreads;
static long iterations;
static atomic_long calls, failed;
static pthread_barrier_t together;

static const char *const names[] = {"hipHostMalloc", "hipHostAlloc",    "hipExtMallocWithFlags",
                                    "hipMalloc",     "hipMallocHost",   "hipMemAllocHost",
                                    "hipLaunchKernel"};

static void run_steps(long *calls, long *failed)
{
    for (int i = 0; i < nsteps; i++) {
        void *p = NULL;
        int rc = -1;
        switch (steps[i].func) {
        case 0: rc = hipHostMalloc(&p, 0, steps[i].flags); break;
        case 1: rc = hipHostAlloc(&p, 0, steps[i].flags); break;
        case 2: rc = hipExtMallocWithFlags(&p, 0, steps[i].flags); break;
        case 3: rc = hipMalloc(&p, 0); break;
        case 4: rc = hipMallocHost(&p, 0); break;
        case 5: rc = hipMemAllocHost(&p, 0); break;
        case 6: {
            dim3 one = {1, 1, 1};
            rc = hipLaunchKernel((const void *)kernel_stub, one, one, NULL, 0, (void *)1);
            break;
        }
        }
        (*calls)++;
        if (rc != 0)
            (*failed)++;
    }
}

static void *worker(void *arg)
{
    long c = 0, f = 0;
    (void)arg;
    run_steps(&c, &f); /* the first call: state is built here */
    c = f = 0;
    if (trap_syscalls() != 0) {
        perror("seccomp");
        exit(3);
    }
    armed = 1;
    for (long i = 0; i < iterations; i++)
        run_steps(&c, &f);
    calls += c;
    failed += f;
    if (control) {
        void *p = malloc(16);
        syscall(SYS_getpid);
        __libc_free(p);
    }
    armed = 0;
    return NULL;
}

/* A later thread: armed from its own first call on (its slot's claim included). */
static void *fresh(void *arg)
{
    long c = 0, f = 0;
    (void)arg;
    pthread_barrier_wait(&together); /* before the filter: the barrier may sleep */
    if (trap_syscalls() != 0) {
        perror("seccomp");
        exit(3);
    }
    armed = 1;
    for (long i = 0; i < iterations; i++)
        run_steps(&c, &f);
    armed = 0;
    calls += c;
    failed += f;
    return NULL;
}

int main(int argc, char **argv)
{
    struct sigaction sa;
    pthread_t t;

    if (argc < 3) {
        fprintf(stderr, "usage: hotpath N STEP... [control]\n");
        return 2;
    }
    iterations = atol(argv[1]);
    for (int i = 2; i < argc; i++) {
        char name[64];
        unsigned flags = 0;
        int f = -1;
        if (strcmp(argv[i], "control") == 0) {
            control = 1;
            continue;
        }
        if (sscanf(argv[i], "threads=%d", &nthreads) == 1) {
            if (nthreads < 0 || nthreads > 64)
                return 2;
            continue;
        }
        if (sscanf(argv[i], "%63[^:]:%i", name, (int *)&flags) < 1 || nsteps == 32)
            return 2;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (strcmp(name, names[k]) == 0)
                f = (int)k;
        if (f < 0) {
            fprintf(stderr, "hotpath: unknown step %s\n", argv[i]);
            return 2;
        }
        steps[nsteps].func = f;
        steps[nsteps].flags = flags;
        nsteps++;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSYS, &sa, NULL);
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 3;
    pthread_join(t, NULL);
    if (nthreads > 0) {
        pthread_t ts[64];
        if (pthread_barrier_init(&together, NULL, (unsigned)nthreads) != 0)
            return 3;
        for (int i = 0; i < nthreads; i++)
            if (pthread_create(&ts[i], NULL, fresh, NULL) != 0)
                return 3;
        for (int i = 0; i < nthreads; i++)
            pthread_join(ts[i], NULL);
    }
    printf("calls=%ld failed=%ld mallocs=%ld syscalls=%ld\n", (long)calls, (long)failed,
           (long)mallocs, (long)syscalls);
    return 0;
}
