/* An rtld-audit module (LD_AUDIT) that prints, for every binding of `cos`, the object that
 * asked for it: "audit bind cos by NAME". glibc 2.35 and later call la_symbind for dlsym
 * lookups too, naming the object dlsym was called from (the return address). Through the
 * shim's dlsym the binder must still be the program, not the shim. */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

unsigned int la_version(unsigned int version)
{
    (void)version;
    return LAV_CURRENT;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
    (void)lmid;
    *cookie = (uintptr_t)map;
    return LA_FLG_BINDTO | LA_FLG_BINDFROM;
}

uintptr_t la_symbind64(Elf64_Sym *sym, unsigned int ndx, uintptr_t *refcook,
                       uintptr_t *defcook, unsigned int *flags, const char *symname)
{
    (void)ndx;
    (void)defcook;
    (void)flags;
    if (strcmp(symname, "cos") == 0) {
        const struct link_map *ref = (const struct link_map *)*refcook;
        const char *name = ref && ref->l_name && ref->l_name[0] ? ref->l_name : "<program>";
        char line[512];
        int n = snprintf(line, sizeof line, "audit bind cos by %s\n", name);
        if (n > 0 && write(2, line, (size_t)n) != n) {
            /* the test sees the line missing */
        }
    }
    return sym->st_value;
}
