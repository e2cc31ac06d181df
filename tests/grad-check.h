/*
 * grad-check.h — the finite-difference gradient check shared by test-grad.c
 * and test-grad-ops.c. A case is a tiny graph whose parameters are an op's
 * differentiable inputs and whose loss is sum(op(...) * R), R a fixed random
 * input (so every output element counts, each with its own weight), or a
 * loss op itself. case_check() runs backward and compares every element of
 * every gradient with (f(p + h) - f(p - h)) / 2h, h = 0.01 max(1, |p|):
 * |analytic - numeric| <= 2e-2 max(1e-2, |analytic|, |numeric|) + 1e-3, with
 * the device's memory cache filled with NaN beforehand so that a kernel that
 * reads stale memory shows.
 */
#ifndef DLRT_TESTS_GRAD_CHECK_H
#define DLRT_TESTS_GRAD_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "dlrt.h"
#include "tap.h"

/* How a parameter's values are chosen. Finite differences need the loss to
 * be smooth within h of the point: ReLU inputs stay away from 0, and every
 * pool window has one maximum well clear of the rest. */
typedef enum {
  VALUES_RANDOM,      /* U(-1, 1) */
  VALUES_AWAY,        /* |v| in [0.1, 1] */
  VALUES_DISTINCT,    /* a shuffled ladder of values 0.1 apart */
  VALUES_INITIALISER, /* DLRT_INIT_FAN_IN_UNIFORM's, read back from the executor */
} values_kind;

#define CASE_MAX 8

/* One gradient check: a tiny graph, its parameters and inputs, and the host
 * values written into them. */
typedef struct {
  char name[96];
  dlrt_graph_t *g;
  int np, ni;
  dlrt_tensor_t *p[CASE_MAX], *grad[CASE_MAX], *in[CASE_MAX];
  float *pv[CASE_MAX]; /* parameter values (VALUES_INITIALISER: read after create) */
  void *iv[CASE_MAX];  /* input values */
  uint32_t rng;
  double want_loss; /* host reference for the loss, or NAN */
  /* The run that evaluates the loss for the finite differences:
   * DLRT_RUN_FORWARD (case_begin's choice), or DLRT_RUN_TRAIN for ops that
   * differ between the two (dropout applies its mask in training runs only;
   * without an optimizer every training run draws the same mask). */
  dlrt_run_mode fd_mode;
} gcase;

/* A step of a linear congruential generator, as a value in [lo, hi). */
float uniform(uint32_t *s, float lo, float hi);
/* The larger of two errors, NaN counting as infinite (fmax would drop it). */
double worse(double worst, double err);
int64_t numel_of(int ndim, const int64_t *shape);
size_t bytes_of(const dlrt_tensor_t *t);
double now_s(void);

dlrt_graph_t *new_graph(void);
void fill_values(gcase *c, float *v, int64_t n, values_kind kind);
/* Starts a case on a fresh graph; its random stream is seeded from the name. */
void case_begin(gcase *c, const char *fmt, ...) TAP_PRINTF(2, 3);
/* A parameter of the case with host values of the given kind. */
dlrt_tensor_t *cparam(gcase *c, const char *name, int ndim, const int64_t *shape,
                      values_kind kind);
/* An f32 input of values +-[0.25, 1.25]. */
dlrt_tensor_t *cinput(gcase *c, const char *name, int ndim, const int64_t *shape);
/* An I32 input of n labels. */
dlrt_tensor_t *clabels(gcase *c, int64_t n, const int32_t *labels);
/* sum(y * R), R a fresh random input of y's shape (its values are the last
 * c->iv until the case is checked). */
dlrt_tensor_t *weighted(gcase *c, dlrt_tensor_t *y);

/* Kernels must not read what their outputs held before: fills the device's
 * cache with NaN. */
void poison_cache(dlrt_device_t *dev);
/* Backward, one training run (no optimizer: nothing is updated), then each
 * gradient element against central differences. Frees the case. */
void case_check(gcase *c, dlrt_device_t *dev, dlrt_tensor_t *loss);

#endif /* DLRT_TESTS_GRAD_CHECK_H */
