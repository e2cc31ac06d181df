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

/* y = the elements of a strided view of x, dense: y[i0, i1, i2, j] =
 * x[i0 t0 + i1 t1 + i2 t2 + j t3] over an n0 x n1 x n2 x n3 view (strides t in
 * elements; the executor merges a view's dimensions down to four). One
 * work-item per run of n3 values; `rows` = n0 n1 n2. Slices along any axis,
 * transposed axes, and slices of those, made dense for kernels that need it. */
#define DLRT__GATHER_KERNEL(SUF, T)                                                   \
  DLRT_KERNEL(dlrt_k_gather_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),        \
                                   DLRT_INDEX rows, DLRT_INDEX n1, DLRT_INDEX n2,     \
                                   DLRT_INDEX n3, DLRT_INDEX t0, DLRT_INDEX t1,       \
                                   DLRT_INDEX t2, DLRT_INDEX t3) {                    \
    DLRT_BIND(T, y);                                                                  \
    DLRT_CBIND(T, x);                                                                 \
    DLRT_FOR_EACH(r, rows) {                                                          \
      DLRT_INDEX i2 = r % n2, q = r / n2;                                             \
      DLRT_INDEX i1 = q % n1, i0 = q / n1;                                            \
      DLRT_GLOBAL_CPTR(T) in = x + i0 * t0 + i1 * t1 + i2 * t2;                      \
      DLRT_GLOBAL_PTR(T) out = y + r * n3;                                            \
      for (DLRT_INDEX j = 0; j < n3; j++) out[j] = in[j * t3];                        \
    }                                                                                 \
  }

DLRT__GATHER_KERNEL(b32, unsigned int)
DLRT__GATHER_KERNEL(b16, DLRT_U16)
