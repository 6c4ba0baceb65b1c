/*
 * nw_bare.c - a library with nothing in it: no constructor, no destructor, not even the C
 * runtime's (built with -nostartfiles), so that dlclose runs nothing of glibc's exit
 * machinery. never_worse.c's `deepfork` loads and unloads it in a loop, to fork children
 * while another thread is inside dlopen (rmcp-shim/tests/reliability_guest.rs).
 */
int nw_bare(void)
{
    return 0;
}
