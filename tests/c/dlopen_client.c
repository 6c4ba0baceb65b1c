/*
 * dlopen_client.c - load a "framework" library the way a Python extension
 * module is loaded, and run its probe_main().
 *
 *   dlopen_client [--first PATH]... LIB [ARGS...]
 *
 * Each --first PATH is dlopen'ed with RTLD_NOW | RTLD_LOCAL first (to map a
 * "bundled" copy of the runtime by path, as PyTorch wheels do with
 * torch/lib/libamdhip64.so), then LIB is dlopen'ed with RTLD_NOW | RTLD_LOCAL
 * and probe_main(argc, argv) is called with argv = { LIB, ARGS... }. The exit
 * status is probe_main's return value; 3 if a dlopen/dlsym fails, 2 on bad
 * usage. This program is deliberately not linked against libamdhip64.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*probe_main_fn)(int argc, char **argv);

static void usage(void)
{
    fprintf(stderr, "usage: dlopen_client [--first PATH]... LIB [ARGS...]\n");
}

int main(int argc, char **argv)
{
    int i = 1;
    void *lib;
    probe_main_fn entry;
    int rc;

    while (i < argc && strcmp(argv[i], "--first") == 0) {
        void *h;
        if (i + 1 >= argc) {
            usage();
            return 2;
        }
        h = dlopen(argv[i + 1], RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            fprintf(stderr, "dlopen_client: dlopen(%s): %s\n", argv[i + 1], dlerror());
            return 3;
        }
        i += 2;
    }
    if (i >= argc) {
        usage();
        return 2;
    }
    lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen_client: dlopen(%s): %s\n", argv[i], dlerror());
        return 3;
    }
    dlerror();
    entry = (probe_main_fn)dlsym(lib, "probe_main");
    if (entry == NULL) {
        const char *err = dlerror();
        fprintf(stderr, "dlopen_client: dlsym(probe_main): %s\n",
                err ? err : "symbol is NULL");
        return 3;
    }
    rc = entry(argc - i, argv + i);
    fflush(stdout);
    return rc;
}
