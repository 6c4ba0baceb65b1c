/* A program that reaches HIP only by name, as Triton's HIP driver and hip-python do: it
 * dlopens the runtime RTLD_LOCAL (so nothing of it is in the global scope) and gets every
 * function either with dlsym on that handle (`dlsym`) or, after dlsym of hipGetProcAddress
 * alone, through hipGetProcAddress (`proc`, HIP 6.1 and later). It loads a code object,
 * allocates a buffer, launches the object's kernel `k` on it once, arms the emulated GPU's
 * fault for the next dispatch (emugpu_fault, at the kernel's first argument: the buffer)
 * and launches again. Used by the fault tests (issue 35).
 *
 * by_name_launch SONAME CODE_OBJECT dlsym|proc
 * Exit: what hipDeviceSynchronize returned after the faulting launch, when the runtime does
 * not end the process itself; 2-9 for a step that failed before.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int (*malloc_t)(void **, size_t);
typedef int (*modload_t)(void **, const char *);
typedef int (*getfn_t)(void **, void *, const char *);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
typedef int (*sync_t)(void);
typedef int (*procaddr_t)(const char *, void **, int, uint64_t, int *);

static void *rt;
static procaddr_t procaddr;

static void *get(const char *name)
{
    if (!procaddr)
        return dlsym(rt, name);
    void *p = 0;
    int status = 0;
    /* hipVersion: HIP_VERSION of the headers the caller was built with (6.0 here). */
    if (procaddr(name, &p, 60000000, 0, &status) != 0)
        return 0;
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!rt) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 2;
    }
    if (strcmp(argv[3], "proc") == 0) {
        procaddr = (procaddr_t)dlsym(rt, "hipGetProcAddress");
        if (!procaddr)
            return 3;
    }
    malloc_t hip_malloc = (malloc_t)get("hipMalloc");
    modload_t module_load = (modload_t)get("hipModuleLoad");
    getfn_t get_function = (getfn_t)get("hipModuleGetFunction");
    launch_t launch = (launch_t)get("hipModuleLaunchKernel");
    sync_t sync = (sync_t)get("hipDeviceSynchronize");
    int (*arm)(const char *, unsigned long long) =
        (int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
    if (!hip_malloc || !module_load || !get_function || !launch || !sync || !arm)
        return 4;
    void *buf = 0, *module = 0, *function = 0;
    if (hip_malloc(&buf, 4096) != 0)
        return 5;
    if (module_load(&module, argv[2]) != 0 || get_function(&function, module, "k") != 0)
        return 6;
    void *args[] = {&buf};
    if (launch(function, 1, 1, 1, 1, 1, 1, 0, 0, args, 0) != 0 || sync() != 0)
        return 7;
    if (arm("vm", 0) != 0)
        return 8;
    if (launch(function, 1, 1, 1, 1, 1, 1, 0, 0, args, 0) != 0)
        return 9;
    return sync();
}
