/* state_split.c — the optimizer state of streamed parameters between host
 * memory and disk (state_split.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/state_split.h"
#include "util/status.h"

typedef struct {
  uint64_t bytes;
  int index;
} sized;

/* Largest first, ties in index order: the runtime's stable insertion sort. */
static int by_size(const void *a, const void *b) {
  const sized *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return (x->index > y->index) - (x->index < y->index);
}

int dlrt__state_split_make(int n, const uint64_t *bytes, uint64_t budget, char *disk,
                           dlrt__state_split *out) {
  memset(out, 0, sizeof *out);
  out->fits = 1;
  if (disk) memset(disk, 0, (size_t)(n > 0 ? n : 0));
  if (n <= 0) return DLRT_OK;
  if (budget == 0) {
    for (int i = 0; i < n; i++) out->host_bytes += bytes[i];
    return DLRT_OK;
  }
  sized *order = malloc(sizeof *order * (size_t)n);
  if (!order) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < n; i++) order[i] = (sized){bytes[i], i};
  qsort(order, (size_t)n, sizeof *order, by_size);
  uint64_t host = 0, slot = 0;
  for (int r = 0; r < n; r++) {
    uint64_t b = order[r].bytes, next = r + 1 < n ? order[r + 1].bytes : 0;
    uint64_t slots = DLRT__STATE_SLOTS * (slot ? slot : next);
    if (host + b + slots <= budget) {
      host += b;
      continue;
    }
    if (disk) disk[order[r].index] = 1;
    out->disk_bytes += b;
    out->on_disk++;
    if (!slot) slot = b;
  }
  free(order);
  out->host_bytes = host;
  out->slot_bytes = slot;
  out->fits = !slot || host + DLRT__STATE_SLOTS * slot <= budget;
  return DLRT_OK;
}

int dlrt__streamed_states(const dlrt_graph_t *g, int *n, int **id, uint64_t **bytes) {
  *n = 0, *id = NULL, *bytes = NULL;
  size_t cap = (size_t)(g->n_nodes ? g->n_nodes : 1);
  char *seen = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), 1);
  *id = malloc(sizeof **id * cap);
  *bytes = malloc(sizeof **bytes * cap);
  if (!seen || !*id || !*bytes) {
    free(seen), free(*id), free(*bytes);
    *id = NULL, *bytes = NULL;
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const dlrt__node *nd = g->nodes[k];
    if (nd->phase != DLRT__PHASE_UPDATE || (nd->op != DLRT__OP_SGD && nd->op != DLRT__OP_ADAM))
      continue;
    const dlrt_tensor_t *param = nd->in[0];
    if (param->owner != param || param->dtype != DLRT_F32 || seen[param->id]) continue;
    seen[param->id] = 1;
    int states = nd->op == DLRT__OP_SGD ? 1 : 2;
    (*id)[*n] = param->id;
    (*bytes)[(*n)++] = (uint64_t)dlrt__tensor_bytes(param) * (uint64_t)states;
  }
  free(seen);
  return DLRT_OK;
}
