/* The deadlock shape of issue 13: the runtime is up (an unhooked call was made); thread A
 * makes the process's first hooked call while the main thread is inside dlopen() of a
 * library whose constructor calls hipHostMalloc (libctor.so, ctor_lib.c). Without the shim
 * both calls return at once. Prints "a rc=N", "ctor rc=N", "done"; an alarm ends a hang
 * with SIGALRM after 10 s.
 *
 *   ctor_deadlock PATH/libctor.so */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <unistd.h>

int hipGetDeviceCount(int *n);
int hipHostMalloc(void **p, size_t n, unsigned flags);
int hipHostFree(void *p);

sem_t ctor_go;

static void *thread_a(void *arg)
{
    void *p = NULL;
    int rc;
    (void)arg;
    sem_wait(&ctor_go);
    rc = hipHostMalloc(&p, 4096, 0);
    if (rc == 0)
        hipHostFree(p);
    printf("a rc=%d\n", rc);
    fflush(stdout);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t a;
    int n = 0, *ctor_rc;
    void *lib;

    if (argc != 2)
        return 2;
    alarm(10);
    sem_init(&ctor_go, 0, 0);
    hipGetDeviceCount(&n);
    pthread_create(&a, NULL, thread_a, NULL);
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    ctor_rc = (int *)dlsym(lib, "ctor_rc");
    printf("ctor rc=%d\n", ctor_rc ? *ctor_rc : -2);
    pthread_join(a, NULL);
    printf("done\n");
    return 0;
}
