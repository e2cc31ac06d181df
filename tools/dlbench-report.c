/* dlbench-report.c — the results and what is made of them: the terminal
 * table and the HTML report with inline SVG charts (JSON and CSV are in
 * dlbench-export.c, dlbench compare in dlbench-compare.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dlbench.h"

/* ---------------------------------------------------------------- results */

bench_row *bench_row_new(bench_results *res, const char *suite, const char *device,
                         const char *name, const char *unit, double work) {
  if (res->n_rows == res->cap_rows) {
    int cap = res->cap_rows ? 2 * res->cap_rows : 64;
    bench_row *rows = realloc(res->rows, (size_t)cap * sizeof *rows);
    if (!rows)
      return NULL;
    res->rows = rows;
    res->cap_rows = cap;
  }
  bench_row *r = &res->rows[res->n_rows++];
  memset(r, 0, sizeof *r);
  snprintf(r->suite, sizeof r->suite, "%s", suite);
  snprintf(r->device, sizeof r->device, "%s", device);
  snprintf(r->name, sizeof r->name, "%s", name);
  r->unit = unit;
  r->work = work;
  r->timing = r->vendor_timing = NULL;
  double *absent[] = {&r->bytes, &r->median, &r->min, &r->max, &r->ms, &r->vendor_median,
                      &r->vendor_min, &r->vendor_max, &r->vendor_ms, &r->ratio,
                      &r->check_error, &r->copy_fraction, &r->images_per_s,
                      &r->planned_peak, &r->measured_peak, &r->model};
  for (size_t i = 0; i < sizeof absent / sizeof *absent; i++)
    *absent[i] = NAN;
  return r;
}

int bench_skip_add(bench_results *res, const char *suite, const char *device,
                   const char *reason) {
  if (res->n_skips == res->cap_skips) {
    int cap = res->cap_skips ? 2 * res->cap_skips : 16;
    bench_skip *s = realloc(res->skips, (size_t)cap * sizeof *s);
    if (!s) {
      fputs("dlbench: out of host memory\n", stderr);
      return STATUS_FAIL;
    }
    res->skips = s;
    res->cap_skips = cap;
  }
  bench_skip *s = &res->skips[res->n_skips++];
  snprintf(s->suite, sizeof s->suite, "%s", suite);
  snprintf(s->device, sizeof s->device, "%s", device);
  snprintf(s->reason, sizeof s->reason, "%s", reason);
  return 0;
}

void bench_results_free(bench_results *res) {
  free(res->rows);
  free(res->skips);
  free(res->machine.devices);
  free(res->machine.links);
  free(res->machine.link_text);
  res->rows = NULL;
  res->skips = NULL;
  res->machine.devices = NULL;
  res->machine.links = NULL;
  res->machine.link_text = NULL;
}

/* ---------------------------------------------------------------- table */

/* A figure to about four significant digits; "-" when absent. */
void bench_figure(double v, char *out, size_t size) {
  double a = fabs(v);
  if (!isfinite(v))
    snprintf(out, size, "-");
  else if (a >= 1000 || a == 0)
    snprintf(out, size, "%.0f", v);
  else if (a >= 100)
    snprintf(out, size, "%.1f", v);
  else if (a >= 1)
    snprintf(out, size, "%.2f", v);
  else if (a >= 0.001)
    snprintf(out, size, "%.4f", v);
  else
    snprintf(out, size, "%.2e", v);
}

enum { CELL = 272 };

/* A column of the table: shown in a suite's section when a row there has it. */
typedef struct {
  const char *head;
  int right; /* numbers are right-aligned */
  void (*cell)(const bench_row *r, char *out);
} column;

/* A ratio-like figure with fixed decimals, or "-". */
static void fixed(double v, const char *format, char *out) {
  if (isfinite(v))
    snprintf(out, CELL, format, v);
  else
    snprintf(out, CELL, "-");
}

static void cell_text(const char *s, char *out) { snprintf(out, CELL, "%s", s && *s ? s : "-"); }

static void c_device(const bench_row *r, char *o) { cell_text(r->device, o); }
static void c_case(const bench_row *r, char *o) { cell_text(r->name, o); }
static void c_median(const bench_row *r, char *o) { bench_figure(r->median, o, CELL); }
static void c_min(const bench_row *r, char *o) { bench_figure(r->min, o, CELL); }
static void c_max(const bench_row *r, char *o) { bench_figure(r->max, o, CELL); }
static void c_ms(const bench_row *r, char *o) { bench_figure(r->ms, o, CELL); }
static void c_reps(const bench_row *r, char *o) { snprintf(o, CELL, "%d", r->reps); }
static void c_timing(const bench_row *r, char *o) { cell_text(r->timing, o); }
static void c_vendor(const bench_row *r, char *o) { cell_text(r->vendor, o); }
static void c_vmedian(const bench_row *r, char *o) { bench_figure(r->vendor_median, o, CELL); }
static void c_ratio(const bench_row *r, char *o) { fixed(r->ratio, "%.3f", o); }
static void c_check(const bench_row *r, char *o) { fixed(r->check_error, "%.1e", o); }
static void c_fraction(const bench_row *r, char *o) { fixed(r->copy_fraction, "%.2f", o); }
static void c_images(const bench_row *r, char *o) { bench_figure(r->images_per_s, o, CELL); }
static void c_planned(const bench_row *r, char *o) { bench_figure(r->planned_peak / 1048576.0, o, CELL); }
static void c_measured(const bench_row *r, char *o) {
  bench_figure(r->measured_peak / 1048576.0, o, CELL);
}
static void c_model(const bench_row *r, char *o) { bench_figure(r->model, o, CELL); }
static void c_note(const bench_row *r, char *o) { snprintf(o, CELL, "%s", r->note); }

static const column COLUMNS[] = {
    {"DEVICE", 0, c_device},      {"CASE", 0, c_case},          {"MEDIAN", 1, c_median},
    {"MIN", 1, c_min},            {"MAX", 1, c_max},            {"MODEL", 1, c_model},
    {"MS", 1, c_ms},
    {"RUNS", 1, c_reps},          {"TIMING", 0, c_timing},      {"VENDOR", 0, c_vendor},
    {"VENDOR-MEDIAN", 1, c_vmedian}, {"RATIO", 1, c_ratio},     {"CHECK", 1, c_check},
    {"OF-COPY", 1, c_fraction},   {"IMAGES/S", 1, c_images},    {"PEAK-PLAN-MiB", 1, c_planned},
    {"PEAK-MEAS-MiB", 1, c_measured}, {"NOTE", 0, c_note},
};
enum { N_COLUMNS = sizeof COLUMNS / sizeof *COLUMNS };

/* Whether any row of the suite fills column c ("-" and "" do not count). */
static int column_used(const bench_results *res, const char *suite, int c) {
  char cell[CELL];
  for (int i = 0; i < res->n_rows; i++) {
    if (strcmp(res->rows[i].suite, suite) != 0)
      continue;
    COLUMNS[c].cell(&res->rows[i], cell);
    if (*cell && strcmp(cell, "-") != 0)
      return 1;
  }
  return 0;
}

static void table_section(FILE *out, const bench_results *res, const char *suite) {
  int used[N_COLUMNS], width[N_COLUMNS] = {0}, last = 0;
  char cell[CELL];
  const char *unit = NULL;
  for (int c = 0; c < N_COLUMNS; c++) {
    used[c] = c < 3 || column_used(res, suite, c);
    width[c] = used[c] ? (int)strlen(COLUMNS[c].head) : 0;
    last = used[c] ? c : last;
  }
  for (int i = 0; i < res->n_rows; i++)
    if (strcmp(res->rows[i].suite, suite) == 0) {
      unit = unit ? unit : res->rows[i].unit;
      for (int c = 0; c < N_COLUMNS; c++) {
        COLUMNS[c].cell(&res->rows[i], cell);
        if (used[c] && (int)strlen(cell) > width[c])
          width[c] = (int)strlen(cell);
      }
    }
  if (!unit)
    return;
  fprintf(out, "\n%s (MEDIAN, MIN, MAX in %s%s; MS: median milliseconds a run)\n", suite,
          unit, strcmp(suite, "ops") == 0 ? " or GFLOP/s for conv2d" : "");
  for (int i = -1; i < res->n_rows; i++) {
    if (i >= 0 && strcmp(res->rows[i].suite, suite) != 0)
      continue;
    for (int c = 0; c < N_COLUMNS; c++) {
      if (!used[c])
        continue;
      if (i < 0)
        snprintf(cell, CELL, "%s", COLUMNS[c].head);
      else
        COLUMNS[c].cell(&res->rows[i], cell);
      if (c == last)
        fprintf(out, "%s\n", cell);
      else
        fprintf(out, COLUMNS[c].right ? "%*s  " : "%-*s  ", width[c], cell);
    }
  }
}

/* How each case was measured, in words (the table's and the report's). */
static void method_text(const bench_options *o, char *out, size_t size) {
  char warm_time[32] = "";
  if (o->warmup > 0 && o->min_time > 0)
    snprintf(warm_time, sizeof warm_time, " and %.3g s", o->min_time / 4);
  snprintf(out, size, "per case, at least %d warm-up runs%s, then at least %d timed runs and "
           "%.3g s; dlrt and the vendor library alternate", o->warmup, warm_time, o->reps,
           o->min_time);
}

int bench_write_table(FILE *out, const bench_results *res) {
  const bench_machine *m = &res->machine;
  fprintf(out, "dlbench (dlrt %s) %s\n", dlrt_version_string(), m->created);
  fprintf(out, "machine  %s, %d cores, %.1f GiB, %s\n", m->cpu_model, m->cores,
          (double)m->host_memory / 1073741824.0, m->os);
  fprintf(out, "blas     %s (OPENBLAS_NUM_THREADS %s)\n", m->blas, m->blas_threads);
  for (int i = 0; i < m->n_devices; i++)
    fprintf(out, "device   %-9s %s [%s, %s]\n", m->devices[i].spec, m->devices[i].name,
            m->devices[i].backend, *m->devices[i].driver ? m->devices[i].driver : "driver ?");
  for (int i = 0; m->links && i < m->n_devices; i++)
    if (m->links[i].active)
      fprintf(out, "link     %-9s %s\n", m->devices[i].spec, m->link_text[i]);
  char method[200];
  method_text(&res->options, method, sizeof method);
  fprintf(out, "method   %s\n", method);
  for (int s = 0; s < bench_suite_count; s++)
    table_section(out, res, bench_suites[s].name);
  for (int i = 0; i < res->n_skips; i++)
    fprintf(out, "%sskipped  %s%s%s: %s\n", i ? "" : "\n", res->skips[i].suite,
            *res->skips[i].device ? " on " : "", res->skips[i].device, res->skips[i].reason);
  if (res->n_rows == 0)
    fputs("\nno cases were measured\n", out);
  return ferror(out) ? -1 : 0;
}

/* ---------------------------------------------------------------- HTML */

static const char *const PALETTE[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                      "#76b7b2", "#b07aa1", "#edc948", "#9c755f"};
enum { N_PALETTE = sizeof PALETTE / sizeof *PALETTE };

/* Text for HTML and SVG: &, <, > and quotes escaped. */
static void xml_text(FILE *out, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", out); break;
    case '<': fputs("&lt;", out); break;
    case '>': fputs("&gt;", out); break;
    case '"': fputs("&quot;", out); break;
    default: fputc(*s, out);
    }
  }
}

/* Index of text in a list of names, appended when new; -1 when full. */
static int name_index(char (*names)[96], int *n, int cap, const char *text) {
  for (int i = 0; i < *n; i++)
    if (strcmp(names[i], text) == 0)
      return i;
  if (*n == cap)
    return -1;
  snprintf(names[*n], 96, "%s", text);
  return (*n)++;
}

/* A 1-2-5 step giving about `ticks` intervals up to max. */
static double nice_step(double max, int ticks) {
  double raw = max / ticks, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* Grouped horizontal bars: one group per case, one bar per series (a
 * device, or a device's vendor library drawn paler). */
typedef struct {
  char (*groups)[96];
  char (*series)[96];
  int n_groups, n_series, cap;
  int *color;     /* palette index of each series */
  int *is_vendor; /* vendor series are paler */
  double *value;  /* n_groups x cap, NAN: absent */
} bar_chart;

static int bars_init(bar_chart *b, int cap) {
  memset(b, 0, sizeof *b);
  b->cap = cap;
  b->groups = calloc((size_t)cap, sizeof *b->groups);
  b->series = calloc((size_t)cap, sizeof *b->series);
  b->color = calloc((size_t)cap, sizeof *b->color);
  b->is_vendor = calloc((size_t)cap, sizeof *b->is_vendor);
  b->value = malloc((size_t)cap * (size_t)cap * sizeof *b->value);
  if (!b->groups || !b->series || !b->color || !b->is_vendor || !b->value)
    return -1;
  for (int i = 0; i < cap * cap; i++)
    b->value[i] = NAN;
  return 0;
}

static void bars_free(bar_chart *b) {
  free(b->groups);
  free(b->series);
  free(b->color);
  free(b->is_vendor);
  free(b->value);
}

static void bars_put(bar_chart *b, const char *group, const char *series, int color,
                     int vendor, double v) {
  int g = name_index(b->groups, &b->n_groups, b->cap, group);
  int s = name_index(b->series, &b->n_series, b->cap, series);
  if (g < 0 || s < 0 || !isfinite(v))
    return;
  b->color[s] = color;
  b->is_vendor[s] = vendor;
  b->value[g * b->cap + s] = v;
}

static void svg_bars(FILE *out, const bar_chart *b, const char *title, const char *unit) {
  const int label_w = 260, plot_w = 560, bar_h = 14, gap = 10, top = 46;
  double max = 0;
  int rows = 0;
  for (int g = 0; g < b->n_groups; g++)
    for (int s = 0; s < b->n_series; s++) {
      double v = b->value[g * b->cap + s];
      max = isfinite(v) && v > max ? v : max;
      rows += isfinite(v);
    }
  if (rows == 0 || max <= 0)
    return;
  double step = nice_step(max, 5), top_value = ceil(max / step) * step;
  int height = top + rows * bar_h + b->n_groups * gap + 30, width = label_w + plot_w + 90;
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" role=\"img\"><title>", width, height, width, height);
  xml_text(out, title);
  fprintf(out, "</title>\n<text x=\"0\" y=\"16\" class=\"t\">");
  xml_text(out, title);
  fprintf(out, " (%s)</text>\n", unit);
  for (int s = 0, x = 0; s < b->n_series; s++, x += 170) { /* legend */
    fprintf(out, "<rect x=\"%d\" y=\"26\" width=\"12\" height=\"12\" fill=\"%s\"%s/>"
            "<text x=\"%d\" y=\"36\">", x, PALETTE[b->color[s] % N_PALETTE],
            b->is_vendor[s] ? " fill-opacity=\"0.45\" stroke=\"#333\"" : "", x + 16);
    xml_text(out, b->series[s]);
    fputs("</text>\n", out);
  }
  for (double v = 0; v <= top_value * 1.0001; v += step) { /* grid */
    int x = label_w + (int)(plot_w * v / top_value);
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"g\"/>"
            "<text x=\"%d\" y=\"%d\" class=\"a\">%g</text>\n", x, top - 4, x, height - 24,
            x, height - 10, v);
  }
  int y = top;
  for (int g = 0; g < b->n_groups; g++) {
    int first = y;
    for (int s = 0; s < b->n_series; s++) {
      double v = b->value[g * b->cap + s];
      if (!isfinite(v))
        continue;
      int w = (int)(plot_w * v / top_value + 0.5);
      fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"%s>"
              "<title>", label_w, y, w > 0 ? w : 1, bar_h - 2,
              PALETTE[b->color[s] % N_PALETTE],
              b->is_vendor[s] ? " fill-opacity=\"0.45\" stroke=\"#333\"" : "");
      xml_text(out, b->series[s]);
      fprintf(out, ": %.4g %s</title></rect><text x=\"%d\" y=\"%d\" class=\"v\">%.4g</text>\n",
              v, unit, label_w + w + 4, y + bar_h - 4, v);
      y += bar_h;
    }
    fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"l\">", label_w - 6, (first + y) / 2 + 4);
    xml_text(out, b->groups[g]);
    fputs("</text>\n", out);
    y += gap;
  }
  fputs("</svg>\n", out);
}

/* Bars of one suite (rows in `unit` only): dlrt per device, and the vendor
 * beside it where there is one. `at_bytes` > 0 keeps only rows of that size. */
static void html_bars(FILE *out, const bench_results *res, const char *suite,
                      const char *unit, const char *title, double at_bytes) {
  bar_chart b;
  int cap = res->n_rows + 2 * res->machine.n_devices + 1;
  if (bars_init(&b, cap) == 0) {
    for (int i = 0; i < res->n_rows; i++) {
      const bench_row *r = &res->rows[i];
      if (strcmp(r->suite, suite) || strcmp(r->unit, unit) ||
          (at_bytes > 0 && r->bytes != at_bytes))
        continue;
      int color = 0;
      for (int d = 0; d < res->machine.n_devices; d++)
        color = strcmp(res->machine.devices[d].spec, r->device) ? color : d;
      char series[96], group[96];
      snprintf(group, sizeof group, "%s", r->name);
      if (at_bytes > 0) /* "h2d-pinned/256MiB" -> "h2d-pinned" */
        group[strcspn(group, "/")] = '\0';
      bars_put(&b, group, r->device, color, 0, r->median);
      if (*r->vendor) {
        snprintf(series, sizeof series, "%s %s", r->device, r->vendor);
        bars_put(&b, group, series, color, 1, r->vendor_median);
      }
    }
    svg_bars(out, &b, title, unit);
  }
  bars_free(&b);
}

/* Bandwidth against size, one line per copy direction, for one device. */
static void html_copy_lines(FILE *out, const bench_results *res, const char *device) {
  const int left = 60, plot_w = 640, plot_h = 260, top = 40, right_legend = 150;
  double xmin = INFINITY, xmax = 0, ymax = 0;
  char kinds[8][96];
  int n_kinds = 0;
  for (int i = 0; i < res->n_rows; i++) {
    const bench_row *r = &res->rows[i];
    if (strcmp(r->suite, "copy") || strcmp(r->device, device) || !isfinite(r->median))
      continue;
    char kind[96];
    snprintf(kind, sizeof kind, "%s", r->name);
    kind[strcspn(kind, "/")] = '\0';
    name_index(kinds, &n_kinds, 8, kind);
    xmin = fmin(xmin, r->bytes);
    xmax = fmax(xmax, r->bytes);
    ymax = fmax(ymax, r->median);
  }
  if (n_kinds == 0 || ymax <= 0)
    return;
  double step = nice_step(ymax, 5), ytop = ceil(ymax / step) * step;
  double lx0 = log2(xmin), lx1 = log2(xmax) > lx0 ? log2(xmax) : lx0 + 1;
  int width = left + plot_w + right_legend, height = top + plot_h + 40;
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" role=\"img\"><title>copy bandwidth on ", width, height, width,
          height);
  xml_text(out, device);
  fputs("</title>\n<text x=\"0\" y=\"16\" class=\"t\">copy bandwidth against size on ", out);
  xml_text(out, device);
  fputs(" (GB/s)</text>\n", out);
  for (double v = 0; v <= ytop * 1.0001; v += step) {
    int y = top + plot_h - (int)(plot_h * v / ytop);
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"g\"/><text x=\"%d\" "
            "y=\"%d\" class=\"l\">%g</text>\n", left, y, left + plot_w, y, left - 6, y + 4, v);
  }
  for (double lx = ceil(lx0); lx <= lx1 + 1e-9; lx += 2) { /* every factor of 4 */
    int x = left + (int)(plot_w * (lx - lx0) / (lx1 - lx0));
    double bytes = exp2(lx);
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"g\"/><text x=\"%d\" "
            "y=\"%d\" class=\"a\">", x, top, x, top + plot_h, x, top + plot_h + 16);
    if (bytes >= 1048576)
      fprintf(out, "%gM", bytes / 1048576);
    else
      fprintf(out, "%gK", bytes / 1024);
    fputs("</text>\n", out);
  }
  for (int k = 0; k < n_kinds; k++) {
    fprintf(out, "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"%s\" points=\"",
            PALETTE[k % N_PALETTE]);
    for (int i = 0; i < res->n_rows; i++) {
      const bench_row *r = &res->rows[i];
      size_t len = strlen(kinds[k]);
      if (strcmp(r->suite, "copy") || strcmp(r->device, device) || !isfinite(r->median) ||
          strncmp(r->name, kinds[k], len) || r->name[len] != '/')
        continue;
      fprintf(out, "%.1f,%.1f ", left + plot_w * (log2(r->bytes) - lx0) / (lx1 - lx0),
              top + plot_h - plot_h * r->median / ytop);
    }
    fprintf(out, "\"/>\n<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%d\">%s</text>\n", left + plot_w + 14, top + 20 * k,
            PALETTE[k % N_PALETTE], left + plot_w + 30, top + 20 * k + 10, kinds[k]);
  }
  fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"a\">bytes per copy (log scale)</text>\n</svg>\n",
          left + plot_w / 2, height - 4);
}

static void html_table(FILE *out, const bench_results *res, const char *suite) {
  static const int shown[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  char cell[CELL];
  fputs("<table><tr>", out);
  for (size_t c = 0; c < sizeof shown / sizeof *shown; c++)
    if (shown[c] < 3 || column_used(res, suite, shown[c]))
      fprintf(out, "<th>%s</th>", COLUMNS[shown[c]].head);
  fputs("</tr>\n", out);
  for (int i = 0; i < res->n_rows; i++) {
    if (strcmp(res->rows[i].suite, suite) != 0)
      continue;
    fputs("<tr>", out);
    for (size_t c = 0; c < sizeof shown / sizeof *shown; c++) {
      if (!(shown[c] < 3 || column_used(res, suite, shown[c])))
        continue;
      COLUMNS[shown[c]].cell(&res->rows[i], cell);
      fputs(COLUMNS[shown[c]].right ? "<td class=\"n\">" : "<td>", out);
      xml_text(out, cell);
      fputs("</td>", out);
    }
    fputs("</tr>\n", out);
  }
  fputs("</table>\n", out);
}

static void html_machine(FILE *out, const bench_results *res) {
  const bench_machine *m = &res->machine;
  fputs("<table><tr><th>CPU</th><td>", out);
  xml_text(out, m->cpu_model);
  fprintf(out, " (%d cores, %.1f GiB)</td></tr>\n<tr><th>OS</th><td>", m->cores,
          (double)m->host_memory / 1073741824.0);
  xml_text(out, m->os);
  fputs("</td></tr>\n<tr><th>BLAS</th><td>", out);
  xml_text(out, m->blas);
  fputs(" (OPENBLAS_NUM_THREADS ", out);
  xml_text(out, m->blas_threads);
  char method[200];
  method_text(&res->options, method, sizeof method);
  fprintf(out, ")</td></tr>\n<tr><th>method</th><td>%s</td></tr>\n", method);
  for (int i = 0; i < m->n_devices; i++) {
    fputs("<tr><th>", out);
    xml_text(out, m->devices[i].spec);
    fputs("</th><td>", out);
    xml_text(out, m->devices[i].name);
    fputs(" — ", out);
    xml_text(out, m->devices[i].driver);
    fputs("</td></tr>\n", out);
  }
  fputs("</table>\n", out);
}

static double largest_copy(const bench_results *res) {
  double max = 0;
  for (int i = 0; i < res->n_rows; i++)
    if (!strcmp(res->rows[i].suite, "copy") && res->rows[i].bytes > max)
      max = res->rows[i].bytes;
  return max;
}

static int suite_has_rows(const bench_results *res, const char *suite, const char *unit) {
  for (int i = 0; i < res->n_rows; i++)
    if (!strcmp(res->rows[i].suite, suite) && (!unit || !strcmp(res->rows[i].unit, unit)))
      return 1;
  return 0;
}

static void html_suite(FILE *out, const bench_results *res, const char *suite) {
  if (!suite_has_rows(res, suite, NULL))
    return;
  fprintf(out, "<h2>%s</h2>\n", suite);
  if (!strcmp(suite, "copy")) {
    char title[96];
    double at = largest_copy(res);
    snprintf(title, sizeof title, "copies of %.0f MiB", at / 1048576.0);
    html_bars(out, res, "copy", "GB/s", at >= 1048576 ? title : "copies, largest size", at);
    for (int d = 0; d < res->machine.n_devices; d++)
      html_copy_lines(out, res, res->machine.devices[d].spec);
  } else if (!strcmp(suite, "gemm")) {
    html_bars(out, res, "gemm", "GFLOP/s", "GEMM: dlrt (solid) and the vendor library (pale)", 0);
  } else if (!strcmp(suite, "ops")) {
    html_bars(out, res, "ops", "GB/s", "elementwise and reduction kernels", 0);
    if (suite_has_rows(res, "ops", "GFLOP/s"))
      html_bars(out, res, "ops", "GFLOP/s", "conv2d forward and training runs", 0);
  } else if (!strcmp(suite, "train")) {
    html_bars(out, res, "train", "steps/s", "training steps of the mlp and cnn models", 0);
  } else if (!strcmp(suite, "loader")) {
    html_bars(out, res, "loader", "images/s", "the data loader against its worker count", 0);
  } else { /* a suite added later: bars in the unit of its first row */
    for (int i = 0; i < res->n_rows; i++)
      if (!strcmp(res->rows[i].suite, suite)) {
        html_bars(out, res, suite, res->rows[i].unit, suite, 0);
        break;
      }
  }
  html_table(out, res, suite);
}

int bench_write_html(FILE *out, const bench_results *res) {
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>dlbench report</title>\n<style>\n"
        "body{font-family:sans-serif;margin:24px;color:#222}\n"
        "table{border-collapse:collapse;margin:8px 0 24px;font-size:13px}\n"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}\n"
        "td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
        "svg{display:block;margin:12px 0;font-size:12px}\n"
        "svg .t{font-weight:bold;font-size:14px} svg .g{stroke:#ddd}\n"
        "svg .l{text-anchor:end} svg .a{text-anchor:middle;fill:#555} svg .v{fill:#333}\n"
        "</style></head><body>\n<h1>dlbench report</h1>\n<p>dlrt ", out);
  xml_text(out, dlrt_version_string());
  fputs(", ", out);
  xml_text(out, res->machine.created);
  fputs("</p>\n", out);
  html_machine(out, res);
  for (int s = 0; s < bench_suite_count; s++)
    html_suite(out, res, bench_suites[s].name);
  for (int i = 0; i < res->n_skips; i++) {
    fputs(i ? "<br>" : "<h2>skipped</h2><p>", out);
    xml_text(out, res->skips[i].suite);
    fputs(*res->skips[i].device ? " on " : "", out);
    xml_text(out, res->skips[i].device);
    fputs(": ", out);
    xml_text(out, res->skips[i].reason);
  }
  fputs(res->n_skips ? "</p>\n</body></html>\n" : "</body></html>\n", out);
  return ferror(out) ? -1 : 0;
}
