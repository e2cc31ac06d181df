/* dataset.h — what the data-set readers share (internal). */
#ifndef DLRT_DATA_DATASET_H
#define DLRT_DATA_DATASET_H

#include "dlrt.h"

/* Unmaps a data set opened from a record file with DLRT_DATASET_MMAP. */
void dlrt__dataset_unmap(dlrt_dataset *d);

#endif
