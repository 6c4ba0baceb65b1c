/* bench_main.c - the rmcp_bench executable: everything is in librmcp_bench.so
 * (bench_client.c), so that the hooked calls come from a named library. */
int rmcp_bench_main(int argc, char **argv);

int main(int argc, char **argv)
{
    return rmcp_bench_main(argc, argv);
}
