/* augment.c — one image sample as the loader hands it out: decoded to fp32
 * (u8 pixels scaled to [0, 1]), cropped, flipped, normalised and erased as
 * dlrt_augment asks, with its randomness drawn from (seed, epoch, index)
 * alone (sample_rng.h). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "data/dataset.h"
#include "data/sample_rng.h"

void dlrt__decode_image(const dlrt_dataset *d, const dlrt_loader_config *cfg, int epoch,
                        int64_t index, float *dst) {
  const dlrt_augment *a = &cfg->aug;
  int augment = cfg->augment;
  int64_t C = d->channels, H = d->height, W = d->width, plane = H * W;
  dlrt__sample_rng rng = dlrt__sample_rng_make(cfg->seed, epoch, index);
  int64_t dy = 0, dx = 0;
  int flip = 0;
  if (augment && a->crop_padding > 0) {
    dy = dlrt__rng_int(&rng, -a->crop_padding, a->crop_padding);
    dx = dlrt__rng_int(&rng, -a->crop_padding, a->crop_padding);
  }
  if (augment && a->flip) flip = dlrt__rng_unit(&rng) < 0.5;
  float scale = d->image_dtype == DLRT_U8 ? 1.0f / 255.0f : 1.0f;
  float mean = 0.0f, inv_std = 1.0f;
  if (a->std > 0) mean = a->mean, inv_std = 1.0f / a->std; /* evaluation too */
  const uint8_t *u8 = d->images + (size_t)(index * C * plane) * dlrt_dtype_size(d->image_dtype);
  const float *f32 = (const float *)u8;
  for (int64_t c = 0; c < C; c++) {
    for (int64_t y = 0; y < H; y++) {
      int64_t sy = y + dy;
      float *row = dst + c * plane + y * W;
      if (sy < 0 || sy >= H) {
        for (int64_t x = 0; x < W; x++) row[x] = (0.0f - mean) * inv_std;
        continue;
      }
      int64_t base = c * plane + sy * W;
      for (int64_t x = 0; x < W; x++) {
        int64_t sx = (flip ? W - 1 - x : x) + dx;
        float v = 0.0f;
        if (sx >= 0 && sx < W)
          v = d->image_dtype == DLRT_U8 ? (float)u8[base + sx] * scale : f32[base + sx];
        row[x] = (v - mean) * inv_std;
      }
    }
  }
  if (augment && a->erase_p > 0 && dlrt__rng_unit(&rng) < a->erase_p) {
    /* torchvision's RandomErasing: up to 10 tries at a box of 2-33% of the
     * area with a log-uniform aspect ratio in [0.3, 3.3]. */
    for (int attempt = 0; attempt < 10; attempt++) {
      double area = (double)plane * (0.02 + dlrt__rng_unit(&rng) * (0.33 - 0.02));
      double ratio = exp(log(0.3) + dlrt__rng_unit(&rng) * (log(3.3) - log(0.3)));
      int64_t h = (int64_t)lround(sqrt(area * ratio)), w = (int64_t)lround(sqrt(area / ratio));
      if (h < 1 || w < 1 || h >= H || w >= W) continue;
      int64_t y0 = dlrt__rng_int(&rng, 0, H - h), x0 = dlrt__rng_int(&rng, 0, W - w);
      for (int64_t c = 0; c < C; c++)
        for (int64_t y = y0; y < y0 + h; y++)
          memset(dst + c * plane + y * W + x0, 0, (size_t)w * sizeof *dst);
      break;
    }
  }
}
