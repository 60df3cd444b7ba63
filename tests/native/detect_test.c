/* detect_test.c - if_cpu_detect from many threads at once (tests/test_selection.py builds and
 * runs it): every thread gets the same result as a later call, and the detection ran once.
 * Prints "detect ok THREADS threads, 1 run: FEATURES" and exits 0, else says what differed and
 * exits 1. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../../csrc/cpu/cpu.h"

enum { THREADS = 16 };

static atomic_int g_go;

static void *worker(void *out) {
    while (!atomic_load(&g_go)) {
    }
    memcpy(out, if_cpu_detect(), sizeof(if_cpu_info));
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    static if_cpu_info got[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, &got[i]) != 0) return 2;
    atomic_store(&g_go, 1);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    const if_cpu_info *ref = if_cpu_detect();
    for (int i = 0; i < THREADS; i++) {
        if (got[i].flags != ref->flags || strcmp(got[i].features, ref->features) ||
            strcmp(got[i].name, ref->name)) {
            printf("detect FAILED: thread %d saw features '%s', later '%s'\n", i,
                   got[i].features, ref->features);
            return 1;
        }
    }
    const int runs = if_cpu_detect_runs();
    if (runs != 1) {
        printf("detect FAILED: the detection ran %d times\n", runs);
        return 1;
    }
    printf("detect ok %d threads, 1 run: %s\n", THREADS, ref->features);
    return 0;
}
