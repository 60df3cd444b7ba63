/* x86emu_init.c - /init of the emulated x86-64 guest (tests/test_x86_emulated.py): runs each
 * line of /cmds ("/PROGRAM ARG...", split at spaces) with stdout and stderr on the console,
 * framed by "@@run LINE" and "@@exit STATUS SECONDS" lines, then "@@done" and powers off.
 * A line "@fnv PATH" prints "@@fnv HEX PATH", the 64-bit FNV-1a hash of the file (how a test
 * reads back an output file). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static void fnv(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned long long h = 0xcbf29ce484222325ull;
    int c;
    if (!f) {
        printf("@@fnv missing %s\n", path);
        return;
    }
    while ((c = getc(f)) != EOF) h = (h ^ (unsigned)c) * 0x100000001b3ull;
    fclose(f);
    printf("@@fnv %016llx %s\n", h, path);
}

int main(void) {
    static char line[4096];
    FILE *f = fopen("/cmds", "r");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!f) printf("@@error cannot open /cmds\n");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0]) continue;
        if (strncmp(line, "@fnv ", 5) == 0) {
            fnv(line + 5);
            continue;
        }
        char *argv[64], *save = NULL;
        int argc = 0;
        char copy[4096];
        strcpy(copy, line);
        for (char *t = strtok_r(copy, " ", &save); t && argc < 63; t = strtok_r(NULL, " ", &save))
            argv[argc++] = t;
        argv[argc] = NULL;
        printf("@@run %s\n", line);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid == 0) {
            execv(argv[0], argv);
            printf("@@error cannot exec %s\n", argv[0]);
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (WIFEXITED(st)) printf("@@exit %d %.1f\n", WEXITSTATUS(st), s);
        else printf("@@exit signal%d %.1f\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1, s);
    }
    printf("@@done\n");
    fflush(stdout);
    tcdrain(1);
    sleep(1);
    sync();
    if (getpid() == 1) reboot(RB_POWER_OFF);
    return 0;
}
