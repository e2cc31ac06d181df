/* conv.h — average pooling and its gradient (portable dialect, fp32; every
 * output element written by one work-item, so results are deterministic on
 * every device). im2col / col2im, the CNHW <-> NCHW permute and max pooling
 * are in typed.h, in every storage type. */
#include "dialect.h"

/* Average pooling over k x k windows with a stride, no padding; x is planes x
 * h x w, one work-item per plane. */
DLRT_KERNEL(dlrt_k_avgpool)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                            DLRT_INDEX planes, DLRT_INDEX h, DLRT_INDEX w, DLRT_INDEX k,
                            DLRT_INDEX stride, DLRT_INDEX oh, DLRT_INDEX ow) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  float scale = 1.0f / (float)(k * k);
  DLRT_FOR_EACH(p, planes) {
    for (DLRT_INDEX oy = 0; oy < oh; oy++)
      for (DLRT_INDEX ox = 0; ox < ow; ox++) {
        float a = 0.0f;
        for (DLRT_INDEX ky = 0; ky < k; ky++)
          for (DLRT_INDEX kx = 0; kx < k; kx++)
            a += x[p * h * w + (oy * stride + ky) * w + ox * stride + kx];
        y[(p * oh + oy) * ow + ox] = a * scale;
      }
  }
}

/* dx[j] = the sum over the windows covering j of dy / k^2 (a gather); one
 * work-item per plane. */
DLRT_KERNEL(dlrt_k_avgpool_grad)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                                 DLRT_INDEX planes, DLRT_INDEX h, DLRT_INDEX w, DLRT_INDEX k,
                                 DLRT_INDEX stride, DLRT_INDEX oh, DLRT_INDEX ow) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  float scale = 1.0f / (float)(k * k);
  DLRT_FOR_EACH(p, planes) {
    for (DLRT_INDEX iy = 0; iy < h; iy++) {
      DLRT_INDEX oy0 = iy >= k ? (iy - k) / stride + 1 : 0, oy1 = iy / stride;
      if (oy1 >= oh) oy1 = oh - 1;
      for (DLRT_INDEX ix = 0; ix < w; ix++) {
        DLRT_INDEX ox0 = ix >= k ? (ix - k) / stride + 1 : 0, ox1 = ix / stride;
        if (ox1 >= ow) ox1 = ow - 1;
        float a = 0.0f;
        for (DLRT_INDEX oy = oy0; oy <= oy1; oy++)
          for (DLRT_INDEX ox = ox0; ox <= ox1; ox++) a += dy[(p * oh + oy) * ow + ox];
        dx[(p * h + iy) * w + ix] = a * scale;
      }
    }
  }
}
