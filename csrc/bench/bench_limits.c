/* bench_limits.c - measured limits: read-only memory bandwidth and peak int8 throughput per
 * tier, each on 1..n threads released together. */
#if defined(__linux__)
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#else
#define _POSIX_C_SOURCE 200809L
#endif
#define _DARWIN_C_SOURCE 1
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isaforge_bench.h"

#define MAX_THREADS 256

/* ---- a tiny fork-join runner: every thread runs body(ctx, tid) once all are started ---- */

typedef struct runner {
    void (*body)(void *ctx, size_t tid);
    void *ctx;
    atomic_int go; /* 0 wait, 1 run, -1 give up (a thread could not be created) */
} runner;

typedef struct worker_arg {
    runner *r;
    size_t tid;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    int go;
    while ((go = atomic_load(&a->r->go)) == 0) sched_yield();
    if (go > 0) a->r->body(a->r->ctx, a->tid);
    return NULL;
}

/* Run body on n threads (the caller is thread 0); 0 on success, -1 if a thread could not be
 * created (then nothing ran). */
static int run_threads(size_t n, void (*body)(void *, size_t), void *ctx) {
    runner r;
    r.body = body, r.ctx = ctx;
    atomic_init(&r.go, 0);
    pthread_t th[MAX_THREADS];
    worker_arg args[MAX_THREADS];
    size_t started = 1;
    for (; started < n; started++) {
        args[started] = (worker_arg){&r, started};
        if (pthread_create(&th[started], NULL, worker, &args[started]) != 0) break;
    }
    atomic_store(&r.go, started == n ? 1 : -1);
    if (started == n) body(ctx, 0);
    for (size_t i = 1; i < started; i++) pthread_join(th[i], NULL);
    return started == n ? 0 : -1;
}

/* ---- a spinning barrier (pthread_barrier_t is missing on macOS) ---- */

typedef struct spin_barrier {
    atomic_size_t arrived, generation;
    size_t n;
} spin_barrier;

static void spin_barrier_init(spin_barrier *b, size_t n) {
    atomic_init(&b->arrived, 0);
    atomic_init(&b->generation, 0);
    b->n = n;
}

/* Wait until all n threads arrived; reusable for the next pass. */
static void spin_barrier_wait(spin_barrier *b) {
    size_t gen = atomic_load(&b->generation);
    if (atomic_fetch_add(&b->arrived, 1) + 1 == b->n) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->generation, 1);
        return;
    }
    while (atomic_load(&b->generation) == gen) sched_yield();
}

/* Seconds from the first of n threads' start times t0 to the last of their end times t1. */
static double span(const double *t0, const double *t1, size_t n) {
    double lo = t0[0], hi = t1[0];
    for (size_t i = 1; i < n; i++) {
        if (t0[i] < lo) lo = t0[i];
        if (t1[i] > hi) hi = t1[i];
    }
    return hi - lo;
}

/* ---- read-only stream ---- */

typedef struct stream_ctx {
    const uint64_t *buf;
    size_t words, threads, reps, streams;
    spin_barrier *pass;      /* all threads start each pass together */
    double *t0, *t1;         /* (reps, threads) */
    uint64_t *sums;          /* (threads) */
} stream_ctx;

/* Words each thread reads: its slice cut into `streams` equal parts of whole 64-byte lines. */
static size_t stream_part(size_t words, size_t threads, size_t streams) {
    return words / threads / streams / 8 * 8;
}

/* A thread reads its slice as `streams` sequential streams advanced together, a line of each per
 * step: a GEMV reads many weight rows at once, and one stream alone leaves the memory system's
 * parallelism unused on many CPUs, so the probe takes the best over several stream counts. */
static void stream_body(void *p, size_t tid) {
    stream_ctx *c = p;
    const size_t part = stream_part(c->words, c->threads, c->streams);
    const uint64_t *b = c->buf + tid * part * c->streams;
    uint64_t total = 0;
    for (size_t r = 0; r < c->reps; r++) {
        spin_barrier_wait(c->pass);
        double t0 = ifb_now();
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
        for (size_t i = 0; i < part; i += 8) {
            for (size_t s = 0; s < c->streams; s++) {
                const uint64_t *q = b + s * part + i;
                a0 += q[0], a1 += q[1], a2 += q[2], a3 += q[3];
                a4 += q[4], a5 += q[5], a6 += q[6], a7 += q[7];
            }
        }
        total += a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
        c->t0[r * c->threads + tid] = t0;
        c->t1[r * c->threads + tid] = ifb_now();
    }
    c->sums[tid] = total;
}

/* Stream counts the probe tries per thread (a 1B model's GEMV tile reads 8-16 rows at once). */
static const size_t k_streams[] = {1, 4, 8, 16};

if_status ifb_stream_read(size_t bytes, size_t threads, size_t reps, double *gbps, char *err,
                          size_t errlen) {
    if (threads == 0 || threads > MAX_THREADS || reps == 0 || bytes < 64 * threads * 16 * 8) {
        snprintf(err, errlen, "stream: need 1..%d threads, reps >= 1 and a large enough buffer "
                 "(got %zu threads, %zu reps, %zu bytes)", MAX_THREADS, threads, reps, bytes);
        return IF_EINVAL;
    }
    size_t words = bytes / 8;
    uint64_t *buf = aligned_alloc(64, (words * 8 + 63) / 64 * 64);
    double *t0 = malloc(reps * threads * sizeof(double));
    double *t1 = malloc(reps * threads * sizeof(double));
    uint64_t *sums = calloc(threads, sizeof(uint64_t));
    spin_barrier pass;
    spin_barrier_init(&pass, threads);
    if (!buf || !t0 || !t1 || !sums) {
        free(buf), free(t0), free(t1), free(sums);
        snprintf(err, errlen, "stream: out of memory for %zu bytes", bytes);
        return IF_ENOMEM;
    }
    for (size_t i = 0; i < words; i++) buf[i] = i * 0x9E3779B97F4A7C15ULL; /* touch every page */
    double best = 0;
    uint64_t keep_all = 0;
    for (size_t si = 0; si < sizeof k_streams / sizeof k_streams[0]; si++) {
        const size_t streams = k_streams[si];
        stream_ctx c = {buf, words, threads, reps, streams, &pass, t0, t1, sums};
        if (run_threads(threads, stream_body, &c) != 0) {
            free(buf), free(t0), free(t1), free(sums);
            snprintf(err, errlen, "stream: could not start %zu threads", threads);
            return IF_ENOMEM;
        }
        const size_t read = stream_part(words, threads, streams) * streams * threads * 8;
        for (size_t r = 0; r < reps; r++) {
            const double dt = span(t0 + r * threads, t1 + r * threads, threads);
            double g = (double)read / dt / 1e9;
            if (g > best) best = g;
        }
        for (size_t i = 0; i < threads; i++) keep_all ^= sums[i];
    }
    volatile uint64_t keep = keep_all;
    (void)keep;
    free(buf), free(t0), free(t1), free(sums);
    *gbps = best;
    return IF_OK;
}

/* ---- peak int8 ---- */

typedef uint64_t (*peak_loop_fn)(size_t iters, int64_t *sink);

typedef struct peak_ctx {
    peak_loop_fn fn;
    size_t iters;
    spin_barrier start;      /* the timed loops start together */
    int pin;                 /* threads <= allowed CPUs: one CPU each (Linux) */
    uint64_t macs[MAX_THREADS];
    int64_t sink[MAX_THREADS];
    double t0[MAX_THREADS], t1[MAX_THREADS];
} peak_ctx;

/* A short untimed run first (wakes the vector units and the vCPU), then all threads meet and
 * each times its own loop; the rate is over the span from the first start to the last end, so
 * thread creation and a late-scheduled thread's wake-up are not counted as compute. */
static void peak_body(void *p, size_t tid) {
    peak_ctx *c = p;
#if defined(__linux__)
    /* each thread on its own CPU of the allowed set (the caller's mask restored after): left to
     * the scheduler, a new thread often started on the caller's CPU and the ~3 ms loops ran one
     * after the other, so the n-thread rate could read as the 1-thread one */
    cpu_set_t was, one;
    int pinned = 0;
    if (c->pin && pthread_getaffinity_np(pthread_self(), sizeof was, &was) == 0) {
        size_t k = 0;
        for (int cpu = 0; cpu < CPU_SETSIZE && !pinned; cpu++)
            if (CPU_ISSET(cpu, &was) && k++ == tid) {
                CPU_ZERO(&one);
                CPU_SET(cpu, &one);
                pinned = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
            }
    }
#endif
    int64_t warm = 0;
    (void)c->fn(c->iters / 8 + 1, &warm);
    spin_barrier_wait(&c->start);
    c->t0[tid] = ifb_now();
    c->macs[tid] = c->fn(c->iters, &c->sink[tid]);
    c->t1[tid] = ifb_now();
    c->sink[tid] ^= warm;
#if defined(__linux__)
    if (pinned) (void)pthread_setaffinity_np(pthread_self(), sizeof was, &was);
#endif
}

static peak_loop_fn peak_fn(const char *tier) {
    if (strcmp(tier, "scalar") == 0) return ifb_peak_loop_scalar;
#if defined(IF_X86_TIERS)
    if (strcmp(tier, "avx2") == 0) return ifb_peak_loop_avx2;
    if (strcmp(tier, "avx_vnni") == 0) return ifb_peak_loop_avx_vnni;
    if (strcmp(tier, "avx512_vnni") == 0) return ifb_peak_loop_avx512_vnni;
    if (strcmp(tier, "amx") == 0) return ifb_peak_loop_amx;
#endif
    return NULL;
}

static peak_loop_fn mix_fn(const char *tier) {
#if defined(IF_X86_TIERS)
    if (strcmp(tier, "avx2") == 0) return ifb_mix_loop_avx2;
#endif
    (void)tier;
    return NULL;
}

/* Run the probe loop fn_of(tier) ("peak" or "mix": what) on `threads` threads. */
static if_status run_probe(const char *what, peak_loop_fn (*fn_of)(const char *),
                           const char *tier, size_t threads, size_t iters, double *gops,
                           char *err, size_t errlen) {
    if (!tier || threads == 0 || threads > MAX_THREADS || iters == 0) {
        snprintf(err, errlen, "%s: need a tier, 1..%d threads and iters >= 1", what,
                 MAX_THREADS);
        return IF_EINVAL;
    }
    size_t idx = if_tier_count();
    for (size_t i = 0; i < if_tier_count(); i++)
        if (strcmp(if_tier_name(i), tier) == 0) idx = i;
    if (idx == if_tier_count()) {
        snprintf(err, errlen, "%s: unknown tier '%s'", what, tier);
        return IF_EINVAL;
    }
    char why[256] = "";
    if (!if_tier_supported(idx, 0, why, sizeof why)) {
        snprintf(err, errlen, "%s: tier %s cannot run here: %s", what, tier, why);
        return IF_ENOTSUP;
    }
    peak_loop_fn fn = fn_of(tier);
    if (!fn) {
        snprintf(err, errlen, "%s: no probe loop for tier %s", what, tier);
        return IF_ENOTSUP;
    }
    peak_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "%s: out of memory", what);
        return IF_ENOMEM;
    }
    c->fn = fn, c->iters = iters;
    spin_barrier_init(&c->start, threads);
#if defined(__linux__)
    {
        cpu_set_t cur;
        c->pin = threads > 1 && sched_getaffinity(0, sizeof cur, &cur) == 0 &&
                 (size_t)CPU_COUNT(&cur) >= threads;
    }
#endif
    int rc = run_threads(threads, peak_body, c);
    if (rc != 0) {
        free(c);
        snprintf(err, errlen, "%s: could not start %zu threads", what, threads);
        return IF_ENOMEM;
    }
    uint64_t macs = 0;
    for (size_t i = 0; i < threads; i++) macs += c->macs[i];
    const double dt = span(c->t0, c->t1, threads);
    free(c);
    if (macs == 0) {
        snprintf(err, errlen, "%s: the %s probe could not run (permission refused?)", what,
                 tier);
        return IF_ENOTSUP;
    }
    *gops = dt > 0 ? 2.0 * (double)macs / dt / 1e9 : 0.0;
    return IF_OK;
}

if_status ifb_peak_int8(const char *tier, size_t threads, size_t iters, double *gops,
                        char *err, size_t errlen) {
    return run_probe("peak", peak_fn, tier, threads, iters, gops, err, errlen);
}

if_status ifb_mix_int8(const char *tier, size_t threads, size_t iters, double *gops,
                       char *err, size_t errlen) {
    return run_probe("mix", mix_fn, tier, threads, iters, gops, err, errlen);
}
