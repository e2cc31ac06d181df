/* dlbench-compare.c — `dlbench compare A.json B.json`: a small JSON reader
 * for dlbench's own result files, and the ratios B/A of the cases the two
 * have in common. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlbench.h"

/* ---------------------------------------------------------------- JSON reader */

/* Enough JSON for dlbench's own files (RFC 8259 values; \u escapes become
 * UTF-8); a malformed file gives a message with its line and column. */
typedef enum { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT } json_type;
typedef struct json_value {
  json_type type;
  double number;            /* J_NUMBER; J_BOOL: 0 or 1 */
  char *string;             /* J_STRING */
  struct json_value *items; /* J_ARRAY, J_OBJECT */
  char **keys;              /* J_OBJECT */
  int n;
} json_value;

typedef struct {
  const char *text, *p;
  char error[160];
  int depth;
} json_parser;

enum { JSON_MAX_DEPTH = 64 };

static void json_free(json_value *v) {
  for (int i = 0; i < v->n; i++) {
    json_free(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->string);
  memset(v, 0, sizeof *v);
}

static int json_error(json_parser *ps, const char *what) {
  int line = 1, col = 1;
  for (const char *q = ps->text; q < ps->p; q++, col++)
    if (*q == '\n')
      line++, col = 0;
  if (!ps->error[0])
    snprintf(ps->error, sizeof ps->error, "line %d, column %d: %s", line, col, what);
  return -1;
}

static void json_skip_space(json_parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
    ps->p++;
}

static int json_parse_value(json_parser *ps, json_value *v);

/* Appends code point cp to out as UTF-8. */
static char *utf8_put(char *out, unsigned cp) {
  if (cp < 0x80) {
    *out++ = (char)cp;
  } else if (cp < 0x800) {
    *out++ = (char)(0xc0 | cp >> 6);
    *out++ = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out++ = (char)(0xe0 | cp >> 12);
    *out++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *out++ = (char)(0x80 | (cp & 0x3f));
  } else {
    *out++ = (char)(0xf0 | cp >> 18);
    *out++ = (char)(0x80 | ((cp >> 12) & 0x3f));
    *out++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *out++ = (char)(0x80 | (cp & 0x3f));
  }
  return out;
}

static int hex4(const char *p, unsigned *out) {
  *out = 0;
  for (int i = 0; i < 4; i++) {
    int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                     : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0)
      return 0;
    *out = *out * 16 + (unsigned)d;
  }
  return 1;
}

/* A string at ps->p (after its opening quote) into a new NUL-terminated
 * buffer; escapes never make the text longer, so its length bounds it. */
static int json_parse_string(json_parser *ps, char **out) {
  const char *end = ps->p;
  while (*end && *end != '"')
    end += *end == '\\' && end[1] ? 2 : 1;
  if (!*end)
    return json_error(ps, "unterminated string");
  char *s = malloc((size_t)(end - ps->p) + 1), *w = s;
  if (!s)
    return json_error(ps, "out of memory");
  while (ps->p < end) {
    unsigned char c = (unsigned char)*ps->p++;
    if (c < 0x20) {
      free(s);
      return json_error(ps, "control character in a string");
    }
    if (c != '\\') {
      *w++ = (char)c;
      continue;
    }
    char e = *ps->p++;
    const char *simple = strchr("\"\\/bfnrt", e);
    unsigned cp, lo;
    if (e && simple) {
      *w++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
    } else if (e == 'u' && hex4(ps->p, &cp)) {
      ps->p += 4;
      if (cp >= 0xd800 && cp < 0xdc00 && ps->p[0] == '\\' && ps->p[1] == 'u' &&
          hex4(ps->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00); /* a surrogate pair */
        ps->p += 6;
      }
      w = utf8_put(w, cp);
    } else {
      free(s);
      return json_error(ps, "bad escape in a string");
    }
  }
  *w = '\0';
  ps->p = end + 1;
  *out = s;
  return 0;
}

/* Appends a zeroed item (and key slot for objects) to v. */
static json_value *json_push(json_parser *ps, json_value *v) {
  json_value *items = realloc(v->items, (size_t)(v->n + 1) * sizeof *items);
  if (!items)
    return json_error(ps, "out of memory"), NULL;
  v->items = items;
  if (v->type == J_OBJECT) {
    char **keys = realloc(v->keys, (size_t)(v->n + 1) * sizeof *keys);
    if (!keys)
      return json_error(ps, "out of memory"), NULL;
    v->keys = keys;
    v->keys[v->n] = NULL;
  }
  memset(&v->items[v->n], 0, sizeof *items);
  return &v->items[v->n++];
}

/* An array or object after its opening bracket. */
static int json_parse_container(json_parser *ps, json_value *v) {
  char close = v->type == J_ARRAY ? ']' : '}';
  if (++ps->depth > JSON_MAX_DEPTH)
    return json_error(ps, "nested too deeply");
  json_skip_space(ps);
  if (*ps->p == close) {
    ps->p++;
    ps->depth--;
    return 0;
  }
  for (;;) {
    json_value *item = json_push(ps, v);
    if (!item)
      return -1;
    json_skip_space(ps);
    if (v->type == J_OBJECT) {
      if (*ps->p != '"')
        return json_error(ps, "expected a key in quotes");
      ps->p++;
      if (json_parse_string(ps, &v->keys[v->n - 1]) < 0)
        return -1;
      json_skip_space(ps);
      if (*ps->p++ != ':')
        return json_error(ps, "expected ':' after a key");
    }
    if (json_parse_value(ps, item) < 0)
      return -1;
    json_skip_space(ps);
    if (*ps->p == close) {
      ps->p++;
      ps->depth--;
      return 0;
    }
    if (*ps->p++ != ',')
      return json_error(ps, v->type == J_ARRAY ? "expected ',' or ']'" : "expected ',' or '}'");
  }
}

static int json_parse_number(json_parser *ps, json_value *v) {
  const char *start = ps->p;
  if (*ps->p == '-')
    ps->p++;
  if (*ps->p < '0' || *ps->p > '9')
    return json_error(ps, "unexpected character");
  ps->p += strspn(ps->p, "0123456789.eE+-");
  char *end;
  v->type = J_NUMBER;
  v->number = strtod(start, &end);
  if (end != ps->p)
    return json_error(ps, "malformed number");
  return 0;
}

static int json_parse_value(json_parser *ps, json_value *v) {
  static const struct { const char *word; json_type type; double value; } words[] = {
      {"null", J_NULL, 0}, {"true", J_BOOL, 1}, {"false", J_BOOL, 0}};
  json_skip_space(ps);
  switch (*ps->p) {
  case '"':
    ps->p++;
    v->type = J_STRING;
    return json_parse_string(ps, &v->string);
  case '[':
  case '{':
    v->type = *ps->p++ == '[' ? J_ARRAY : J_OBJECT;
    return json_parse_container(ps, v);
  case '\0':
    return json_error(ps, "unexpected end of the file");
  default:
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
      if (!strncmp(ps->p, words[i].word, strlen(words[i].word))) {
        ps->p += strlen(words[i].word);
        v->type = words[i].type;
        v->number = words[i].value;
        return 0;
      }
    return json_parse_number(ps, v);
  }
}

static const json_value *json_get(const json_value *obj, const char *key) {
  if (obj->type != J_OBJECT)
    return NULL;
  for (int i = 0; i < obj->n; i++)
    if (!strcmp(obj->keys[i], key))
      return &obj->items[i];
  return NULL;
}

static const char *json_get_string(const json_value *obj, const char *key) {
  const json_value *v = json_get(obj, key);
  return v && v->type == J_STRING ? v->string : NULL;
}

/* Reads a whole file (up to 256 MiB) into a NUL-terminated buffer. */
static char *read_file(const char *path, char *why, size_t size) {
  const size_t most = (size_t)256 << 20;
  size_t cap = (size_t)1 << 16, len = 0;
  FILE *f = fopen(path, "rb");
  char *buf = f ? malloc(cap) : NULL;
  why[0] = '\0';
  if (!f) {
    snprintf(why, size, "%s", strerror(errno));
    return NULL;
  }
  while (buf && !why[0]) {
    len += fread(buf + len, 1, cap - 1 - len, f);
    if (ferror(f))
      snprintf(why, size, "%s", strerror(errno));
    else if (len < cap - 1) /* the end of the file */
      break;
    else if (cap >= most)
      snprintf(why, size, "larger than 256 MiB");
    else {
      char *bigger = realloc(buf, cap *= 2);
      if (!bigger)
        free(buf);
      buf = bigger;
    }
  }
  if (!buf && !why[0])
    snprintf(why, size, "out of memory");
  if (why[0]) {
    free(buf);
    buf = NULL;
  } else {
    buf[len] = '\0';
  }
  fclose(f);
  return buf;
}

/* Loads a dlbench JSON file; its "results" array in *results. */
static int load_results(const char *path, json_value *root, const json_value **results) {
  char why[200] = "";
  json_parser ps = {0};
  char *text = read_file(path, why, sizeof why);
  memset(root, 0, sizeof *root);
  if (!text) {
    fprintf(stderr, "dlbench: compare: cannot read %s: %s\n", path, why);
    return STATUS_USAGE;
  }
  ps.text = ps.p = text;
  int rc = json_parse_value(&ps, root);
  json_skip_space(&ps);
  if (rc == 0 && *ps.p)
    rc = json_error(&ps, "text after the JSON value");
  free(text);
  if (rc < 0) {
    fprintf(stderr, "dlbench: compare: %s is not valid JSON: %s\n", path, ps.error);
    return STATUS_USAGE;
  }
  const char *tool = json_get_string(root, "tool");
  *results = json_get(root, "results");
  if (!tool || strcmp(tool, "dlbench") || !*results || (*results)->type != J_ARRAY) {
    fprintf(stderr, "dlbench: compare: %s is not a dlbench result (no \"tool\": \"dlbench\" "
            "with a \"results\" array; write one with dlbench --json FILE)\n", path);
    return STATUS_USAGE;
  }
  return 0;
}

/* The row of `results` with the same suite, device and case as `row`. */
static const json_value *find_row(const json_value *results, const json_value *row) {
  static const char *const keys[] = {"suite", "device", "case"};
  for (int i = 0; i < results->n; i++) {
    int same = 1;
    for (int k = 0; k < 3 && same; k++) {
      const char *a = json_get_string(&results->items[i], keys[k]);
      const char *b = json_get_string(row, keys[k]);
      same = a && b && !strcmp(a, b);
    }
    if (same)
      return &results->items[i];
  }
  return NULL;
}

static double json_get_number(const json_value *obj, const char *key) {
  const json_value *v = json_get(obj, key);
  return v && v->type == J_NUMBER ? v->number : NAN;
}

int bench_compare(const char *path_a, const char *path_b, FILE *out) {
  json_value root_a, root_b;
  const json_value *ra = NULL, *rb = NULL;
  int status = load_results(path_a, &root_a, &ra);
  if (!status)
    status = load_results(path_b, &root_b, &rb);
  else
    memset(&root_b, 0, sizeof root_b);
  if (status) {
    json_free(&root_a);
    json_free(&root_b);
    return status;
  }
  int matched = 0, ratios = 0;
  double log_sum = 0;
  fprintf(out, "A: %s\nB: %s\n\n%-6s %-9s %-34s %-8s %12s %12s %8s\n", path_a, path_b, "SUITE",
          "DEVICE", "CASE", "UNIT", "A-MEDIAN", "B-MEDIAN", "B/A");
  for (int i = 0; i < rb->n; i++) {
    const json_value *b = &rb->items[i], *a = find_row(ra, b);
    if (!a)
      continue;
    double va = json_get_number(a, "median"), vb = json_get_number(b, "median");
    double ratio = vb / va;
    char ta[32], tb[32], tr[32];
    const char *unit = json_get_string(b, "unit");
    bench_figure(va, ta, sizeof ta);
    bench_figure(vb, tb, sizeof tb);
    if (isfinite(ratio) && ratio > 0) {
      snprintf(tr, sizeof tr, "%.3f", ratio);
      log_sum += log(ratio);
      ratios++;
    } else {
      snprintf(tr, sizeof tr, "-");
    }
    fprintf(out, "%-6s %-9s %-34s %-8s %12s %12s %8s\n", json_get_string(b, "suite"),
            json_get_string(b, "device"), json_get_string(b, "case"), unit ? unit : "-", ta,
            tb, tr);
    matched++;
  }
  if (matched)
    fprintf(out, "\n%d case%s in both (%d only in A, %d only in B); geometric mean of B/A "
            "over %d: %.3f (> 1: B is faster)\n", matched, matched == 1 ? "" : "s",
            ra->n - matched, rb->n - matched, ratios, ratios ? exp(log_sum / ratios) : NAN);
  else
    fprintf(stderr, "dlbench: compare: %s and %s have no (suite, device, case) in common\n",
            path_a, path_b);
  json_free(&root_a);
  json_free(&root_b);
  return matched ? 0 : STATUS_FAIL;
}
