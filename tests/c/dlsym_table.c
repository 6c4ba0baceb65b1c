/* dlsym_table RUNTIME local|global NAME[=VERSION]...: issue 33's table. Opens RUNTIME with
 * RTLD_LAZY and RTLD_LOCAL or RTLD_GLOBAL (RUNTIME "-": none, a process without HIP; the
 * rows on the runtime's handle are left out), then for each NAME looks it up every way a
 * caller can (dlsym and dlvsym with the runtime's real version node VERSION and with a
 * wrong one; on the runtime's handle, RTLD_DEFAULT, RTLD_NEXT and the main program's
 * handle; from the program and from a library, libdlsym_table_lib.so), once with no
 * dlerror() message pending and once with one pending, and prints one line per lookup:
 *
 *   CALLER HANDLE FUNCTION PENDING NAME ptr=CLASS err=MESSAGE
 *
 * CLASS: null, runtime (a libamdhip64 or libhsa-runtime64 object's: HIP and the ROCr it
 * runs on), rmcp (librmcp_shim*'s), or the basename of the object holding the pointer. MESSAGE: what dlerror() returns right after the lookup,
 * "none" for NULL. The test (rmcp-shim/tests/shim_dlsym_errors.rs) runs it with and without
 * the shim and compares the lines. A last line says whether the shim's body is mapped:
 * "body-mapped=0|1". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *table_lib_dlsym(void *handle, const char *name);
void *table_lib_dlvsym(void *handle, const char *name, const char *version);

static const char *class_of(void *p) {
    if (!p) return "null";
    Dl_info info;
    if (!dladdr(p, &info) || !info.dli_fname) return "unknown";
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    if (strstr(base, "libamdhip64") || strstr(base, "libhsa-runtime64")) return "runtime";
    if (strstr(base, "librmcp_shim")) return "rmcp";
    return base;
}

/* Leaves nothing pending: dlerror() hands a message over once, then holds none. */
static void drain(void) {
    dlerror();
    dlerror();
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: dlsym_table RUNTIME local|global NAME[=VERSION]...\n");
        return 2;
    }
    int mode = strcmp(argv[2], "global") == 0 ? RTLD_GLOBAL : RTLD_LOCAL;
    int no_runtime = strcmp(argv[1], "-") == 0;
    void *rt = no_runtime ? NULL : dlopen(argv[1], RTLD_LAZY | mode);
    if (!rt && !no_runtime) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void *self = dlopen(NULL, RTLD_LAZY);
    struct {
        const char *label;
        void *handle;
    } handles[] = {
        {mode == RTLD_GLOBAL ? "global-handle" : "local-handle", rt},
        {"default", RTLD_DEFAULT},
        {"next", RTLD_NEXT},
        {"program-handle", self},
    };
    for (int i = 3; i < argc; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s", argv[i]);
        char *eq = strchr(name, '=');
        const char *version = "hip_4.2";
        if (eq) {
            *eq = 0;
            version = eq + 1;
        }
        for (size_t h = no_runtime ? 1 : 0; h < sizeof handles / sizeof *handles; h++) {
            for (int caller = 0; caller < 2; caller++) {
                for (int fn = 0; fn < 3; fn++) {
                    for (int pending = 0; pending < 2; pending++) {
                        drain();
                        if (pending) {
                            /* The message a failed lookup of another name leaves. */
                            if (dlsym(no_runtime ? self : rt, "rmcp_table_no_such_symbol"))
                                return 1;
                        }
                        void *p;
                        const char *ver = fn == 1 ? version : "rmcp_wrong_1.0";
                        if (fn == 0)
                            p = caller ? table_lib_dlsym(handles[h].handle, name)
                                       : dlsym(handles[h].handle, name);
                        else
                            p = caller ? table_lib_dlvsym(handles[h].handle, name, ver)
                                       : dlvsym(handles[h].handle, name, ver);
                        const char *e = dlerror();
                        printf("%s %s %s %s %s ptr=%s err=%s\n", caller ? "lib" : "program",
                               handles[h].label,
                               fn == 0 ? "dlsym" : fn == 1 ? "dlvsym-real" : "dlvsym-wrong",
                               pending ? "pending" : "clear", name, class_of(p),
                               e ? e : "none");
                    }
                }
            }
        }
    }
    /* Whether the shim's body was mapped: /proc/self/maps names it. */
    int body = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "librmcp_shim_body")) body = 1;
    if (maps) fclose(maps);
    printf("body-mapped=%d\n", body);
    return 0;
}
