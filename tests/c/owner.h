/* owner.h - the file name of the object holding an address (dladdr), for test output. */
#ifndef RMCP_TEST_OWNER_H
#define RMCP_TEST_OWNER_H
#include <dlfcn.h>
#include <string.h>

static const char *owner(const void *p)
{
    Dl_info info;
    const char *slash;
    if (p == NULL)
        return "none";
    if (dladdr(p, &info) == 0 || info.dli_fname == NULL)
        return "?";
    slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}
#endif
