/* A HIP tracer, the kind of interposer users preload next to rmcp: it defines the HIP
 * allocation functions the probe calls, appends one line per call to $TRACER_LOG
 * ("tracer FUNC flags=0x.."), and forwards to the next definition (dlsym(RTLD_NEXT)).
 * Preloaded after the shim it must see every call, with the flags the shim chose; before
 * it, with the flags the program chose. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void note(const char *func, unsigned flags)
{
    const char *path = getenv("TRACER_LOG");
    char line[128];
    int n, fd;
    if (path == NULL)
        return;
    n = snprintf(line, sizeof line, "tracer %s flags=0x%x\n", func, flags);
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)n) != n) {
        /* nothing to do: the test sees the line missing */
    }
    close(fd);
}

typedef int (*alloc2)(void **, size_t);
typedef int (*alloc3)(void **, size_t, unsigned);

int hipMalloc(void **p, size_t n)
{
    alloc2 next = (alloc2)dlsym(RTLD_NEXT, "hipMalloc");
    note("hipMalloc", 0);
    return next ? next(p, n) : 302;
}

int hipHostMalloc(void **p, size_t n, unsigned flags)
{
    alloc3 next = (alloc3)dlsym(RTLD_NEXT, "hipHostMalloc");
    note("hipHostMalloc", flags);
    return next ? next(p, n, flags) : 302;
}

int hipExtMallocWithFlags(void **p, size_t n, unsigned flags)
{
    alloc3 next = (alloc3)dlsym(RTLD_NEXT, "hipExtMallocWithFlags");
    note("hipExtMallocWithFlags", flags);
    return next ? next(p, n, flags) : 302;
}
