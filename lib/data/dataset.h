/* dataset.h — what the data-set readers share (internal). */
#ifndef DLRT_DATA_DATASET_H
#define DLRT_DATA_DATASET_H

#include "dlrt.h"

/* Unmaps a data set opened from a record file with DLRT_DATASET_MMAP. */
void dlrt__dataset_unmap(dlrt_dataset *d);

/* dlrt_dataset_load_flags, also saying in `files` which file(s) it read:
 * the record file, or "IMAGES, LABELS" (files_size 0: not wanted). */
int dlrt__dataset_load_split(const char *where, int test, int flags, dlrt_dataset *out,
                             char *files, size_t files_size);

#endif
