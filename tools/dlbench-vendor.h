/* dlbench-vendor.h — the vendor BLAS libraries dlbench sets beside dlrt's
 * GEMM (OpenBLAS, CLBlast, cuBLAS), called directly on the same device. */
#ifndef DLBENCH_VENDOR_H
#define DLBENCH_VENDOR_H

#include "dlbench.h"

typedef enum { EVERY_RUN, FULL_RUNS, DISCRETE_ONLY } gemm_when;

typedef struct {
  int64_t m, n, k;
  int trans_a, trans_b;
  gemm_when when;
} gemm_shape;

/* One GEMM case: dlrt's operands, and their bytes on the host for the
 * vendor side (the very values dlrt multiplies, after its own rounding). */
typedef struct {
  dlrt_dtype dtype;
  gemm_shape shape;
  dlrt_gemm_desc desc;
  size_t a_elems, b_elems, c_elems, esize;
  dlrt_stream_t *stream;
  dlrt_buffer_t *a, *b, *c;
  void *a_host, *b_host, *c_dlrt, *c_vendor;
} gemm_case;

/* A vendor BLAS called directly, beside dlrt, on the device's own terms. */
typedef struct vendor vendor;
typedef struct {
  const char *name, *timing;
  /* 1 if it multiplies this dtype; else 0 and why not in v->error. */
  int (*supports)(vendor *v, dlrt_dtype t);
  /* Its own copies of g's operands; 0 or -1 with v->error. */
  int (*setup)(vendor *v, const gemm_case *g);
  int (*run)(void *v, double *ms);
  /* C into g->c_vendor. */
  int (*result)(vendor *v, gemm_case *g);
  void (*release)(vendor *v); /* the case's memory */
  void (*close)(vendor *v);   /* everything */
} vendor_ops;

struct vendor {
  const vendor_ops *ops;
  char error[256];
  const gemm_case *g;
};

/* The vendor library for the device's backend, opened; NULL with the reason
 * in why when there is none (or it cannot be loaded). */
vendor *vendor_open(const dlrt_device_props *p, char *why, size_t size);

#endif
