/* dlbench-export.c — the results as JSON and CSV: one field list drives
 * both (docs/dlbench.md documents it). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dlbench.h"

/* ---------------------------------------------------------------- fields */

/* The fields of a row in JSON and CSV, in order. Text that is empty is
 * null unless `always` (note is a string, possibly empty). */
typedef enum { T_ARRAY, T_PTR, T_DOUBLE, T_INT } field_type;
typedef struct {
  const char *key;
  field_type type;
  size_t offset;
  int always;
} field;

static const field FIELDS[] = {
    {"suite", T_ARRAY, offsetof(bench_row, suite), 1},
    {"device", T_ARRAY, offsetof(bench_row, device), 1},
    {"case", T_ARRAY, offsetof(bench_row, name), 1},
    {"unit", T_PTR, offsetof(bench_row, unit), 1},
    {"median", T_DOUBLE, offsetof(bench_row, median), 0},
    {"min", T_DOUBLE, offsetof(bench_row, min), 0},
    {"max", T_DOUBLE, offsetof(bench_row, max), 0},
    {"ms", T_DOUBLE, offsetof(bench_row, ms), 0},
    {"reps", T_INT, offsetof(bench_row, reps), 0},
    {"timing", T_PTR, offsetof(bench_row, timing), 0},
    {"work", T_DOUBLE, offsetof(bench_row, work), 0},
    {"bytes", T_DOUBLE, offsetof(bench_row, bytes), 0},
    {"vendor", T_ARRAY, offsetof(bench_row, vendor), 0},
    {"vendor_median", T_DOUBLE, offsetof(bench_row, vendor_median), 0},
    {"vendor_min", T_DOUBLE, offsetof(bench_row, vendor_min), 0},
    {"vendor_max", T_DOUBLE, offsetof(bench_row, vendor_max), 0},
    {"vendor_ms", T_DOUBLE, offsetof(bench_row, vendor_ms), 0},
    {"vendor_timing", T_PTR, offsetof(bench_row, vendor_timing), 0},
    {"ratio", T_DOUBLE, offsetof(bench_row, ratio), 0},
    {"check_error", T_DOUBLE, offsetof(bench_row, check_error), 0},
    {"copy_fraction", T_DOUBLE, offsetof(bench_row, copy_fraction), 0},
    {"images_per_s", T_DOUBLE, offsetof(bench_row, images_per_s), 0},
    {"planned_peak_bytes", T_DOUBLE, offsetof(bench_row, planned_peak), 0},
    {"measured_peak_bytes", T_DOUBLE, offsetof(bench_row, measured_peak), 0},
    {"model", T_DOUBLE, offsetof(bench_row, model), 0},
    {"note", T_ARRAY, offsetof(bench_row, note), 1},
};
enum { N_FIELDS = sizeof FIELDS / sizeof *FIELDS };

/* The field's text, or NULL when it is a number or absent. */
static const char *field_text(const bench_row *r, const field *f) {
  const char *base = (const char *)r + f->offset, *s = NULL;
  if (f->type == T_ARRAY)
    s = base;
  else if (f->type == T_PTR)
    s = *(const char *const *)base;
  else
    return NULL;
  return s && (*s || f->always) ? s : NULL;
}

/* The field's number; NAN when absent (a count of 0 runs included). */
static double field_number(const bench_row *r, const field *f) {
  const char *base = (const char *)r + f->offset;
  if (f->type == T_DOUBLE)
    return *(const double *)base;
  if (f->type == T_INT)
    return *(const int *)base > 0 ? *(const int *)base : NAN;
  return NAN;
}

/* Shortest fixed text for a figure: integers whole, others to 6 digits. */
static void number_text(double v, char *out, size_t size) {
  if (fabs(v) < 1e15 && v == floor(v))
    snprintf(out, size, "%.0f", v);
  else
    snprintf(out, size, "%.6g", v);
}

/* ---------------------------------------------------------------- JSON */

static void json_text_or_null(FILE *out, const char *s) {
  if (s)
    tool_json_string(out, s);
  else
    fputs("null", out);
}

static void json_number(FILE *out, double v) {
  char text[40];
  if (!isfinite(v)) {
    fputs("null", out);
    return;
  }
  number_text(v, text, sizeof text);
  fputs(text, out);
}

static void json_machine(FILE *out, const bench_machine *m) {
  fputs("  \"machine\": {\"cpu_model\": ", out);
  tool_json_string(out, m->cpu_model);
  fprintf(out, ", \"cores\": %d, \"host_memory_bytes\": ", m->cores);
  json_number(out, (double)m->host_memory);
  fputs(", \"os\": ", out);
  tool_json_string(out, m->os);
  fputs(", \"blas\": ", out);
  tool_json_string(out, m->blas);
  fputs(", \"openblas_num_threads\": ", out);
  tool_json_string(out, m->blas_threads);
  fputs(",\n    \"devices\": [", out);
  for (int i = 0; i < m->n_devices; i++) {
    const dlrt_device_props *p = &m->devices[i];
    const char *keys[] = {"spec", "name", "vendor", "backend", "driver", "kind"};
    const char *vals[] = {p->spec, p->name, p->vendor, p->backend, p->driver,
                          dlrt_device_kind_name(p->kind)};
    fputs(i ? ",\n      {" : "\n      {", out);
    tool_json_strings(out, keys, vals, sizeof keys / sizeof *keys);
    fputs("\"total_memory_bytes\": ", out);
    json_number(out, (double)p->total_memory);
    fprintf(out, ", \"compute_units\": %d, \"link\": ", p->compute_units);
    /* The host link model: null without one. */
    const dlrt_link_info *l = m->links ? &m->links[i] : NULL;
    if (!l || !l->active) {
      fputs("null}", out);
      continue;
    }
    fputs("{\"spec\": ", out);
    tool_json_string(out, l->spec);
    fputs(", \"preset\": ", out);
    json_text_or_null(out, l->preset ? l->preset->name : NULL);
    fputs(", \"bytes_per_s\": ", out);
    json_number(out, l->bytes_per_s);
    fputs(", \"latency_s\": ", out);
    json_number(out, l->latency_s);
    fputs(", \"device_flops\": ", out);
    json_number(out, l->preset ? l->device_flops : NAN);
    fputs(", \"flop_per_byte\": ", out);
    json_number(out, l->preset ? l->preset->flop_per_byte : NAN);
    fputs(", \"text\": ", out);
    tool_json_string(out, m->link_text[i]);
    fputs("}}", out);
  }
  fputs("]},\n", out);
}

int bench_write_json(FILE *out, const bench_results *res) {
  const bench_options *o = &res->options;
  fprintf(out, "{\n  \"tool\": \"dlbench\",\n  \"schema\": %d,\n  \"dlrt_version\": ",
          BENCH_SCHEMA_VERSION);
  tool_json_string(out, dlrt_version_string());
  fputs(",\n  \"created\": ", out);
  tool_json_string(out, res->machine.created);
  fprintf(out, ",\n  \"options\": {\"quick\": %s, \"warmup\": %d, \"reps\": %d, \"min_time_s\": ",
          o->quick ? "true" : "false", o->warmup, o->reps);
  json_number(out, o->min_time);
  fputs(", \"filter\": ", out);
  json_text_or_null(out, o->filter);
  fputs("},\n", out);
  json_machine(out, &res->machine);
  fputs("  \"skipped\": [", out);
  for (int i = 0; i < res->n_skips; i++) {
    const bench_skip *s = &res->skips[i];
    fputs(i ? ",\n    {\"suite\": " : "\n    {\"suite\": ", out);
    tool_json_string(out, s->suite);
    fputs(", \"device\": ", out);
    json_text_or_null(out, *s->device ? s->device : NULL);
    fputs(", \"reason\": ", out);
    tool_json_string(out, s->reason);
    fputc('}', out);
  }
  fputs("],\n  \"results\": [", out);
  for (int i = 0; i < res->n_rows; i++) {
    fputs(i ? ",\n    {" : "\n    {", out);
    for (int f = 0; f < N_FIELDS; f++) {
      fprintf(out, "%s\"%s\": ", f ? ", " : "", FIELDS[f].key);
      if (FIELDS[f].type == T_ARRAY || FIELDS[f].type == T_PTR)
        json_text_or_null(out, field_text(&res->rows[i], &FIELDS[f]));
      else
        json_number(out, field_number(&res->rows[i], &FIELDS[f]));
    }
    fputc('}', out);
  }
  fputs("\n  ]\n}\n", out);
  return ferror(out) ? -1 : 0;
}

/* ---------------------------------------------------------------- CSV */

/* RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled. */
static void csv_text(FILE *out, const char *s) {
  if (!s)
    return;
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, out);
    return;
  }
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', out);
    fputc(*s, out);
  }
  fputc('"', out);
}

int bench_write_csv(FILE *out, const bench_results *res) {
  char text[40];
  for (int f = 0; f < N_FIELDS; f++)
    fprintf(out, "%s%s", f ? "," : "", FIELDS[f].key);
  fputc('\n', out);
  for (int i = 0; i < res->n_rows; i++) {
    for (int f = 0; f < N_FIELDS; f++) {
      if (f)
        fputc(',', out);
      if (FIELDS[f].type == T_ARRAY || FIELDS[f].type == T_PTR) {
        csv_text(out, field_text(&res->rows[i], &FIELDS[f]));
      } else {
        double v = field_number(&res->rows[i], &FIELDS[f]);
        if (isfinite(v)) {
          number_text(v, text, sizeof text);
          fputs(text, out);
        }
      }
    }
    fputc('\n', out);
  }
  return ferror(out) ? -1 : 0;
}
