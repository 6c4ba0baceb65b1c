/* rmcp_startup: what a preload adds to a process's start, measured side by side.
 *
 *   rmcp_startup STARTS PROGRAM [ARGS...] -- NAME=PRELOAD [NAME=PRELOAD ...]
 *
 * Starts PROGRAM STARTS times per kind, interleaved start by start (kind 1, kind 2, ...,
 * kind 1, ...), each with LD_PRELOAD=PRELOAD (an empty PRELOAD: no LD_PRELOAD at all) and
 * the rest of this process's environment. Each start is timed from posix_spawn to the end
 * of waitpid with CLOCK_MONOTONIC. Start-up times on a shared machine have a long upper
 * tail, so each kind's figure is the mean of its fastest quarter; the median is printed
 * beside it. The first kind is the baseline every "added" figure is taken against, and
 * the second kind the unit of the ratio column (the empty library, in benches/startup.sh).
 * Output: a markdown table. Nothing is asserted. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_KINDS 8

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* environ without LD_PRELOAD, with `preload` added unless it is empty. */
static char **env_with(const char *preload) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 2, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) env[k++] = environ[i];
    if (*preload) {
        size_t len = strlen(preload) + 12;
        env[k] = malloc(len);
        snprintf(env[k], len, "LD_PRELOAD=%s", preload);
        k++;
    }
    env[k] = NULL;
    return env;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s STARTS PROGRAM [ARGS...] -- NAME=PRELOAD...\n", argv[0]);
        return 2;
    }
    int starts = atoi(argv[1]);
    int sep = 3;
    while (sep < argc && strcmp(argv[sep], "--") != 0) sep++;
    if (starts < 4 || sep >= argc - 1 || argc - sep - 1 > MAX_KINDS) {
        fprintf(stderr, "%s: need STARTS >= 4, a program, '--' and 1-%d kinds\n", argv[0],
                MAX_KINDS);
        return 2;
    }
    char **prog = argv + 2;
    argv[sep] = NULL;
    int kinds = argc - sep - 1;
    const char *name[MAX_KINDS];
    char **env[MAX_KINDS];
    double *t[MAX_KINDS];
    for (int k = 0; k < kinds; k++) {
        char *arg = argv[sep + 1 + k];
        char *eq = strchr(arg, '=');
        if (!eq) {
            fprintf(stderr, "%s: kind '%s' is not NAME=PRELOAD\n", argv[0], arg);
            return 2;
        }
        *eq = 0;
        name[k] = arg;
        env[k] = env_with(eq + 1);
        t[k] = calloc(starts, sizeof(double));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    for (int i = 0; i < starts; i++) {
        for (int k = 0; k < kinds; k++) {
            pid_t pid;
            int status;
            double t0 = now_us();
            if (posix_spawn(&pid, prog[0], &fa, NULL, prog, env[k]) != 0) {
                perror("posix_spawn");
                return 1;
            }
            if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
                WEXITSTATUS(status) != 0) {
                fprintf(stderr, "%s: %s failed under kind %s\n", argv[0], prog[0], name[k]);
                return 1;
            }
            t[k][i] = now_us() - t0;
        }
    }
    double q[MAX_KINDS], med[MAX_KINDS];
    int quarter = starts / 4;
    for (int k = 0; k < kinds; k++) {
        qsort(t[k], starts, sizeof(double), cmp);
        double s = 0;
        for (int i = 0; i < quarter; i++) s += t[k][i];
        q[k] = s / quarter;
        med[k] = t[k][starts / 2];
    }
    printf("| preload | start, fastest quarter (us) | median (us) | added (us) | relative to %s |\n",
           kinds > 1 ? name[1] : "-");
    printf("|---|---|---|---|---|\n");
    for (int k = 0; k < kinds; k++) {
        double added = q[k] - q[0];
        printf("| %s | %.0f | %.0f | %.1f |", name[k], q[k], med[k], added);
        if (k >= 1 && kinds > 1 && q[1] - q[0] > 0)
            printf(" %.2fx |\n", added / (q[1] - q[0]));
        else
            printf(" |\n");
    }
    return 0;
}
