/* A HIP program whose first GPU work is a copy: it allocates two 64 KiB buffers with
 * hipMalloc, arms the emulated GPU's fault for the next dispatch (emugpu_fault KIND; a vm
 * fault at the first buffer) and copies that buffer with hipMemcpy, to the host (d2h: ROCr's
 * own copy queue on 5.x and 6.x) or to the second buffer (d2d: HIP's own blit kernel on
 * HIP's queue on 6.x). The runtime's own copy kernel takes the fault; no kernel is launched.
 * Linked to the runtime it runs with (libamdhip64.so.N); issue 35.
 *
 * copy_fault [KIND [d2h|d2d]]   (default: vm d2h)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int hipMalloc(void **, size_t);
int hipMemcpy(void *, const void *, size_t, int);
int hipDeviceSynchronize(void);
#define hipMemcpyDeviceToHost 2
#define hipMemcpyDeviceToDevice 3

static char host[65536];

int main(int argc, char **argv)
{
    const char *kind = argc > 1 ? argv[1] : "vm";
    int d2d = argc > 2 && strcmp(argv[2], "d2d") == 0;
    void *d = 0, *e = 0;
    if (hipMalloc(&d, sizeof host) != 0 || hipMalloc(&e, sizeof host) != 0)
        return 3;
    int (*arm)(const char *, unsigned long long) =
        (int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
    unsigned long long va = strncmp(kind, "vm", 2) == 0 ? (unsigned long long)(uintptr_t)d : 0;
    if (!arm || arm(kind, va) != 0)
        return 5;
    int rc = d2d ? hipMemcpy(e, d, sizeof host, hipMemcpyDeviceToDevice)
                 : hipMemcpy(host, d, sizeof host, hipMemcpyDeviceToHost);
    printf("hipMemcpy: %d\n", rc);
    printf("hipDeviceSynchronize: %d\n", hipDeviceSynchronize());
    return 0;
}
