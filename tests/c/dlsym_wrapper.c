/* A dlsym wrapper the way HAMi-core and many tracers hook dlsym: it defines dlsym, appends
 * "wrapper NAME" to $WRAPPER_LOG for every lookup, and forwards to glibc's dlsym found by
 * version. Preloaded after the shim it must see every lookup the program makes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real(void)
{
    static dlsym_fn f;
    if (f == NULL)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (f == NULL)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return f;
}

void *dlsym(void *handle, const char *name)
{
    const char *path = getenv("WRAPPER_LOG");
    if (path != NULL) {
        char line[256];
        int n = snprintf(line, sizeof line, "wrapper %s\n", name);
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) {
            if (n > 0 && write(fd, line, (size_t)n) != n) {
                /* the test sees the line missing */
            }
            close(fd);
        }
    }
    return real()(handle, name);
}
