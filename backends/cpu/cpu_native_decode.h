/* cpu_native_decode.h — the native version of kernels/attention.h's
 * attention_decode (one new token per sequence over its key / value caches;
 * that header defines the layout of qkv, the caches and pos), for a CPU. A
 * template like cpu_native_attention.h: each instruction set's file
 * includes it (cpu_native_isa.h).
 *
 * A task is one head of one sequence at its position p: it writes the
 * token's key and value into row p of the caches, then computes the p + 1
 * scores q . k_t (scale folded into q) straight from the cache rows, the
 * softmax exactly (the maximum, then exp and the sum: all the scores fit
 * the task's scratch, `capacity` floats), and o = sum_t p_t v_t / sum_t
 * p_t, reading each cache row once per pass. The work is O(p D) per head
 * and nothing is copied but the query. Sums along D and along the scores
 * keep RL partial sums (RL_ROW_SUM) and o adds its terms in order t = 0, 1,
 * ... with an FMA each: the same bits for every VL, whatever the thread
 * count. The dialect's kernel computes the same within rounding (its
 * softmax is online, over tiles). */

/* Arguments (kernel_table.h): o, kc, vc, qkv, pos, then batch, capacity,
 * heads, head_dim, rows (the dialect's tile, not used here), scale. */
typedef struct {
  float *o, *kc, *vc;
  const float *qkv;
  const int32_t *pos;
  int64_t batch, capacity, heads, d, dp, c;
  float scale;
  size_t per_part; /* floats of scratch per part */
  float *scratch;
} dec_job;

static void dec_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const dec_job *j = ctx;
  int64_t d = j->d, dp = j->dp, c = j->c;
  float *q = j->scratch + (size_t)part * j->per_part; /* the query times scale, dp */
  float *acc = q + dp;                                /* sum of p v, dp */
  float *s = acc + dp;                                /* scores, then p: capacity */
  for (int64_t task = lo; task < hi; task++) {
    int64_t b = task / j->heads, h = task - b * j->heads, p = j->pos[b];
    const float *row = j->qkv + b * 3 * c + h * d; /* this token's query of head h */
    float *o = j->o + b * c + h * d;
    if (p < 0 || p >= j->capacity) {
      memset(o, 0, (size_t)d * sizeof *o);
      continue;
    }
    float *kc = j->kc + b * j->capacity * c + h * d, *vc = j->vc + b * j->capacity * c + h * d;
    memcpy(kc + p * c, row + c, (size_t)d * sizeof *kc);
    memcpy(vc + p * c, row + 2 * c, (size_t)d * sizeof *vc);
    for (int64_t k = 0; k < dp; k++) q[k] = k < d ? row[k] * j->scale : 0.0f;
    int64_t keys = p + 1;
    float top = -__builtin_inff();
    for (int64_t t = 0; t < keys; t++) {
      const float *kt = kc + t * c;
      if (t + 4 < keys) __builtin_prefetch(kc + (t + 4) * c);
      s[t] = RL_ROW_SUM(d, RL_AT(q, 0.0f) * RL_AT(kt, 0.0f));
      top = s[t] > top ? s[t] : top;
    }
    int64_t t = 0;
    for (; t + VL <= keys; t += VL) vf_store(s + t, vf_exp(vf_load(s + t) - top));
    for (; t < keys; t++) {
      vf one = vf_exp(vf_splat(s[t] - top)); /* the same exp as the lanes above */
      s[t] = one[0];
    }
    float sum = RL_ROW_SUM(keys, RL_AT(s, 0.0f));
    for (int64_t k = 0; k < dp; k += VL) vf_store(acc + k, vf_splat(0.0f));
    for (t = 0; t < keys; t++) {
      const float *vt = vc + t * c;
      if (t + 4 < keys) __builtin_prefetch(vc + (t + 4) * c);
      vf pt = vf_splat(s[t]);
      int64_t k = 0;
      for (; k + VL <= d; k += VL) vf_store(acc + k, vf_fma(pt, vf_load(vt + k), vf_load(acc + k)));
      if (k < d)
        vf_store(acc + k, vf_fma(pt, vf_load_part(vt + k, d - k, 0.0f), vf_load(acc + k)));
    }
    for (int64_t k = 0; k < d; k++) o[k] = acc[k] / sum;
  }
}

static int native_attention_decode(const dlrt__arg *a) {
  dec_job j = {.o = NA_BUF(0, float), .kc = NA_BUF(1, float), .vc = NA_BUF(2, float),
               .qkv = NA_BUF(3, const float), .pos = NA_BUF(4, const int32_t),
               .batch = a[5].i, .capacity = a[6].i, .heads = a[7].i, .d = a[8].i,
               .scale = a[10].f};
  int64_t tasks = j.batch * j.heads, longest = 0;
  if (tasks * j.d == 0) return DLRT_OK;
  j.dp = att_round(j.d);
  j.c = j.heads * j.d;
  for (int64_t b = 0; b < j.batch; b++)
    if (j.pos[b] >= 0 && j.pos[b] < j.capacity && j.pos[b] + 1 > longest) longest = j.pos[b] + 1;
  j.per_part = (size_t)((2 * j.dp + att_round(longest ? longest : 1)) + 15) / 16 * 16;
  int parts = cpu_native_parts(tasks, 2 * (longest + 1) * j.d);
  size_t bytes = (size_t)parts * j.per_part * sizeof(float);
  if (!(j.scratch = aligned_alloc(64, (bytes + 63) / 64 * 64)))
    return dlrt__set_error(DLRT_ERR_OOM, "attention_decode: out of host memory for %zu bytes "
                           "of scratch (cpu)", bytes);
  cpu_native_parallel(tasks, parts, dec_part, &j);
  free(j.scratch);
  return DLRT_OK;
}
