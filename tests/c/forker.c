/*
 * forker.c - fork while another thread is inside a hooked call
 * (rmcp-shim/tests/reliability_fork.rs).
 *
 *   forker inside MARK   the main thread makes a first hooked call (the shim's state is
 *                        built), then thread A calls hipMalloc, which the fake runtime holds
 *                        (FAKEHIP_BLOCK=hipMalloc:US, FAKEHIP_BLOCK_MARK=MARK); as soon as
 *                        MARK exists, the main thread forks.
 *   forker first MARK    thread A makes the process's FIRST hooked call, and the shim, while
 *                        building its state, is held inside a runtime query (mixed machine:
 *                        FAKEHIP_BLOCK=hipGetDeviceCount:US); the main thread forks then.
 *
 * The child arms alarm(5) (a deadlocked child dies of SIGALRM instead of hanging), makes
 * six hooked calls, prints "child FUNC rc=RC" for each and exits 0 when all succeeded. The
 * parent waits for it, joins A, makes the same calls, and prints "parent ..." lines and
 * "child status=exited:N" or "child status=signal:N". Exit 0 only when everything
 * succeeded in both processes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int hipError_t;
extern hipError_t hipMalloc(void **, size_t);
extern hipError_t hipExtMallocWithFlags(void **, size_t, unsigned);
extern hipError_t hipHostMalloc(void **, size_t, unsigned);
extern hipError_t hipHostAlloc(void **, size_t, unsigned);
extern hipError_t hipMemAllocHost(void **, size_t);
extern hipError_t hipMallocManaged(void **, size_t, unsigned);
extern hipError_t hipHostFree(void *);
extern hipError_t hipFree(void *);

static int a_rc = -1;

static void *thread_a(void *arg)
{
    void *p = NULL;
    (void)arg;
    a_rc = hipMalloc(&p, 4096);
    if (a_rc == 0)
        hipFree(p);
    return NULL;
}

/* Six hooked calls (not hipMalloc, which the runtime holds); returns failures. */
static int calls(const char *who)
{
    void *p;
    int rc, bad = 0;
#define CALL(name, expr, freefn)                                                          \
    do {                                                                                  \
        p = NULL;                                                                         \
        rc = (expr);                                                                      \
        printf("%s %s rc=%d\n", who, name, rc);                                           \
        fflush(stdout);                                                                   \
        if (rc != 0)                                                                      \
            bad++;                                                                        \
        else                                                                              \
            freefn(p);                                                                    \
    } while (0)
    CALL("hipHostMalloc", hipHostMalloc(&p, 4096, 0), hipHostFree);
    CALL("hipHostMalloc", hipHostMalloc(&p, 4096, 0x40000000u), hipHostFree);
    CALL("hipMemAllocHost", hipMemAllocHost(&p, 4096), hipHostFree);
    CALL("hipHostAlloc", hipHostAlloc(&p, 4096, 0), hipHostFree);
    CALL("hipExtMallocWithFlags", hipExtMallocWithFlags(&p, 4096, 1), hipFree);
    CALL("hipMallocManaged", hipMallocManaged(&p, 4096, 1), hipFree);
#undef CALL
    return bad;
}

static int wait_for(const char *path, int ms)
{
    struct timespec ts = {0, 1000000};
    while (ms-- > 0) {
        if (access(path, F_OK) == 0)
            return 0;
        nanosleep(&ts, NULL);
    }
    return -1;
}

int main(int argc, char **argv)
{
    pthread_t a;
    pid_t pid;
    int status, bad = 0;

    if (argc != 3 || (strcmp(argv[1], "inside") != 0 && strcmp(argv[1], "first") != 0)) {
        fprintf(stderr, "usage: %s inside|first MARK\n", argv[0]);
        return 2;
    }
    unlink(argv[2]);
    if (strcmp(argv[1], "inside") == 0)
        bad += calls("parent-before");
    if (pthread_create(&a, NULL, thread_a, NULL) != 0)
        return 1;
    if (wait_for(argv[2], 10000) != 0) {
        fprintf(stderr, "forker: thread A never reached the runtime (no %s)\n", argv[2]);
        return 1;
    }
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        alarm(5);
        exit(calls("child") == 0 ? 0 : 1);
    }
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        return 1;
    }
    if (WIFEXITED(status)) {
        printf("child status=exited:%d\n", WEXITSTATUS(status));
        bad += WEXITSTATUS(status) != 0;
    } else {
        printf("child status=signal:%d\n", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
        bad++;
    }
    pthread_join(a, NULL);
    printf("parent thread-A hipMalloc rc=%d\n", a_rc);
    bad += a_rc != 0;
    bad += calls("parent");
    fflush(stdout);
    return bad == 0 ? 0 : 1;
}
