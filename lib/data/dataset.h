/* dataset.h — what the data-set readers and the loader share (internal). */
#ifndef DLRT_DATA_DATASET_H
#define DLRT_DATA_DATASET_H

#include "dlrt.h"

/* Unmaps a data set opened from a record file with DLRT_DATASET_MMAP. */
void dlrt__dataset_unmap(dlrt_dataset *d);

/* dlrt_dataset_load_flags, also saying in `files` which file(s) it read:
 * the record file, or "IMAGES, LABELS" (files_size 0: not wanted). */
int dlrt__dataset_load_split(const char *where, int test, int flags, dlrt_dataset *out,
                             char *files, size_t files_size);

/* Sample `index` of image set `d` as the loader hands it out in epoch
 * `epoch`: C x H x W floats into dst, augmented and normalised as `cfg` says
 * (augment.c). */
void dlrt__decode_image(const dlrt_dataset *d, const dlrt_loader_config *cfg, int epoch,
                        int64_t index, float *dst);

/* Token windows (windows.c). The offset of window `index` in epoch `epoch`:
 * uniform in [0, n - T - 1] from (c->seed, epoch, index) when c->shuffle,
 * else index x T. */
int64_t dlrt__window_offset(const dlrt_dataset *d, const dlrt_loader_config *c, int epoch,
                            int64_t index);
/* The T + 1 tokens at `offset`: the first T into inputs, the last T into
 * labels (i32 each). DLRT_ERR_INVALID_ARG naming the position when one is
 * not below the vocabulary (d->classes). */
int dlrt__decode_window(const dlrt_dataset *d, int64_t offset, int32_t *inputs,
                        int32_t *labels);

#endif
