/*
 * test-param-disk-fit.c — dlrt__param_disk_fit (internal: built from its
 * own source), the planner's question of whether and how streamed
 * parameters' optimizer state fits a --host-limit: all of it in host
 * memory when it fits; past that, the largest states kept while they fit
 * beside four slots and the rest on disk, chunked; gpt2-medium's embedding
 * (412 MB of Adam state) on disk under 256 MiB in 16 MiB chunks; the chunk
 * halved (a multiple of 64 elements) until the slots fit; a budget below
 * the least chunks' slots refused with the least named; and, over a sweep
 * of budgets, every answer within its budget with every byte accounted for;
 * and dlrt__param_disk_fit_masters, --host-limit's rule: the masters stay
 * while the state's slots fit beside them, else they go to disk with their
 * state (three parts a chunk for Adam).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/param_disk.h"
#include "tap.h"

/* gpt2-medium's parameters (24 blocks of 1024, vocabulary 50257, context
 * 1024), all trained by Adam. */
enum { GPT2_MEDIUM_MAX = 2 + 24 * 12 + 2 };
static int gpt2_medium(int64_t *numel, int *n_state) {
  int n = 0;
  const int64_t c = 1024;
  numel[n++] = 50257 * c, numel[n++] = 1024 * c; /* token and position embeddings */
  for (int b = 0; b < 24; b++) {
    const int64_t block[12] = {c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c,
                               4 * c * c, c};
    for (int k = 0; k < 12; k++) numel[n++] = block[k];
  }
  numel[n++] = c, numel[n++] = c; /* the last layer norm */
  for (int i = 0; i < n; i++) n_state[i] = 2;
  return n;
}

/* Every byte of state either kept or on disk, within the budget, the
 * chunk a multiple of 64 elements (or a whole tensor). */
static int consistent(const dlrt__param_disk_fit_t *f, uint64_t limit, int64_t largest) {
  return f->fits && f->host_bytes <= limit &&
         f->host_bytes - f->slot_bytes + f->disk_bytes == f->state_bytes &&
         (!f->n_on_disk || (f->chunk > 0 && (f->chunk % DLRT__PDISK_CHUNK_LEAST == 0 ||
                                             f->chunk == largest)));
}

int main(void) {
  int64_t numel[GPT2_MEDIUM_MAX];
  int n_state[GPT2_MEDIUM_MAX];
  char on_disk[GPT2_MEDIUM_MAX];
  int n = gpt2_medium(numel, n_state);
  dlrt__param_disk_fit_t f;
  unsetenv("DLRT_PARAM_DISK_CHUNK");

  uint64_t state = 0;
  for (int i = 0; i < n; i++) state += (uint64_t)numel[i] * 8;
  ok(dlrt__param_disk_fit(n, numel, n_state, state, 0, &f, on_disk) == 0 && f.fits &&
         f.n_on_disk == 0 && f.host_bytes == state && f.disk_bytes == 0 &&
         f.state_bytes == state,
     "a budget of all of the state (%.1f MiB): all of it in host memory",
     (double)state / 1048576.0);
  ok(dlrt__param_disk_fit(n, numel, n_state, 0, 0, &f, NULL) == 0 && f.fits && !f.n_on_disk,
     "no budget: all of it in host memory");

  uint64_t limit = (uint64_t)256 << 20;
  int rc = dlrt__param_disk_fit(n, numel, n_state, limit, 0, &f, on_disk);
  ok(rc == 0 && consistent(&f, limit, numel[0]) && on_disk[0] &&
         f.chunk == DLRT__PDISK_CHUNK_DEFAULT && f.n_slots == DLRT__PDISK_SLOTS &&
         f.slot_bytes == (uint64_t)DLRT__PDISK_SLOTS * 2 * DLRT__PDISK_CHUNK_DEFAULT * 4,
     "gpt2-medium under 256 MiB: the embedding's %.0f MB of state on disk (more than the "
     "budget), through %d slots of 16 MiB chunks (%.0f MiB), %.1f MiB kept, %.1f MiB on disk",
     (double)numel[0] * 8 / 1e6, f.n_slots, (double)f.slot_bytes / 1048576.0,
     (double)(f.host_bytes - f.slot_bytes) / 1048576.0, (double)f.disk_bytes / 1048576.0);

  limit = (uint64_t)100 << 20;
  rc = dlrt__param_disk_fit(n, numel, n_state, limit, 0, &f, on_disk);
  ok(rc == 0 && consistent(&f, limit, numel[0]) && f.chunk < DLRT__PDISK_CHUNK_DEFAULT &&
         f.slot_bytes <= limit && f.slot_bytes * 2 > limit / 2,
     "under 100 MiB the chunk is halved until the slots fit: %lld elements, slots %.1f MiB",
     (long long)f.chunk, (double)f.slot_bytes / 1048576.0);

  rc = dlrt__param_disk_fit(n, numel, n_state, 1000, 0, &f, on_disk);
  ok(rc == 0 && !f.fits && f.least_host_bytes == DLRT__PDISK_SLOTS * 2 * 64 * 4,
     "a budget of 1000 bytes does not fit; the least that does is named: %llu bytes (4 slots "
     "of 64 elements of two states)", (unsigned long long)f.least_host_bytes);
  rc = dlrt__param_disk_fit(n, numel, n_state, f.least_host_bytes, 0, &f, on_disk);
  int all = 1;
  for (int i = 0; i < n; i++) all &= on_disk[i];
  ok(rc == 0 && consistent(&f, f.least_host_bytes, numel[0]) && f.chunk == 64 && all,
     "at exactly the least: all of the state on disk, 64-element chunks");

  /* A chunk limit (DLRT_PARAM_DISK_CHUNK's bytes): chunks no larger. */
  setenv("DLRT_PARAM_DISK_CHUNK", "1000000", 1);
  ok(dlrt__param_disk_chunk_most() == 249984, "DLRT_PARAM_DISK_CHUNK=1000000 (bytes): chunks "
     "of at most %lld elements (a multiple of 64)", (long long)dlrt__param_disk_chunk_most());
  unsetenv("DLRT_PARAM_DISK_CHUNK");

  /* SGD (one state) beside Adam: the slots hold the most states any has. */
  int64_t mixed[2] = {10000, 3000};
  int states[2] = {1, 2};
  rc = dlrt__param_disk_fit(2, mixed, states, 30000, 0, &f, on_disk);
  ok(rc == 0 && consistent(&f, 30000, 10000) && f.state_bytes == 10000 * 4 + 3000 * 8,
     "one SGD and one Adam parameter under 30000 bytes: %d on disk, chunk %lld, host %llu",
     f.n_on_disk, (long long)f.chunk, (unsigned long long)f.host_bytes);

  /* A sweep: every budget at or above the least fits, within itself. */
  int good = 1, tried = 0;
  for (uint64_t b = 2048; b < state + state / 4; b = b * 3 / 2 + 4096, tried++) {
    rc = dlrt__param_disk_fit(n, numel, n_state, b, 0, &f, on_disk);
    if (rc != 0 || !consistent(&f, b, numel[0])) {
      diag("budget %llu: fits %d host %llu slots %llu disk %llu chunk %lld",
           (unsigned long long)b, f.fits, (unsigned long long)f.host_bytes,
           (unsigned long long)f.slot_bytes, (unsigned long long)f.disk_bytes,
           (long long)f.chunk);
      good = 0;
      break;
    }
  }
  ok(good, "%d budgets from 2 KiB to past the whole state: each fits within itself, every byte "
     "kept or on disk", tried);

  /* --host-limit's rule (dlrt__param_disk_fit_masters): the masters and
   * the state together. gpt2-medium's masters are 1.35 GiB. */
  n = gpt2_medium(numel, n_state);
  uint64_t masters = state / 2;
  int with_masters = -1;
  rc = dlrt__param_disk_fit_masters(n, numel, n_state, masters + state, 0, &f, on_disk,
                                    &with_masters);
  ok(rc == 0 && f.fits && !with_masters && f.n_on_disk == 0 && f.host_bytes == state,
     "masters and state within the budget: all in host memory, the masters not on disk");
  rc = dlrt__param_disk_fit_masters(n, numel, n_state, masters + state / 4, 0, &f, on_disk,
                                    &with_masters);
  ok(rc == 0 && !with_masters && consistent(&f, state / 4, numel[0]) && f.n_on_disk > 0,
     "the masters and a quarter of the state: the masters stay, the state is split under the "
     "quarter (%d on disk, %.1f MiB)", f.n_on_disk, (double)f.disk_bytes / 1048576.0);
  rc = dlrt__param_disk_fit_masters(n, numel, n_state, state / 4, 0, &f, on_disk,
                                    &with_masters);
  uint64_t kept_masters = 0;
  for (int i = 0; i < n; i++)
    if (!on_disk[i]) kept_masters += (uint64_t)numel[i] * 4;
  ok(rc == 0 && with_masters && f.fits && f.host_bytes <= state / 4 &&
         f.state_bytes == masters + state &&
         f.host_bytes - f.slot_bytes - f.stage_bytes + f.disk_bytes == masters + state &&
         f.slot_bytes == (uint64_t)DLRT__PDISK_SLOTS * 3 * (uint64_t)f.chunk * 4 &&
         f.stage_bytes == (uint64_t)DLRT__PDISK_STAGES * (uint64_t)f.chunk * 4 &&
         kept_masters < masters / 2,
     "a quarter of the state, below the masters: masters go to disk with their state, three "
     "parts a slot and %d chunks of the masters' staging beside them (%.1f MiB on disk, %.1f "
     "MiB of masters kept)", (int)DLRT__PDISK_STAGES, (double)f.disk_bytes / 1048576.0,
     (double)kept_masters / 1048576.0);
  rc = dlrt__param_disk_fit_masters(n, numel, n_state, 2048, 0, &f, on_disk, &with_masters);
  ok(rc == 0 && !f.fits && with_masters &&
         f.least_host_bytes == (DLRT__PDISK_SLOTS * 3 + DLRT__PDISK_STAGES) * 64 * 4,
     "2 KiB: refused, the least %llu bytes (four slots of 64 elements of master and moments, "
     "four of the masters' staging)",
     (unsigned long long)f.least_host_bytes);
  return done_testing();
}
