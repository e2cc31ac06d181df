/* param_disk_fit.c — whether and how the optimizer state of streamed
 * parameters fits a host budget (param_disk.h, dlrt__param_disk_fit): the
 * executor follows it (dlrt_exec_param_state_limit), and the planner can
 * ask it without an executor. Arithmetic only. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "exec/param_disk.h"
#include "util/status.h"

int64_t dlrt__param_disk_chunk_most(void) {
  const char *v = getenv("DLRT_PARAM_DISK_CHUNK");
  long long bytes = v ? atoll(v) : 0;
  int64_t most = bytes > 0 ? (int64_t)(bytes / 4) : DLRT__PDISK_CHUNK_DEFAULT;
  most -= most % DLRT__PDISK_CHUNK_LEAST;
  return most < DLRT__PDISK_CHUNK_LEAST ? DLRT__PDISK_CHUNK_LEAST : most;
}

/* The slots' bytes for chunks of `chunk` elements (the largest parameter
 * on disk bounds it: a slot need not be larger than a whole state), and
 * `stages` staging buffers of a chunk of one state beside them. */
static uint64_t slots_bytes(int64_t chunk, int64_t largest, int most_states, int stages) {
  int64_t c = chunk < largest ? chunk : largest;
  return ((uint64_t)DLRT__PDISK_SLOTS * (uint64_t)most_states + (uint64_t)stages) *
         (uint64_t)c * 4u;
}

/* dlrt__param_disk_fit with `stages` chunk buffers beside the slots (the
 * masters' staging where they are on disk). */
static int fit(int n, const int64_t *numel, const int *n_state, uint64_t host_limit,
               int64_t chunk_most, int stages, dlrt__param_disk_fit_t *out, char *on_disk) {
  memset(out, 0, sizeof *out);
  if (on_disk) memset(on_disk, 0, (size_t)(n > 0 ? n : 0));
  int64_t largest = 0;
  int most_states = 0;
  for (int i = 0; i < n; i++) {
    out->state_bytes += (uint64_t)numel[i] * (uint64_t)n_state[i] * 4u;
    if (numel[i] > largest) largest = numel[i];
    if (n_state[i] > most_states) most_states = n_state[i];
  }
  if (chunk_most <= 0) chunk_most = dlrt__param_disk_chunk_most();
  int64_t least = DLRT__PDISK_CHUNK_LEAST;
  out->least_host_bytes = largest ? slots_bytes(least, largest, most_states, stages) : 0;
  if (!host_limit || out->state_bytes <= host_limit) {
    out->fits = 1;
    out->host_bytes = out->state_bytes;
    out->least_host_bytes = out->state_bytes < out->least_host_bytes ? out->state_bytes
                                                                     : out->least_host_bytes;
    return DLRT_OK;
  }
  /* The largest chunk whose slots fit (halving from the most). */
  int64_t chunk = chunk_most;
  while (chunk > least && slots_bytes(chunk, largest, most_states, stages) > host_limit)
    chunk = (chunk / 2) - (chunk / 2) % least;
  if (chunk < least) chunk = least;
  uint64_t slots = slots_bytes(chunk, largest, most_states, stages);
  if (slots > host_limit) return DLRT_OK; /* fits = 0: least_host_bytes says what would */
  int *by_size = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!by_size) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* Largest state first (insertion sort: a model's parameter count); each
   * stays in host memory while it fits beside the slots. */
  for (int i = 0; i < n; i++) {
    int k = i;
    uint64_t b = (uint64_t)numel[i] * (uint64_t)n_state[i];
    while (k > 0 && (uint64_t)numel[by_size[k - 1]] * (uint64_t)n_state[by_size[k - 1]] < b)
      by_size[k] = by_size[k - 1], k--;
    by_size[k] = i;
  }
  uint64_t host = 0;
  for (int r = 0; r < n; r++) {
    int i = by_size[r];
    uint64_t b = (uint64_t)numel[i] * (uint64_t)n_state[i] * 4u;
    if (host + b + slots <= host_limit) {
      host += b;
    } else {
      out->disk_bytes += b;
      out->n_on_disk++;
      if (on_disk) on_disk[i] = 1;
    }
  }
  free(by_size);
  out->fits = 1;
  out->chunk = chunk < largest ? chunk : largest;
  out->n_slots = DLRT__PDISK_SLOTS;
  out->stage_bytes = slots - slots_bytes(chunk, largest, most_states, 0);
  out->slot_bytes = slots - out->stage_bytes;
  out->host_bytes = host + slots;
  return DLRT_OK;
}

int dlrt__param_disk_fit(int n, const int64_t *numel, const int *n_state, uint64_t host_limit,
                         int64_t chunk_most, dlrt__param_disk_fit_t *out, char *on_disk) {
  return fit(n, numel, n_state, host_limit, chunk_most, 0, out, on_disk);
}

int dlrt__param_disk_fit_masters(int n, const int64_t *numel, const int *n_state,
                                 uint64_t host_limit, int64_t chunk_most,
                                 dlrt__param_disk_fit_t *out, char *on_disk, int *masters) {
  uint64_t master_bytes = 0;
  for (int i = 0; i < n; i++) master_bytes += (uint64_t)numel[i] * 4u;
  *masters = 0;
  if (!host_limit) return dlrt__param_disk_fit(n, numel, n_state, 0, chunk_most, out, on_disk);
  /* The masters in host memory, the state beside them (on disk in part). */
  if (master_bytes < host_limit) {
    int rc = dlrt__param_disk_fit(n, numel, n_state, host_limit - master_bytes, chunk_most, out,
                                  on_disk);
    if (rc < 0 || out->fits) return rc;
  }
  /* Too little for that: a master goes to disk with its state. */
  int *parts = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!parts) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < n; i++) parts[i] = n_state[i] + 1;
  /* The masters' fetches read through a staging of their own beside the slots. */
  int rc = fit(n, numel, parts, host_limit, chunk_most, DLRT__PDISK_STAGES, out, on_disk);
  free(parts);
  *masters = 1;
  return rc;
}
