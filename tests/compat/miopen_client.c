/*
 * miopen_client.c - load MIOpen the way a Python extension would (dlopen, RTLD_LOCAL),
 * call miopenCreate and print its status, then list the HIP runtime and MIOpen files
 * mapped in the process. Used only by tests/compat/run (MIOpen check).
 *
 *   miopen_client [--hip] [LIB]   LIB defaults to libMIOpen.so.1
 *
 * miopenCreate fails before any allocation when there is no GPU, so the shim would never
 * be asked for anything. With --hip the client then calls hipHostMalloc(4096, 0) looked
 * up on MIOpen's handle (dlsym(lib), which searches MIOpen and its dependencies): the
 * runtime MIOpen brought in, or with the shim preloaded the shim's function bound to that
 * runtime. (Not through the global scope: MIOpen was loaded RTLD_LOCAL, so the runtime is
 * not there, and dlsym(RTLD_DEFAULT) answers NULL with and without the shim.)
 *
 * Prints:
 *   miopenCreate status=N handle=0|1
 *   hipHostMalloc rc=N | hipHostMalloc none   (--hip only)
 *   maps PATH                  (each libamdhip64* / libMIOpen* file mapped, once)
 *   maps count=N               (libamdhip64* copies only)
 * Exit status 0, or 3 when LIB or miopenCreate cannot be loaded.
 * No MIOpen headers: miopenStatus_t is an int enum, miopenHandle_t a pointer.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*miopen_create_fn)(void **handle);
typedef int (*miopen_destroy_fn)(void *handle);

static int has_prefix(const char *path, const char *prefix)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    return strncmp(base, prefix, strlen(prefix)) == 0;
}

static void print_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[8192], seen[16][1024];
    int nseen = 0, nhip = 0, i;

    if (f == NULL) {
        printf("maps count=0\n");
        return;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        char *path = strchr(line, '/');
        size_t len;
        int dup = 0;
        if (path == NULL)
            continue;
        len = strlen(path);
        while (len > 0 && (path[len - 1] == '\n' || path[len - 1] == ' '))
            path[--len] = '\0';
        if (!has_prefix(path, "libamdhip64") && !has_prefix(path, "libMIOpen"))
            continue;
        for (i = 0; i < nseen; i++)
            if (strcmp(seen[i], path) == 0)
                dup = 1;
        if (dup || nseen == 16 || len >= sizeof seen[0])
            continue;
        strcpy(seen[nseen++], path);
        if (has_prefix(path, "libamdhip64"))
            nhip++;
        printf("maps %s\n", path);
    }
    fclose(f);
    printf("maps count=%d\n", nhip);
}

typedef int (*host_malloc_fn)(void **p, size_t n, unsigned flags);

int main(int argc, char **argv)
{
    int hip = argc > 1 && strcmp(argv[1], "--hip") == 0;
    const char *name = argc > 1 + hip ? argv[1 + hip] : "libMIOpen.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    miopen_create_fn create;
    miopen_destroy_fn destroy;
    void *handle = NULL;
    int status;

    if (lib == NULL) {
        fprintf(stderr, "miopen_client: dlopen(%s): %s\n", name, dlerror());
        return 3;
    }
    create = (miopen_create_fn)dlsym(lib, "miopenCreate");
    destroy = (miopen_destroy_fn)dlsym(lib, "miopenDestroy");
    if (create == NULL) {
        fprintf(stderr, "miopen_client: dlsym(miopenCreate): %s\n", dlerror());
        return 3;
    }
    status = create(&handle);
    printf("miopenCreate status=%d handle=%d\n", status, handle != NULL);
    fflush(stdout);
    if (status == 0 && handle != NULL && destroy != NULL)
        destroy(handle);
    if (hip) {
        host_malloc_fn hm = (host_malloc_fn)dlsym(lib, "hipHostMalloc");
        if (hm == NULL) {
            printf("hipHostMalloc none\n");
        } else {
            void *p = NULL;
            printf("hipHostMalloc rc=%d\n", hm(&p, 4096, 0));
        }
        fflush(stdout);
    }
    print_maps();
    fflush(stdout);
    return 0;
}
