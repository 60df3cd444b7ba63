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
#include "threadpool.h"

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
    /* the current parallel region's steps (if_region): chunks claimed and done over all its
     * steps so far (both only grow during a region), threads sleeping in if_step_wait */
    atomic_size_t step_claimed, step_done;
    atomic_int step_sleepers;
    pthread_cond_t step_wake;
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
    pthread_cond_init(&pool->step_wake, NULL);
    atomic_init(&pool->step_claimed, 0);
    atomic_init(&pool->step_done, 0);
    atomic_init(&pool->step_sleepers, 0);
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
    pthread_cond_destroy(&pool->step_wake);
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

/* ---- one parallel region: every thread walks the same steps ---- */

typedef struct region_job {
    if_pool *pool;
    size_t team;
    if_region_fn fn;
    void *ctx;
} region_job;

/* One chunk of the region job is one walker; tid is the thread running it. */
static void region_task(void *ctx, size_t t0, size_t t1, size_t tid) {
    const region_job *r = ctx;
    for (size_t t = t0; t < t1; t++) {
        if_walker w = {.pool = r->pool, .tid = tid, .team = r->team};
        r->fn(r->ctx, &w);
    }
}

void if_region(if_pool *pool, size_t max_threads, if_region_fn fn, void *ctx) {
    size_t team = pool ? pool->n_threads : 1;
    if (max_threads >= 1 && max_threads < team) team = max_threads;
    if (!pool || team == 1) {
        if_walker w = {.pool = NULL, .tid = 0, .team = 1}; /* the caller alone, no atomics */
        fn(ctx, &w);
        return;
    }
    /* published to the workers by the job's generation (release) */
    atomic_store_explicit(&pool->step_claimed, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->step_done, 0, memory_order_relaxed);
    region_job r = {pool, team, fn, ctx};
    /* team walkers, one chunk each: a walker a thread has not woken for yet is run by one that
     * is awake (it then finds its steps' chunks taken and only passes through them) */
    if_pool_parallel_for_n(pool, team, 1, team, region_task, &r);
}

void if_step(if_walker *w, size_t n, size_t grain, size_t max_threads, size_t per_thread) {
    if (grain < 1) grain = 1;
    size_t allowed = w->team;
    if (max_threads >= 1 && max_threads < allowed) allowed = max_threads;
    const size_t units = n / grain + (n % grain != 0);
    size_t n_chunks = allowed == 1 || per_thread == 0 ? 1 : allowed * per_thread;
    if (n_chunks > units) n_chunks = units;
    w->start = w->base;
    w->base += n_chunks;
    w->n = n;
    w->grain = grain;
    w->units = units;
    w->n_chunks = n_chunks;
    w->allowed = allowed;
}

/* Mark the chunk w holds done; wake the threads sleeping in if_step_wait. */
static void step_release(if_walker *w) {
    if_pool *pool = w->pool;
    w->held = 0;
    if (!pool) return;
    atomic_fetch_add_explicit(&pool->step_done, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&pool->step_sleepers, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->step_wake);
        pthread_mutex_unlock(&pool->mu);
    }
}

/* Tapered chunks: a step of several chunks per thread cuts chunk k (of nc) to nc - k shares
 * (the first the largest, the last one share), so the threads finish together to within the
 * last, small chunks, for the same number of claims. Chunk k starts at share taper_sum(nc, k)
 * of taper_total(nc); used when every chunk gets at least one unit (units >= the total).
 * Which thread computes which rows never changes a result. */
static size_t taper_sum(size_t nc, size_t k) { return k * nc - k * (k - 1) / 2; }
static size_t taper_total(size_t nc) { return nc * (nc + 1) / 2; }

int if_step_next(if_walker *w, size_t *t0, size_t *t1) {
    if (w->held) step_release(w);
    const size_t end = w->start + w->n_chunks;
    size_t c, k;
    if (!w->pool) { /* no pool: one walker claims in order */
        if (w->cursor < w->start) w->cursor = w->start;
        if (w->cursor >= end) return 0;
        c = w->cursor++;
    } else {
        if (w->tid >= w->allowed) return 0;
        c = atomic_load_explicit(&w->pool->step_claimed, memory_order_acquire);
        do {
            if (c >= end) return 0;
        } while (!atomic_compare_exchange_weak_explicit(&w->pool->step_claimed, &c, c + 1,
                                                        memory_order_acq_rel,
                                                        memory_order_acquire));
        w->held = 1;
    }
    k = c - w->start;
    const size_t units = w->units, nc = w->n_chunks;
    size_t u0, u1;
    if (nc > w->allowed && units >= taper_total(nc)) {
        u0 = units * taper_sum(nc, k) / taper_total(nc);
        u1 = units * taper_sum(nc, k + 1) / taper_total(nc);
    } else {
        u0 = units / nc * k + (k < units % nc ? k : units % nc);
        u1 = u0 + units / nc + (k < units % nc ? 1 : 0);
    }
    *t0 = u0 * w->grain;
    *t1 = u1 * w->grain < w->n ? u1 * w->grain : w->n;
    return 1;
}

void if_step_wait(if_walker *w) {
    if_pool *pool = w->pool;
    if (!pool || w->team == 1) return;
    const size_t want = w->base;
    for (unsigned i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&pool->step_done, memory_order_acquire) >= want) return;
        spin_wait(i);
    }
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add_explicit(&pool->step_sleepers, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&pool->step_done, memory_order_seq_cst) < want)
        pthread_cond_wait(&pool->step_wake, &pool->mu);
    atomic_fetch_sub_explicit(&pool->step_sleepers, 1, memory_order_seq_cst);
    pthread_mutex_unlock(&pool->mu);
}
