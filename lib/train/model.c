/* model.c — sequential models from a preset name or a model file, built into
 * a graph (the format is documented at dlrt_model_build in dlrt.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "util/file.h"
#include "util/status.h"

static const char *const mlp_layers[] = {"flatten", "linear 512", "relu", "linear 512", "relu",
                                         NULL};
static const char *const cnn_layers[] = {"conv2d 32 3", "relu",       "maxpool 2",
                                         "conv2d 64 3 pad=1", "relu", "maxpool 2",
                                         "flatten",     "linear 128", "relu", NULL};

typedef struct {
  dlrt_graph_t *g;
  dlrt_tensor_t *x; /* the running activation */
  int layer;        /* for parameter names: fc1, conv2, ... */
  const char *file; /* for messages: the file, or the preset */
  int line;
  const char *text; /* and the layer's line */
  int last_linear_out; /* output size of the last layer if it was linear, else -1 */
} builder;

static int fail(builder *b, const char *fmt, ...) DLRT__PRINTF(2, 3);
static int fail(builder *b, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s:%d: %s", b->file, b->line, what);
}

/* The largest number a model file may give (a size, kernel, stride, padding
 * or dilation): every product of a few of them then stays far inside
 * int64_t, and each fits the int the graph builders take. */
#define MODEL_INT_MAX (1L << 30)

/* Parses a whole number argument ("32") or the value of a key=value one
 * ("pad=1") into *out: 0, or the reason it is not one. */
static const char *parse_int(const char *text, long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end || (v < 0 && !errno)) return "is not a whole number >= 0";
  if (errno || v > MODEL_INT_MAX) return "is too large (at most 1073741824)";
  *out = v;
  return NULL;
}

/* The elements of a tensor of this shape, or 0 after saying (FILE:LINE)
 * that they overflow what a tensor can hold (2^60 - 1: its bytes must fit
 * int64_t whatever the element type). */
static int64_t checked_elements(builder *b, const char *layer_text, const char *what, int ndim,
                                const int64_t *shape) {
  int64_t n = 1;
  int over = 0;
  for (int i = 0; i < ndim; i++)
    over |= shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n) || n > INT64_MAX / 8;
  if (!over) return n;
  char dims[160] = "";
  size_t used = 0;
  for (int i = 0; i < ndim && used < sizeof dims; i++)
    used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%lld", i ? " x " : "",
                             (long long)shape[i]);
  fail(b, "%s: its %s would have %s elements, more than a tensor can hold (2^60 - 1); use "
       "smaller numbers", layer_text, what, dims);
  return 0;
}

static int add_param(builder *b, const char *kind, const char *what, int ndim,
                     const int64_t *shape, int64_t fan_in, int64_t fan_out,
                     dlrt_tensor_t **out) {
  char name[64];
  snprintf(name, sizeof name, "%s%d.%s", kind, b->layer, what);
  *out = dlrt_param(b->g, name, ndim, shape, DLRT_INIT_FAN_IN_UNIFORM, fan_in, fan_out);
  return *out ? DLRT_OK : dlrt_graph_status(b->g);
}

static int linear(builder *b, long out) {
  if (b->x && dlrt_tensor_numel(b->x)) {
    int64_t shape[DLRT_MAX_DIMS];
    if (dlrt_tensor_shape(b->x, shape) != 2) b->x = dlrt_flatten(b->g, b->x);
  }
  if (!b->x) return dlrt_graph_status(b->g);
  int64_t shape[DLRT_MAX_DIMS];
  dlrt_tensor_shape(b->x, shape);
  int64_t in = shape[1];
  int64_t ws[2] = {out, in}, bs[1] = {out};
  if (!checked_elements(b, b->text, "weight", 2, ws)) return DLRT_ERR_INVALID_ARG;
  dlrt_tensor_t *w, *bias;
  b->layer++;
  int rc = add_param(b, "fc", "weight", 2, ws, in, out, &w);
  if (rc == DLRT_OK) rc = add_param(b, "fc", "bias", 1, bs, in, out, &bias);
  if (rc < 0) return rc;
  b->x = dlrt_linear(b->g, b->x, w, bias);
  b->last_linear_out = (int)out;
  return b->x ? DLRT_OK : dlrt_graph_status(b->g);
}

static int conv2d(builder *b, long out, long k, long stride, long pad, long dil) {
  int64_t shape[DLRT_MAX_DIMS];
  if (dlrt_tensor_shape(b->x, shape) != 4)
    return fail(b, "conv2d needs an image input (N x C x H x W); is it after a flatten or "
                "linear?");
  int64_t ws[4] = {out, shape[1], k, k}, bs[1] = {out};
  /* fan_in = C x K x K and fan_out = OUT x K x K are at most the weight's
   * elements, which are checked. */
  if (!checked_elements(b, b->text, "weight", 4, ws)) return DLRT_ERR_INVALID_ARG;
  int64_t fan_in = shape[1] * k * k, fan_out = (int64_t)out * k * k;
  dlrt_tensor_t *w, *bias;
  b->layer++;
  int rc = add_param(b, "conv", "weight", 4, ws, fan_in, fan_out, &w);
  if (rc == DLRT_OK) rc = add_param(b, "conv", "bias", 1, bs, fan_in, out, &bias);
  if (rc < 0) return rc;
  b->x = dlrt_conv2d(b->g, b->x, w, bias, (int)stride, (int)pad, (int)dil);
  return b->x ? DLRT_OK : dlrt_graph_status(b->g);
}

/* The layer kinds, for messages. */
static const char *const known_layers[] = {"conv2d", "maxpool", "avgpool", "linear",
                                           "batchnorm", "relu",    "tanh",    "sigmoid",
                                           "gelu",   "gelu_tanh", "dropout", "flatten"};

/* One layer line: "conv2d 32 3 pad=1" (lower case, without its comment). */
static int layer_body(builder *b, char *text) {
  enum { MAX_WORDS = 8 };
  char *words[MAX_WORDS];
  int n = 0;
  for (char *w = strtok(text, " \t\r\n\v\f"); w; w = strtok(NULL, " \t\r\n\v\f")) {
    if (n == MAX_WORDS)
      return fail(b, "%s: too many arguments (\"%s\" and on; a layer takes at most %d)",
                  words[0], w, MAX_WORDS - 1);
    words[n++] = w;
  }
  if (n == 0) return DLRT_OK;
  const char *kind = words[0];
  long pos[2] = {-1, -1}, stride = -1, pad = 0, dil = 1;
  /* dropout takes a probability, not a whole number. */
  if (strcmp(kind, "dropout") == 0) {
    char *end;
    double p = n == 2 ? strtod(words[1], &end) : -1;
    if (n != 2 || *end || !(p >= 0 && p < 1))
      return fail(b, "dropout needs one probability in [0, 1), as in \"dropout 0.5\"");
    b->x = dlrt_dropout(b->g, b->x, (float)p);
    b->last_linear_out = -1;
    return b->x ? DLRT_OK : dlrt_graph_status(b->g);
  }
  int n_pos = 0;
  for (int i = 1; i < n; i++) {
    char *eq = strchr(words[i], '=');
    long v;
    const char *why;
    if (!eq) {
      if (n_pos == 2) return fail(b, "%s: unexpected argument \"%s\"", kind, words[i]);
      if ((why = parse_int(words[i], &v)))
        return fail(b, "%s: argument \"%s\" %s", kind, words[i], why);
      if (v == 0) return fail(b, "%s: argument \"%s\" must be 1 or more", kind, words[i]);
      pos[n_pos++] = v;
      continue;
    }
    *eq = '\0';
    if ((why = parse_int(eq + 1, &v)))
      return fail(b, "%s: %s=%s: the value %s", kind, words[i], eq + 1, why);
    if (strcmp(words[i], "stride") == 0 && v > 0) stride = v;
    else if (strcmp(words[i], "pad") == 0) pad = v;
    else if (strcmp(words[i], "dilation") == 0 && v > 0) dil = v;
    else return fail(b, "unknown or invalid option \"%s=%s\"", words[i], eq + 1);
  }
  int rc = DLRT_OK;
  if (strcmp(kind, "relu") == 0 && n_pos == 0) {
    b->x = dlrt_relu(b->g, b->x);
  } else if (strcmp(kind, "tanh") == 0 && n_pos == 0) {
    b->x = dlrt_tanh(b->g, b->x);
  } else if (strcmp(kind, "sigmoid") == 0 && n_pos == 0) {
    b->x = dlrt_sigmoid(b->g, b->x);
  } else if (strcmp(kind, "gelu") == 0 && n_pos == 0) {
    b->x = dlrt_gelu(b->g, b->x);
  } else if (strcmp(kind, "gelu_tanh") == 0 && n_pos == 0) {
    b->x = dlrt_gelu_tanh(b->g, b->x);
  } else if (strcmp(kind, "batchnorm") == 0 && n_pos == 0) {
    int64_t shape[DLRT_MAX_DIMS];
    int nd = dlrt_tensor_shape(b->x, shape);
    if (nd != 2 && nd != 4) return fail(b, "%s needs N x C or N x C x H x W input", kind);
    int64_t cs[1] = {shape[1]};
    dlrt_tensor_t *gamma, *beta;
    char name[64];
    b->layer++;
    snprintf(name, sizeof name, "bn%d.weight", b->layer);
    gamma = dlrt_param(b->g, name, 1, cs, DLRT_INIT_ONES, 1, 1);
    snprintf(name, sizeof name, "bn%d.bias", b->layer);
    beta = dlrt_param(b->g, name, 1, cs, DLRT_INIT_ZEROS, 1, 1);
    b->x = dlrt_batch_norm(b->g, b->x, gamma, beta, 0.1f, 1e-5f);
  } else if (strcmp(kind, "avgpool") == 0 && n_pos == 1) {
    b->x = dlrt_avg_pool2d(b->g, b->x, (int)pos[0], (int)(stride > 0 ? stride : pos[0]));
  } else if (strcmp(kind, "flatten") == 0 && n_pos == 0) {
    b->x = dlrt_flatten(b->g, b->x);
  } else if (strcmp(kind, "linear") == 0 && n_pos == 1) {
    return linear(b, pos[0]);
  } else if (strcmp(kind, "maxpool") == 0 && n_pos == 1) {
    b->x = dlrt_max_pool2d(b->g, b->x, (int)pos[0], (int)(stride > 0 ? stride : pos[0]));
  } else if (strcmp(kind, "conv2d") == 0 && n_pos == 2) {
    rc = conv2d(b, pos[0], pos[1], stride > 0 ? stride : 1, pad, dil);
  } else {
    for (size_t i = 0; i < sizeof known_layers / sizeof known_layers[0]; i++)
      if (strcmp(kind, known_layers[i]) == 0)
        return fail(b, "wrong arguments for %s (see the model format in README)", kind);
    return fail(b, "unknown layer \"%s\" (known: conv2d, maxpool, avgpool, linear, batchnorm, "
                "relu, tanh, sigmoid, gelu, gelu_tanh, dropout, flatten)", kind);
  }
  b->last_linear_out = -1;
  if (rc == DLRT_OK && !b->x) rc = dlrt_graph_status(b->g);
  return rc;
}

/* A layer, its failures all named FILE:LINE (a graph builder's own message
 * is prefixed with it). */
static int layer(builder *b, const char *text) {
  char *words = strdup(text), where[300];
  if (!words) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  b->text = text;
  int rc = layer_body(b, words);
  free(words);
  snprintf(where, sizeof where, "%s:%d: ", b->file, b->line);
  if (rc < 0 && strncmp(dlrt_last_error(), where, strlen(where)) != 0)
    rc = dlrt__set_error(rc, "%s%s", where, dlrt_last_error());
  return rc;
}

/* One layer of a model: its text and where it came from (for messages). */
typedef struct {
  char *text;
  int line;
} layer_entry;

static void free_layers(layer_entry *l, int n) {
  for (int i = 0; l && i < n; i++) free(l[i].text);
  free(l);
}

/* Opens a model file: a regular file only (a FIFO would block, and the file
 * is read more than once: for the layer count, then by each stage). */
static int open_model_file(const char *spec, FILE **out) {
  int fd, rc = dlrt__open_regular(spec, "a model file", &fd, NULL);
  if (rc < 0) {
    if (rc == DLRT_ERR_NOT_FOUND)
      return dlrt__set_error(rc, "model \"%s\": not a preset (mlp, cnn) and no such file",
                             spec);
    return dlrt__set_error(rc, "model \"%s\": %s", spec, dlrt_last_error());
  }
  if (!(*out = fdopen(fd, "r"))) {
    close(fd);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  return DLRT_OK;
}

/* The layers of a preset or a model file, comments and blank lines gone.
 * Lines may be of any length (getline). */
static int read_layers(const char *spec, layer_entry **out, int *n) {
  const char *const *preset = strcmp(spec, "mlp") == 0   ? mlp_layers
                              : strcmp(spec, "cnn") == 0 ? cnn_layers
                                                         : NULL;
  int cap = 16, count = 0, rc = DLRT_OK;
  layer_entry *l = malloc((size_t)cap * sizeof *l);
  if (!l) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  FILE *f = NULL;
  if (!preset && (rc = open_model_file(spec, &f)) < 0) {
    free(l);
    return rc;
  }
  char *line = NULL;
  size_t line_cap = 0;
  for (int no = 1; rc == DLRT_OK; no++) {
    if (preset) {
      if (!preset[no - 1]) break;
      free(line);
      if (!(line = strdup(preset[no - 1]))) {
        rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
        break;
      }
    } else {
      errno = 0;
      if (getline(&line, &line_cap, f) < 0) {
        if (errno && !feof(f))
          rc = dlrt__set_error(errno == ENOMEM ? DLRT_ERR_OOM : DLRT_ERR_IO, "%s:%d: cannot "
                               "read the model file: %s", spec, no, strerror(errno));
        break;
      }
    }
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    int blank = 1;
    for (char *c = line; *c; c++) {
      *c = (char)tolower((unsigned char)*c);
      if (!isspace((unsigned char)*c)) blank = 0;
    }
    if (blank) continue;
    if (count == cap) {
      layer_entry *grown = realloc(l, (size_t)(cap *= 2) * sizeof *l);
      if (!grown) {
        rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
        break;
      }
      l = grown;
    }
    /* Surrounding blanks and the newline go: messages quote the layer. */
    char *text = line, *last = line + strlen(line);
    while (isspace((unsigned char)*text)) text++;
    while (last > text && isspace((unsigned char)last[-1])) *--last = '\0';
    if (!(l[count].text = strdup(text))) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      break;
    }
    l[count++].line = no;
  }
  free(line);
  if (f) fclose(f);
  if (rc < 0) {
    free_layers(l, count);
    return rc;
  }
  *out = l;
  *n = count;
  return DLRT_OK;
}

/* Layers [from, to) of `l` into the builder; `to` may reach one past the
 * list: the final "linear classes" the model appends when it does not end
 * in one. */
static int run_layers(builder *b, layer_entry *l, int n, int from, int to, int64_t classes) {
  int rc = DLRT_OK;
  for (int i = from; i < to && i < n && rc == DLRT_OK; i++) {
    b->line = l[i].line;
    rc = layer(b, l[i].text);
  }
  if (rc == DLRT_OK && to > n && b->last_linear_out != classes) {
    b->line = n > 0 ? l[n - 1].line + 1 : 1;
    b->text = "the final linear layer";
    rc = linear(b, classes);
  }
  return rc;
}

int dlrt_model_build(dlrt_graph_t *g, const char *spec, dlrt_tensor_t *input, int64_t classes,
                     dlrt_tensor_t **logits) {
  DLRT__CHECK_ARG(g && spec && input && logits, "graph, spec, input or logits is NULL");
  DLRT__CHECK_ARG(classes >= 2, "dlrt_model_build: %lld classes (need at least 2)",
                  (long long)classes);
  layer_entry *l;
  int n, rc = read_layers(spec, &l, &n);
  if (rc < 0) return rc;
  builder b = {.g = g, .x = input, .file = spec, .last_linear_out = -1};
  rc = run_layers(&b, l, n, 0, n + 1, classes);
  free_layers(l, n);
  if (rc < 0) return rc;
  *logits = b.x;
  return DLRT_OK;
}

int dlrt__model_layer_count(const char *spec, int *count) {
  layer_entry *l;
  int n, rc = read_layers(spec, &l, &n);
  if (rc < 0) return rc;
  free_layers(l, n);
  *count = n + 1; /* the final linear counts as a layer (empty when the file has it) */
  return DLRT_OK;
}

int dlrt__model_stage(dlrt_graph_t *g, const char *spec, const int64_t input_shape[4],
                      int64_t classes, int first, int last, dlrt_tensor_t **x,
                      dlrt_tensor_t **y) {
  *x = *y = NULL;
  layer_entry *l;
  int n, rc = read_layers(spec, &l, &n);
  if (rc < 0) return rc;
  /* The layers before the stage, on a scratch graph: the stage's input shape
   * and the numbering of its parameters (fc3 stays fc3). */
  dlrt_graph_t *scratch = NULL;
  builder b = {.file = spec, .last_linear_out = -1};
  if ((rc = dlrt_graph_create(&scratch)) == DLRT_OK) {
    b.g = scratch;
    b.x = dlrt_input(scratch, "images", DLRT_F32, 4, input_shape);
    rc = b.x ? run_layers(&b, l, n, 0, first, classes) : dlrt_graph_status(scratch);
  }
  if (rc == DLRT_OK) {
    int64_t shape[DLRT_MAX_DIMS];
    int nd = dlrt_tensor_shape(b.x, shape);
    b.g = g;
    b.x = *x = dlrt_input(g, first == 0 ? "images" : "activations", DLRT_F32, nd, shape);
    /* A later stage's input gets a gradient: the earlier stage's upstream one. */
    if (b.x && first > 0) b.x->needs_grad = 1;
    rc = b.x ? run_layers(&b, l, n, first, last, classes) : dlrt_graph_status(g);
  }
  dlrt_graph_destroy(scratch);
  free_layers(l, n);
  if (rc == DLRT_OK) *y = b.x;
  return rc;
}
