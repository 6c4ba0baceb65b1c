/*
 * two_copies.c - two real HIP runtime copies in one process, each caller served by its own
 * (tests/compat/run, check i:two-copies; issue 12).
 *
 *   two_copies RUNTIME_A FRAMEWORK_B
 *
 * dlopens RUNTIME_A by path with RTLD_LOCAL and looks hipHostMalloc up on that handle, as
 * XLA does: the program's own calls belong to copy A. Then dlopens FRAMEWORK_B with
 * RTLD_LOCAL, a library linked to the other runtime's soname (copy B), as a Python extension
 * is loaded, and runs its probe_main. Both copies are mapped before any HIP call; then
 * rmcp_compat_ready() runs (a breakpoint for gdb, which reads both load addresses there).
 * The sizes tell the callers apart:
 *   the program:   hipHostMalloc(4096, 0), and after the framework hipHostMalloc(12288, 0x2)
 *   the framework: hipHostMalloc(8192, 0), hipHostMalloc(16384, 0x2), then `maps`
 * Prints one line per program call and the framework's own lines. Exit 0, or 1 when a
 * library or symbol cannot be found.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef int (*host_malloc_fn)(void **p, size_t n, unsigned flags);
typedef int (*probe_main_fn)(int argc, char **argv);

__attribute__((noinline, visibility("default"))) void rmcp_compat_ready(void)
{
    __asm__ volatile("" ::: "memory");
}

static void program_call(host_malloc_fn f, size_t n, unsigned flags)
{
    void *p = NULL;
    int rc = f(&p, n, flags);
    printf("program hipHostMalloc size=%zu flags=0x%x rc=%d\n", n, flags, rc);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    void *a, *b;
    host_malloc_fn fa;
    probe_main_fn probe;
    char *steps[] = {argv[0], "hipHostMalloc:8192:0", "hipHostMalloc:16384:0x2", "maps", NULL};

    if (argc != 3) {
        fprintf(stderr, "usage: two_copies RUNTIME_A FRAMEWORK_B\n");
        return 2;
    }
    a = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (a == NULL) {
        fprintf(stderr, "two_copies: %s\n", dlerror());
        return 1;
    }
    fa = (host_malloc_fn)dlsym(a, "hipHostMalloc");
    b = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (fa == NULL || b == NULL) {
        fprintf(stderr, "two_copies: %s\n", dlerror());
        return 1;
    }
    probe = (probe_main_fn)dlsym(b, "probe_main");
    if (probe == NULL) {
        fprintf(stderr, "two_copies: %s\n", dlerror());
        return 1;
    }
    rmcp_compat_ready();
    program_call(fa, 4096, 0);
    probe(4, steps);
    program_call(fa, 12288, 0x2);
    return 0;
}
