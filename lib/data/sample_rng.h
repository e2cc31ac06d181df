/* sample_rng.h — the counter-based random numbers of the data pipeline
 * (internal): each sample's draws come from (seed, epoch, sample index)
 * alone, through SplitMix64's finaliser, so the loader's batches are the
 * same for any number of workers and any timing. */
#ifndef DLRT_DATA_SAMPLE_RNG_H
#define DLRT_DATA_SAMPLE_RNG_H

#include <stdint.h>

static inline uint64_t dlrt__mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A generator for one sample of one epoch. */
typedef struct {
  uint64_t state;
} dlrt__sample_rng;

static inline dlrt__sample_rng dlrt__sample_rng_make(uint64_t seed, int epoch, int64_t index) {
  dlrt__sample_rng r = {dlrt__mix64(seed ^ dlrt__mix64((uint64_t)epoch * 0x632be59bd9b4e019ull ^
                                                       dlrt__mix64((uint64_t)index)))};
  return r;
}

static inline uint64_t dlrt__rng_next(dlrt__sample_rng *r) {
  return dlrt__mix64(r->state++ * 0xd1342543de82ef95ull);
}
/* Uniform in [0, 1). */
static inline double dlrt__rng_unit(dlrt__sample_rng *r) {
  return (double)(dlrt__rng_next(r) >> 11) * 0x1.0p-53;
}
/* Uniform in [lo, hi] (the modulo's bias is below 2^-40 for ranges under
 * 2^24, and below (hi - lo + 1) / 2^64 in general). */
static inline int64_t dlrt__rng_int(dlrt__sample_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(dlrt__rng_next(r) % (uint64_t)(hi - lo + 1));
}

#endif
