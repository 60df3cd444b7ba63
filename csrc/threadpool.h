/* threadpool.h - one parallel region per forward call (internal; csrc/threadpool.c).
 *
 * if_region runs fn on every thread of a team (the calling thread is thread 0), each with its
 * own walker. Every walker walks the same sequence of steps: if_step begins a step over task
 * indices [0, n) cut into contiguous chunks, if_step_next claims the next unclaimed chunk
 * from the region's atomic counter (lowest first) and marks the walker's previous chunk done,
 * if_step_wait waits (spin, then yield, then sleep) until every chunk of every step begun so
 * far is done: the barrier between dependent steps. A walker waits for chunks, never for a
 * particular thread: a thread that is preempted or has not woken yet holds only the chunk it
 * claimed, and a walker no thread has started is run by one that has (it passes through the
 * steps, whose chunks are all taken). Every chunk is computed start to finish by the thread
 * that claimed it, so which thread that is never changes a result.
 *
 * Rules for the walker function: every walker begins the same steps with the same arguments
 * (they depend on the call's shape, never on data another thread writes), and a loop over
 * if_step_next runs until it returns 0 (no break). */
#ifndef ISAFORGE_THREADPOOL_H
#define ISAFORGE_THREADPOOL_H

#include <stddef.h>

#include "isaforge.h"

typedef struct if_walker {
    if_pool *pool; /* NULL: a team of one (plain loops, no atomics) */
    size_t tid;    /* the thread running this walker (0 = the caller): per-thread scratch */
    size_t team;   /* threads in the region */
    size_t base;   /* chunks of every step begun so far */
    /* the current step */
    size_t start, n, grain, units, n_chunks, allowed;
    int held;      /* a claimed chunk not yet marked done */
    size_t cursor; /* a team of one: the next chunk */
} if_walker;

typedef void (*if_region_fn)(void *ctx, if_walker *w);

/* Run fn(ctx, walker) on min(max_threads, pool threads) threads (0: all; a NULL pool: one)
 * and return when every walker has returned. */
void if_region(if_pool *pool, size_t max_threads, if_region_fn fn, void *ctx);
/* Begin a step over [0, n): chunks of whole grains, per_thread chunks per thread allowed to
 * claim (threads tid < max_threads; 0: the team; one thread allowed: a single chunk).
 * per_thread 0: the whole step is one chunk, run by the first thread to claim it. */
void if_step(if_walker *w, size_t n, size_t grain, size_t max_threads, size_t per_thread);
/* Claim the next chunk [*t0, *t1) of the current step; 0 when none is left. */
int if_step_next(if_walker *w, size_t *t0, size_t *t1);
/* Wait until every chunk of every step begun so far is done. */
void if_step_wait(if_walker *w);

#endif
