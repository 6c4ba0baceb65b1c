/* libctor.so: a library whose constructor allocates through HIP, as a plugin that sets up
 * pinned buffers when it is loaded. The constructor runs inside dlopen(), holding the
 * loader's lock. It first lets the program's other thread make its first hooked call
 * (ctor_go, set by ctor_deadlock.c), then waits long enough for that thread to be inside
 * the shim, then allocates. */
#include <semaphore.h>
#include <stdio.h>
#include <unistd.h>

int hipHostMalloc(void **p, size_t n, unsigned flags);
int hipHostFree(void *p);

extern sem_t ctor_go;
int ctor_rc = -1;

__attribute__((constructor)) static void allocate_at_load(void)
{
    void *p = NULL;
    sem_post(&ctor_go);
    usleep(200 * 1000);
    ctor_rc = hipHostMalloc(&p, 4096, 0);
    if (ctor_rc == 0)
        hipHostFree(p);
}
