/* dlsym_scopedep.c - libscopedep.so: a symbol only in dlsym_scope's local scope. */
int rmcp_local_only_symbol(void)
{
    return 42;
}
