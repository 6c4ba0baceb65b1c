/*
 * dlsym_client.c - processes that look HIP up by name, as XLA and Triton do, and one that
 * never touches HIP. Not linked to libamdhip64. Each prints what it found, naming the
 * object that holds each function (dladdr), and what calls through those pointers returned.
 *
 *   dlsym_client xla SONAME      dlopen(SONAME, RTLD_LOCAL), dlsym every name, allocate
 *   dlsym_client triton SONAME   dlsym hipGetProcAddress, then ask it for hipHostMalloc
 *   dlsym_client scopes LIB      dlopen(LIB, RTLD_LOCAL) and call its probe_scopes()
 *   dlsym_client plain           lookups of non-HIP names only
 *   dlsym_client next SONAME     dlopen(SONAME, RTLD_GLOBAL), then RTLD_NEXT from this
 *                                executable: the object after it (the preloaded shim, if
 *                                any, else the runtime) answers
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "owner.h"

typedef int (*alloc3_fn)(void **, size_t, unsigned);
typedef int (*free_fn)(void *);
typedef int (*gpa_fn)(const char *, void **, int, uint64_t, int *);


static int xla(const char *soname)
{
    static const char *const names[] = {"hipMalloc", "hipHostMalloc", "hipExtMallocWithFlags",
                                        "hipMemAllocHost", "hipGetProcAddress", "hipFree",
                                        "hipHostFree", "hipGetDeviceCount",
                                        "hipRuntimeGetVersion", "hipNoSuchFunction",
                                        "hipModuleLoadData", "hipModuleLoadDataEx",
                                        "hipModuleLoad"};
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL), *p = NULL;
    alloc3_fn host_malloc, ext_malloc;
    free_fn host_free, dev_free;
    int rc;
    if (h == NULL) {
        printf("dlopen failed: %s\n", dlerror());
        return 3;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        printf("sym %s owner=%s\n", names[i], owner(dlsym(h, names[i])));
    host_malloc = (alloc3_fn)dlsym(h, "hipHostMalloc");
    ext_malloc = (alloc3_fn)dlsym(h, "hipExtMallocWithFlags");
    host_free = (free_fn)dlsym(h, "hipHostFree");
    dev_free = (free_fn)dlsym(h, "hipFree");
    rc = host_malloc(&p, 4096, 0);
    printf("call hipHostMalloc rc=%d ptr=%d\n", rc, p != NULL);
    if (rc == 0)
        host_free(p);
    p = NULL;
    rc = ext_malloc(&p, 4096, 1);
    printf("call hipExtMallocWithFlags rc=%d ptr=%d\n", rc, p != NULL);
    if (rc == 0)
        dev_free(p);
    return 0;
}

static int triton(const char *soname)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL), *f = NULL, *p = NULL;
    gpa_fn gpa;
    int status = -1, rc;
    if (h == NULL) {
        printf("dlopen failed: %s\n", dlerror());
        return 3;
    }
    gpa = (gpa_fn)dlsym(h, "hipGetProcAddress");
    printf("sym hipGetProcAddress owner=%s\n", owner((void *)gpa));
    if (gpa == NULL)
        return 0;
    rc = gpa("hipHostMalloc", &f, 60000000, 0, &status);
    printf("procaddr hipHostMalloc rc=%d owner=%s\n", rc, owner(f));
    if (f != NULL) {
        rc = ((alloc3_fn)f)(&p, 4096, 0);
        printf("call hipHostMalloc rc=%d ptr=%d\n", rc, p != NULL);
    }
    return 0;
}

static int scopes(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    void (*probe)(void);
    if (h == NULL) {
        printf("dlopen failed: %s\n", dlerror());
        return 3;
    }
    probe = (void (*)(void))dlsym(h, "probe_scopes");
    if (probe == NULL)
        return 3;
    probe();
    return 0;
}

static int next(const char *soname)
{
    if (dlopen(soname, RTLD_NOW | RTLD_GLOBAL) == NULL) {
        printf("dlopen failed: %s\n", dlerror());
        return 3;
    }
    printf("next hipHostMalloc owner=%s\n", owner(dlsym(RTLD_NEXT, "hipHostMalloc")));
    printf("default hipFree owner=%s\n", owner(dlsym(RTLD_DEFAULT, "hipFree")));
    return 0;
}

static int plain(void)
{
    void *m = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    printf("default strlen owner=%s same=%d\n", owner(dlsym(RTLD_DEFAULT, "strlen")),
           dlsym(RTLD_DEFAULT, "strlen") == (void *)strlen);
    printf("next strlen owner=%s\n", owner(dlsym(RTLD_NEXT, "strlen")));
    printf("handle cos owner=%s\n", owner(m ? dlsym(m, "cos") : NULL));
    void *found;
    int error;
    dlerror();
    found = dlsym(RTLD_DEFAULT, "rmcp_no_such_symbol");
    error = dlerror() != NULL;
    printf("missing found=%d error=%d\n", found != NULL, error);
    found = m ? dlsym(m, "rmcp_no_such_symbol") : NULL;
    error = dlerror() != NULL;
    printf("missing-on-handle found=%d error=%d\n", found != NULL, error);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "xla") == 0)
        return xla(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "triton") == 0)
        return triton(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "scopes") == 0)
        return scopes(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "next") == 0)
        return next(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "plain") == 0)
        return plain();
    fprintf(stderr, "usage: dlsym_client xla|triton|next SONAME | scopes LIB | plain\n");
    return 2;
}
