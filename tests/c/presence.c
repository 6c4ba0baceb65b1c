/* A process that never uses HIP but asks whether it is there, the way a presence probe or
 * ctypes.CDLL(None).hipMalloc does. Prints what each lookup answered, whether a runtime (or
 * the HSA runtime, libdrm, libnuma, the shim's body) got mapped, then exercises dlerror:
 *   presence            lookups of hipMalloc by RTLD_DEFAULT and on dlopen(NULL), and cos
 *                       on libm's handle (for an audit module to see the binder)
 * Output lines: "default=0|1", "main=0|1", "cos=0|1", "mapped=NAME" per suspicious object. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    void *self = dlopen(NULL, RTLD_NOW);
    void *libm = dlopen("libm.so.6", RTLD_NOW);
    FILE *maps;
    char line[4096];

    printf("default=%d\n", dlsym(RTLD_DEFAULT, "hipMalloc") != NULL);
    printf("main=%d\n", self && dlsym(self, "hipMalloc") != NULL);
    printf("cos=%d\n", libm && dlsym(libm, "cos") != NULL);
    maps = fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof line, maps)) {
        if (strstr(line, "libamdhip64") || strstr(line, "libhsa") || strstr(line, "libdrm") ||
            strstr(line, "libnuma") || strstr(line, "librmcp_shim_body"))
            printf("mapped=%s", strchr(line, '/') ? strchr(line, '/') : line);
    }
    if (maps)
        fclose(maps);
    return 0;
}
