/* The library half of dlsym_table.c: lookups made from a shared library (the program links
 * it, so it is loaded at start and named by its file), for callers whose dlerror() message
 * names the calling object (RTLD_DEFAULT names the caller, RTLD_NEXT searches after it).
 * The empty asm keeps each call a real call: a tail jump would make the program the caller
 * the loader sees. */
#define _GNU_SOURCE
#include <dlfcn.h>

void *table_lib_dlsym(void *handle, const char *name) {
    void *p = dlsym(handle, name);
    __asm__ volatile("" : "+r"(p));
    return p;
}

void *table_lib_dlvsym(void *handle, const char *name, const char *version) {
    void *p = dlvsym(handle, name, version);
    __asm__ volatile("" : "+r"(p));
    return p;
}
