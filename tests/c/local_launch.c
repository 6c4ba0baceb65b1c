/* Looks hipLaunchKernel up with dlsym on an RTLD_LOCAL handle of the runtime named by
 * argv[1] (or, with argv[2] "proc", through that runtime's hipGetProcAddress) and calls it with distinct values in every argument (the dim3s in registers,
 * sharedMem and stream on the stack). Prints what the call returned (the fake runtime's
 * digest of its arguments) and the object the pointer lies in. Issue 35: the shim hands out
 * its per-copy observed entry, which must reach the runtime's function with every argument
 * unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*procaddr_t)(const char *, void **, int, uint64_t, int *);

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3)
        return 2;
    void *rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!rt)
        return 3;
    launch_t launch = (launch_t)dlsym(rt, "hipLaunchKernel");
    if (argc == 3 && strcmp(argv[2], "proc") == 0) {
        procaddr_t procaddr = (procaddr_t)dlsym(rt, "hipGetProcAddress");
        void *p = 0;
        int status = 0;
        if (!procaddr || procaddr("hipLaunchKernel", &p, 60000000, 0, &status) != 0)
            return 5;
        launch = (launch_t)p;
    }
    if (!launch)
        return 4;
    Dl_info info;
    const char *in = dladdr((void *)launch, &info) && info.dli_fname ? info.dli_fname : "?";
    const char *slash = in;
    for (const char *p = in; *p; p++)
        if (*p == '/')
            slash = p + 1;
    dim3 grid = {3, 5, 7}, block = {11, 13, 17};
    printf("rc=%d\n", launch((const void *)0x1234, grid, block, (void **)0x5678, 19, (void *)23));
    printf("in=%s\n", slash);
    return 0;
}
