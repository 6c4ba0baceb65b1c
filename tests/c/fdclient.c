/*
 * fdclient.c - a program that rearranges its own standard descriptors around HIP calls, to
 * show that the shim never writes into, or takes, a descriptor the program owns
 * (rmcp-shim/tests/reliability_files.rs).
 *
 * Usage: fdclient STEP...   (run in order)
 *   close:N       close descriptor N
 *   open:PATH     open PATH for writing (created, truncated): it gets the lowest free
 *                 descriptor, as a program's data file does after it closed stdout/stderr
 *   hip           hipHostMalloc(&p, 4096, 0) (the shim's first call builds its state and
 *                 logs its warnings)
 *   say:TEXT      write TEXT and a newline to descriptor 1
 *   data:TEXT     write TEXT and a newline to the descriptor the last open: returned
 *   wait:PATH     wait (at most 10 s) until PATH exists
 * Exit status: the number of writes that failed (a closed descriptor), or 100 for a bad
 * step or a failed open.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int hipError_t;
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags);

static int put(int fd, const char *text)
{
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n || write(fd, "\n", 1) != 1)
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int failed = 0, data = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "close:", 6) == 0) {
            close(atoi(a + 6));
        } else if (strncmp(a, "open:", 5) == 0) {
            data = open(a + 5, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (data < 0)
                return 100;
        } else if (strcmp(a, "hip") == 0) {
            void *p = NULL;
            (void)hipHostMalloc(&p, 4096, 0);
        } else if (strncmp(a, "say:", 4) == 0) {
            failed += put(1, a + 4);
        } else if (strncmp(a, "wait:", 5) == 0) {
            for (int t = 0; t < 10000 && access(a + 5, F_OK) != 0; t++)
                usleep(1000);
        } else if (strncmp(a, "data:", 5) == 0) {
            failed += put(data, a + 5);
        } else {
            return 100;
        }
    }
    return failed;
}
