/*
 * dlsym_scope.c - libscopeN.so: loaded RTLD_LOCAL, linked to libamdhip64.so.N and to
 * libscopedep.so. probe_scopes() makes the lookups whose answer depends on who asks:
 * RTLD_NEXT (the objects after this one, in its own scope) and RTLD_DEFAULT (which,
 * asked from an RTLD_LOCAL library, includes its local scope). An interposed dlsym that
 * changed the caller glibc sees would change these answers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "owner.h"

int hipHostMalloc(void **p, size_t n, unsigned flags); /* makes libamdhip64 a dependency */
int rmcp_local_only_symbol(void);


void probe_scopes(void)
{
    printf("next hipHostMalloc owner=%s\n", owner(dlsym(RTLD_NEXT, "hipHostMalloc")));
    printf("next hipFree owner=%s\n", owner(dlsym(RTLD_NEXT, "hipFree")));
    printf("next puts owner=%s\n", owner(dlsym(RTLD_NEXT, "puts")));
    printf("default rmcp_local_only_symbol owner=%s\n",
           owner(dlsym(RTLD_DEFAULT, "rmcp_local_only_symbol")));
    printf("default hipFree owner=%s\n", owner(dlsym(RTLD_DEFAULT, "hipFree")));
    printf("linked local_only=%d\n", rmcp_local_only_symbol());
    (void)hipHostMalloc;
}
