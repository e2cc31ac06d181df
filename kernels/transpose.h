/* transpose.h — batched matrix transpose in the portable dialect.
 * x is batch x rows x cols, y is batch x cols x rows, both row-major and of
 * one storage type (any 32- or 16-bit word: the bits move unchanged). One
 * work-group moves a 32 x 32 tile through local memory so that both the reads
 * and the writes walk along rows; the tile's extra column keeps the column
 * reads free of local-memory bank conflicts. */
#include "dialect.h"

#define DLRT__TILE 32
/* Rows of the tile a work-item handles: DLRT_WG items cover 32 x 8 at a time. */
#define DLRT__TILE_STEP (DLRT_WG / DLRT__TILE)

#define DLRT__TRANSPOSE_KERNEL(SUF, T)                                                \
  DLRT_KERNEL(dlrt_k_transpose_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),     \
                                      DLRT_INDEX batch, DLRT_INDEX rows,              \
                                      DLRT_INDEX cols) {                              \
    DLRT_BIND(T, y);                                                                  \
    DLRT_CBIND(T, x);                                                                 \
    DLRT_LOCAL(T, tile, DLRT__TILE * (DLRT__TILE + 1));                               \
    DLRT_INDEX tiles_r = (rows + DLRT__TILE - 1) / DLRT__TILE;                        \
    DLRT_INDEX tiles_c = (cols + DLRT__TILE - 1) / DLRT__TILE;                        \
    DLRT_FOR_EACH_GROUP(g, batch * tiles_r * tiles_c) {                               \
      DLRT_INDEX b = g / (tiles_r * tiles_c), t = g - b * tiles_r * tiles_c;          \
      DLRT_INDEX r0 = (t / tiles_c) * DLRT__TILE, c0 = (t % tiles_c) * DLRT__TILE;    \
      DLRT_INDEX base = b * rows * cols;                                              \
      DLRT_PHASE(lid) {                                                               \
        int tx = lid % DLRT__TILE, ty = lid / DLRT__TILE;                             \
        for (int k = ty; k < DLRT__TILE; k += DLRT__TILE_STEP)                        \
          if (r0 + k < rows && c0 + tx < cols)                                        \
            tile[k * (DLRT__TILE + 1) + tx] = x[base + (r0 + k) * cols + c0 + tx];    \
      }                                                                               \
      DLRT_BARRIER();                                                                 \
      DLRT_PHASE(lid) {                                                               \
        int tx = lid % DLRT__TILE, ty = lid / DLRT__TILE;                             \
        for (int k = ty; k < DLRT__TILE; k += DLRT__TILE_STEP)                        \
          if (c0 + k < cols && r0 + tx < rows)                                        \
            y[base + (c0 + k) * rows + r0 + tx] = tile[tx * (DLRT__TILE + 1) + k];    \
      }                                                                               \
      DLRT_BARRIER();                                                                 \
    }                                                                                 \
  }

DLRT__TRANSPOSE_KERNEL(b32, unsigned int)
DLRT__TRANSPOSE_KERNEL(b16, DLRT_U16)
