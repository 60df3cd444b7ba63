/* threadpool.c - a small pthread pool for parallel loops over output rows.
 *
 * The caller is thread 0; workers 1..n-1 wait for jobs. A decode step issues a few hundred
 * short parallel loops, so waking a sleeping thread each time (tens of microseconds) would
 * cost more than the work: workers and the caller first spin on the job generation for a
 * while, and only then sleep on a condition variable.
 *
 * Work splitting: a job splits [0, n) into contiguous chunks (a few per thread, each a whole
 * number of `grain`s, sizes differing by at most one grain) that the threads claim one at a
 * time from an atomic counter, lowest first. A slow or preempted thread holds only the chunk
 * it claimed: the others take the rest, and the caller waits for the chunks, not for every
 * worker (a worker that wakes after its job's chunks are gone just goes back to waiting).
 * Which thread computes a chunk never changes a result: every output row is computed start
 * to finish by one thread, and `tid` (the thread's fixed id) only picks per-thread scratch.
 *
 * The claim counter holds (job generation, 32 bits | threads allowed to claim, 16 bits |
 * chunks left, 16 bits) in one word, so a claim made with a stale generation fails and a
 * successful claim pins the job: its fields stay valid until the claimed chunk is done. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "isaforge.h"

#define SPIN_ITERS (1u << 14) /* polls before sleeping */
#define SPIN_PAUSES 512       /* the first polls just pause; later ones yield the core, so a
                                 thread we wait for can run when the machine is oversubscribed */
#define CHUNKS_PER_THREAD 4   /* chunks a job is cut into, per thread allowed to claim */
#define MAX_THREADS 256       /* fits the counter's 16-bit fields (chunks <= 4 * 256) */

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
    atomic_ulong generation;    /* bumped for every job (release: the job is set) */
    atomic_uint_least64_t claim; /* (generation & 0xffffffff) << 32 | active << 16 | left */
    atomic_size_t finished;     /* chunks of the current job done */
    atomic_int stop;
    /* the current job, written by the caller before publishing it; read by a thread only
     * after it claimed one of the job's chunks */
    if_task_fn fn;
    void *ctx;
    size_t n, grain, units, n_chunks;
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

/* Claim and run chunks of job `gen` (low 32 bits) on thread `id` until none is left. */
static void run_chunks(if_pool *pool, uint32_t gen, size_t id) {
    uint_least64_t c = atomic_load_explicit(&pool->claim, memory_order_acquire);
    for (;;) {
        size_t active = (size_t)(c >> 16) & 0xffff, left = (size_t)(c & 0xffff);
        if ((uint32_t)(c >> 32) != gen || id >= active || left == 0) return;
        if (!atomic_compare_exchange_weak_explicit(&pool->claim, &c, c - 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* the job cannot finish before this chunk does: its fields are stable until then */
        const size_t n_chunks = pool->n_chunks, units = pool->units, grain = pool->grain;
        const size_t k = n_chunks - left;
        size_t u0 = units / n_chunks * k + (k < units % n_chunks ? k : units % n_chunks);
        size_t u1 = u0 + units / n_chunks + (k < units % n_chunks ? 1 : 0);
        size_t t0 = u0 * grain, t1 = u1 * grain < pool->n ? u1 * grain : pool->n;
        pool->fn(pool->ctx, t0, t1, id);
        if (atomic_fetch_add_explicit(&pool->finished, 1, memory_order_acq_rel) + 1 ==
            n_chunks) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
            return; /* that was the last chunk */
        }
        c = atomic_load_explicit(&pool->claim, memory_order_acquire);
    }
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
        run_chunks(pool, (uint32_t)g, id);
    }
}

if_pool *if_pool_create(size_t n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    if_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = 1;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->claim, 0);
    atomic_init(&pool->finished, 0);
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

void if_pool_parallel_for_n(if_pool *pool, size_t n, size_t grain, size_t max_threads,
                            if_task_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain < 1) grain = 1;
    size_t active = pool ? pool->n_threads : 1;
    if (max_threads >= 1 && max_threads < active) active = max_threads;
    const size_t units = n / grain + (n % grain != 0);
    if (active == 1 || units == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    const size_t n_chunks = units < active * CHUNKS_PER_THREAD ? units : active * CHUNKS_PER_THREAD;
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n = n;
    pool->grain = grain;
    pool->units = units;
    pool->n_chunks = n_chunks;
    atomic_store_explicit(&pool->finished, 0, memory_order_relaxed);
    const unsigned long g =
        atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1; /* only we write it */
    atomic_store_explicit(&pool->claim,
                          (uint_least64_t)(uint32_t)g << 32 | (uint_least64_t)active << 16 |
                              (uint_least64_t)n_chunks,
                          memory_order_release);
    pthread_mutex_lock(&pool->mu);
    atomic_store_explicit(&pool->generation, g, memory_order_release);
    pthread_cond_broadcast(&pool->start);
    pthread_mutex_unlock(&pool->mu);

    run_chunks(pool, (uint32_t)g, 0);

    /* wait for the chunks other threads claimed (never for a worker that claimed none) */
    for (unsigned i = 0;
         atomic_load_explicit(&pool->finished, memory_order_acquire) < n_chunks && i < SPIN_ITERS;
         i++)
        spin_wait(i);
    if (atomic_load_explicit(&pool->finished, memory_order_acquire) < n_chunks) {
        pthread_mutex_lock(&pool->mu);
        while (atomic_load_explicit(&pool->finished, memory_order_acquire) < n_chunks)
            pthread_cond_wait(&pool->done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
}

void if_pool_parallel_for(if_pool *pool, size_t n, size_t grain, if_task_fn fn, void *ctx) {
    if_pool_parallel_for_n(pool, n, grain, 0, fn, ctx);
}
