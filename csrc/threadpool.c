/* threadpool.c - a small pthread pool for parallel loops over output rows.
 *
 * The caller is thread 0; workers 1..n-1 wait for jobs. A decode step issues a few hundred
 * short parallel loops, so waking a sleeping thread each time (tens of microseconds) would
 * cost more than the work: workers and the caller first spin on an atomic job counter for a
 * while, and only then sleep on a condition variable. A job splits [0, n) into n_threads
 * contiguous chunks whose sizes differ by at most one grain, so no thread is left with the
 * whole remainder. Which thread computes a row never changes a result: every output row is
 * computed start to finish by one thread. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "isaforge.h"

#define SPIN_ITERS (1u << 14) /* polls before sleeping */
#define SPIN_PAUSES 512       /* the first polls just pause; later ones yield the core, so a
                                 thread we wait for can run when the machine is oversubscribed */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __asm__ volatile("pause" ::: "memory")
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

struct if_pool {
    size_t n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    atomic_ulong generation; /* bumped for every job (release: the job fields are set) */
    atomic_size_t pending;   /* workers still running the current job */
    atomic_int stop;
    /* the current job, written by the caller before bumping generation */
    if_task_fn fn;
    void *ctx;
    size_t n, grain;
};

static void spin_wait(unsigned i) {
    if (i < SPIN_PAUSES)
        cpu_relax();
    else
        sched_yield();
}

typedef struct worker_arg {
    if_pool *pool;
    size_t id;
} worker_arg;

/* Chunk of thread `id` out of `nt` for n items in units of `grain`. */
static void chunk(size_t n, size_t grain, size_t nt, size_t id, size_t *t0, size_t *t1) {
    size_t units = (n + grain - 1) / grain;
    size_t base = units / nt, extra = units % nt;
    size_t u0 = id * base + (id < extra ? id : extra);
    size_t u1 = u0 + base + (id < extra ? 1 : 0);
    *t0 = u0 * grain < n ? u0 * grain : n;
    *t1 = u1 * grain < n ? u1 * grain : n;
}

static void *worker_main(void *p) {
    worker_arg *a = p;
    if_pool *pool = a->pool;
    size_t id = a->id;
    free(a);
    unsigned long seen = 0;
    for (;;) {
        unsigned long g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        for (unsigned i = 0; g == seen && i < SPIN_ITERS && !atomic_load(&pool->stop); i++) {
            spin_wait(i);
            g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&pool->mu);
            while (!atomic_load(&pool->stop) &&
                   (g = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&pool->start, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = g;

        size_t t0, t1;
        chunk(pool->n, pool->grain, pool->n_threads, id, &t0, &t1);
        if (t0 < t1) pool->fn(pool->ctx, t0, t1, id);

        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

if_pool *if_pool_create(size_t n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) n_threads = 256;
    if_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = 1;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, 0);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->start, NULL);
    pthread_cond_init(&pool->done, NULL);
    pool->threads = calloc(n_threads, sizeof(pthread_t));
    if (!pool->threads) {
        if_pool_free(pool);
        return NULL;
    }
    for (size_t i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) break;
        a->pool = pool;
        a->id = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, a) != 0) {
            free(a);
            break;
        }
        pool->n_threads = i + 1;
    }
    return pool;
}

void if_pool_free(if_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->start);
    pthread_mutex_unlock(&pool->mu);
    for (size_t i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->start);
    pthread_cond_destroy(&pool->done);
    free(pool->threads);
    free(pool);
}

size_t if_pool_threads(const if_pool *pool) { return pool ? pool->n_threads : 1; }

void if_pool_parallel_for(if_pool *pool, size_t n, size_t grain, if_task_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain < 1) grain = 1;
    if (!pool || pool->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n = n;
    pool->grain = grain;
    atomic_store_explicit(&pool->pending, pool->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->start);
    pthread_mutex_unlock(&pool->mu);

    size_t t0, t1;
    chunk(n, grain, pool->n_threads, 0, &t0, &t1);
    if (t0 < t1) fn(ctx, t0, t1, 0);

    for (unsigned i = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0 &&
                         i < SPIN_ITERS;
         i++)
        spin_wait(i);
    if (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&pool->mu);
        while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0)
            pthread_cond_wait(&pool->done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
}
