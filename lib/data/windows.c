/* windows.c — a token stream as a data set of windows of T tokens
 * (dlrt_dataset_from_tokens, data.h) and the windows the loader hands out:
 * at an offset drawn from (seed, epoch x count + index) when shuffling (training),
 * the consecutive ones otherwise (evaluation); T input tokens and the T
 * next tokens as labels. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "data/dataset.h"
#include "data/sample_rng.h"
#include "util/status.h"

int dlrt_dataset_from_tokens(const dlrt_tokens *t, int64_t context, dlrt_dataset *out) {
  DLRT__CHECK_ARG(out, "dlrt_dataset_from_tokens: out is NULL");
  memset(out, 0, sizeof *out);
  DLRT__CHECK_ARG(t && t->tokens && t->count > 0,
                  "dlrt_dataset_from_tokens: the token stream is NULL or empty");
  DLRT__CHECK_ARG(context >= 1 && context <= INT32_MAX,
                  "%s: context %lld; give 1 to 2^31 - 1 tokens", t->source,
                  (long long)context);
  DLRT__CHECK_ARG(t->vocab >= 1 && t->vocab <= 65536,
                  "%s: vocabulary %d; uint16 tokens allow 1 to 65536", t->source, t->vocab);
  if (t->count < context + 1)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: %lld tokens; a window of context %lld "
                           "needs %lld (its inputs and the next token of the last one): use "
                           "a shorter context or more text", t->source, (long long)t->count,
                           (long long)context, (long long)context + 1);
  /* A token past the vocabulary would index past the embedding and the
   * logits on the device: found here, once, with its position. */
  for (int64_t i = 0; i < t->count; i++)
    if (t->tokens[i] >= t->vocab)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: token %u at position %lld is not below "
                             "the vocabulary of %d: the stream and its vocabulary disagree; "
                             "prepare the token file again", t->source, t->tokens[i],
                             (long long)i, t->vocab);
  out->count = (t->count - 1) / context;
  out->channels = 1;
  out->height = 1;
  out->width = context;
  out->classes = t->vocab;
  out->image_dtype = DLRT_I32;
  out->tokens = t->tokens;
  out->token_count = t->count;
  snprintf(out->source, sizeof out->source, "%s", t->source);
  return DLRT_OK;
}

int64_t dlrt__window_offset(const dlrt_dataset *d, const dlrt_loader_config *c, int epoch,
                            int64_t index) {
  if (!c->shuffle) return index * d->width;
  /* From the sample's number in the whole run, epoch x count + index, so
   * that a window depends on (seed, step, row) alone: how the steps are
   * grouped into epochs (dltrain's rounds of --eval-every) changes nothing. */
  dlrt__sample_rng rng = dlrt__sample_rng_make(c->seed, 0, (int64_t)epoch * d->count + index);
  return dlrt__rng_int(&rng, 0, d->token_count - d->width - 1);
}

int dlrt__decode_window(const dlrt_dataset *d, int64_t offset, int32_t *inputs,
                        int32_t *labels) {
  int64_t T = d->width;
  const uint16_t *window = d->tokens + offset;
  for (int64_t t = 0; t <= T; t++)
    if (window[t] >= d->classes)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "loader: token %u at position %lld of %s "
                             "is not below the vocabulary of %d: fix the stream or the "
                             "vocabulary", window[t], (long long)(offset + t), d->source,
                             d->classes);
  for (int64_t t = 0; t < T; t++) {
    inputs[t] = window[t];
    labels[t] = window[t + 1];
  }
  return DLRT_OK;
}
