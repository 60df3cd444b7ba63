/* sampler.c - llama2.c run.c's sampler: xorshift* RNG, softmax, argmax, multinomial, top-p.
 * The top-p sort is stable (descending probability, then ascending index), where run.c's
 * qsort leaves ties in an unspecified order. */
#include <math.h>
#include <stdlib.h>

#include "detmath.h"
#include "isaforge.h"

uint32_t if_random_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

float if_random_f32(uint64_t *state) { return (float)(if_random_u32(state) >> 8) / 16777216.0f; }

void if_softmax(float *x, size_t n) {
    if (n == 0) return;
    float max_val = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > max_val) max_val = x[i];
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        x[i] = if_expf(x[i] - max_val);
        sum += x[i];
    }
    for (size_t i = 0; i < n; i++) x[i] /= sum;
}

static int32_t argmax(const float *p, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (p[i] > p[best]) best = i;
    return (int32_t)best;
}

static int32_t sample_mult(const float *p, size_t n, float coin) {
    float cdf = 0.0f;
    for (size_t i = 0; i < n; i++) {
        cdf += p[i];
        if (coin < cdf) return (int32_t)i;
    }
    return (int32_t)(n - 1);
}

/* Merge sort of candidate indices by descending probability; ties keep index order. */
static void sort_desc(uint32_t *idx, uint32_t *tmp, size_t n, const float *p) {
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi) tmp[o++] = p[idx[b]] > p[idx[a]] ? idx[b++] : idx[a++];
            while (a < mid) tmp[o++] = idx[a++];
            while (b < hi) tmp[o++] = idx[b++];
        }
        for (size_t i = 0; i < n; i++) idx[i] = tmp[i];
    }
}

static int32_t sample_topp(const float *p, size_t n, float topp, uint32_t *scratch, float coin) {
    uint32_t *idx = scratch, *tmp = scratch + n;
    size_t n0 = 0;
    const float cutoff = (1.0f - topp) / (float)(n - 1);
    for (size_t i = 0; i < n; i++)
        if (p[i] >= cutoff) idx[n0++] = (uint32_t)i;
    if (n0 == 0) return argmax(p, n); /* run.c would read probindex[-1] here */
    sort_desc(idx, tmp, n0, p);
    float cumulative = 0.0f;
    size_t last = n0 - 1;
    for (size_t i = 0; i < n0; i++) {
        cumulative += p[idx[i]];
        if (cumulative > topp) {
            last = i;
            break;
        }
    }
    float r = coin * cumulative;
    float cdf = 0.0f;
    for (size_t i = 0; i <= last; i++) {
        cdf += p[idx[i]];
        if (r < cdf) return (int32_t)idx[i];
    }
    return (int32_t)idx[last];
}

int32_t if_sample(float *logits, size_t n, float temperature, float topp, uint64_t *state,
                  uint32_t *scratch) {
    if (n == 0) return -1;
    if (temperature == 0.0f) return argmax(logits, n);
    for (size_t i = 0; i < n; i++) logits[i] /= temperature;
    if_softmax(logits, n);
    float coin = if_random_f32(state);
    if (topp <= 0.0f || topp >= 1.0f || n < 2) return sample_mult(logits, n, coin);
    return sample_topp(logits, n, topp, scratch, coin);
}
