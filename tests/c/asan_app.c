/*
 * asan_app.c - a program built with -fsanitize=address (rmcp-testkit's build script, when
 * the compiler can), for the sanitizer tests of `rmcp run` and the container entrypoint
 * (tests/cli_run.rs, tests/cli_entrypoint.rs). It is linked to the fake runtime .so.6, so
 * its DT_NEEDED list holds ASan's shared runtime (gcc's default: libasan.so.N) and
 * libamdhip64.so.6.
 *
 *   asan_app [overflow]
 *
 * Prints "object PATH" for each object in the initial library list after the program
 * (the vDSO left out), in load order: the first is the one ASan's link-order check looks
 * at. Then makes one hipHostMalloc(4096, 0), prints "hipHostMalloc rc=RC", frees it, and
 * uses a 16-byte heap buffer. With "overflow" it writes one byte past that buffer's end:
 * AddressSanitizer reports a heap-buffer-overflow and exits 1 (its default exitcode).
 * Otherwise it prints "asan_app done" and exits 3, a status of its own.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
extern hipError_t hipHostMalloc(void **, size_t, unsigned);
extern hipError_t hipHostFree(void *);

static int print_object(struct dl_phdr_info *info, size_t size, void *data)
{
    int *seen = data;
    (void)size;
    /* The first entry is the program; the vDSO has an empty name or linux-vdso.so.1. */
    if ((*seen)++ == 0 || info->dlpi_name[0] == '\0' ||
        strncmp(info->dlpi_name, "linux-", 6) == 0)
        return 0;
    printf("object %s\n", info->dlpi_name);
    return 0;
}

int main(int argc, char **argv)
{
    int seen = 0;
    void *p = NULL;
    char *buf;
    volatile char *v;
    /* volatile: the compiler can neither see that the write may be out of bounds (-Werror)
     * nor drop it as a dead store. */
    volatile size_t at = 15;
    hipError_t rc;

    dl_iterate_phdr(print_object, &seen);

    rc = hipHostMalloc(&p, 4096, 0);
    printf("hipHostMalloc rc=%d\n", rc);
    if (rc == 0)
        hipHostFree(p);
    fflush(stdout);

    buf = malloc(16);
    if (buf == NULL)
        return 2;
    memset(buf, 'x', 16);
    if (argc > 1 && strcmp(argv[1], "overflow") == 0)
        at = 16;
    v = buf;
    v[at] = '\0';
    free(buf);

    printf("asan_app done\n");
    return 3;
}
