/* state_split.c — the optimizer state of streamed parameters between host
 * memory and disk (state_split.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/state_split.h"
#include "util/status.h"

int dlrt__state_split_make(int n, const uint64_t *bytes, const int *n_state, uint64_t budget,
                           char *disk, dlrt__state_split *out) {
  memset(out, 0, sizeof *out);
  out->fits = 1;
  if (disk) memset(disk, 0, (size_t)(n > 0 ? n : 0));
  if (n <= 0) return DLRT_OK;
  int64_t *numel = malloc(sizeof *numel * (size_t)n);
  if (!numel) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < n; i++)
    numel[i] = (int64_t)(bytes[i] / ((uint64_t)n_state[i] * sizeof(float)));
  dlrt__param_disk_fit_t fit;
  char *mine = disk ? disk : calloc((size_t)n, 1);
  int rc = mine ? dlrt__param_disk_fit_masters(n, numel, n_state, budget, 0, &fit, mine,
                                               &out->masters)
                : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; rc == DLRT_OK && out->masters && i < n; i++)
    if (mine[i]) out->master_disk_bytes += (uint64_t)numel[i] * 4u;
  if (mine != disk) free(mine);
  free(numel);
  if (rc < 0) return rc;
  out->fits = fit.fits;
  out->on_disk = fit.n_on_disk;
  out->n_slots = fit.n_slots;
  out->slot_bytes = fit.n_slots ? fit.slot_bytes / (uint64_t)fit.n_slots : 0;
  out->stage_bytes = fit.stage_bytes;
  out->host_bytes = fit.host_bytes - fit.slot_bytes - fit.stage_bytes;
  out->disk_bytes = fit.disk_bytes;
  out->least_host_bytes = fit.least_host_bytes;
  return DLRT_OK;
}

int dlrt__streamed_states(const dlrt_graph_t *g, int *n, int **id, uint64_t **bytes,
                          int **n_state) {
  *n = 0, *id = NULL, *bytes = NULL, *n_state = NULL;
  size_t cap = (size_t)(g->n_nodes ? g->n_nodes : 1);
  char *seen = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), 1);
  *id = malloc(sizeof **id * cap);
  *bytes = malloc(sizeof **bytes * cap);
  *n_state = malloc(sizeof **n_state * cap);
  if (!seen || !*id || !*bytes || !*n_state) {
    free(seen), free(*id), free(*bytes), free(*n_state);
    *id = NULL, *bytes = NULL, *n_state = NULL;
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
    (*n_state)[*n] = states;
    (*bytes)[(*n)++] = (uint64_t)dlrt__tensor_bytes(param) * (uint64_t)states;
  }
  free(seen);
  return DLRT_OK;
}
