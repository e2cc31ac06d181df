/* dlbench-options.c — dlbench's command line: --help, and the parsing of its
 * options and operands (suites, or compare A B) into dlbench_options
 * (dlbench.h); a bad one is a message in dlbench_options.error, printed by
 * the caller. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlbench.h"

void dlbench_usage(FILE *out) {
  fputs("Usage: dlbench [OPTION]... [SUITE]...\n"
        "  or:  dlbench compare A.json B.json\n"
        "Measures dlrt's devices side by side, each beside its vendor library called\n"
        "directly (OpenBLAS on the CPU, CLBlast on OpenCL, cuBLAS on CUDA).\n\n"
        "Suites (default: all):\n"
        "  copy    host->device and device->host from pageable and pinned memory, and\n"
        "          device->device, 4 KiB to 256 MiB (GB/s; device->device counts the\n"
        "          bytes read plus the bytes written)\n"
        "  gemm    fp32, fp16 and bf16 GEMM, square and training-shaped (GFLOP/s), each\n"
        "          beside the vendor library: ratio dlrt/vendor (1.0: no overhead)\n"
        "  ops     elementwise and reduction kernels (GB/s, and as a fraction of the\n"
        "          device's own device->device copy), conv2d forward and training runs\n"
        "  train   steps and images per second of the mlp and cnn models, with the\n"
        "          planned and measured peak device memory\n"
        "  loader  the data loader's images/s against its worker count (1, 2, 4),\n"
        "          with augmentation, prefetch 4, batch 64, to the device\n"
        "  spill   steps/s of mlp and cnn under device budgets of 50% and 25% of\n"
        "          their unlimited peak, with and without prefetch (spilling to host\n"
        "          memory, optimizer on the host); a budget below what one operation\n"
        "          needs is listed as skipped, with the smallest that fits\n"
        "  all     every suite\n\n"
        "Options:\n"
        "  -d, --device SPEC    a device to measure: cpu, opencl:N, cuda:N, auto; repeat\n"
        "                       it or give a comma-separated list (default: every device)\n"
        "  -q, --quick          few sizes and repetitions: a smoke test (about a minute\n"
        "                       for all suites on a CPU and a PoCL device)\n"
        "  -r, --reps N         timed runs per case: at least N (default 10, quick 3) ...\n"
        "  -t, --min-time S     ... and at least S seconds of them in all (default 0.2,\n"
        "                       quick 0); never more than 2000 runs\n"
        "  -w, --warmup N       untimed runs before timing: at least N (default 2, quick\n"
        "                       1) and, when N > 0, a quarter of --min-time\n"
        "  -f, --filter TEXT    only cases whose name contains TEXT (for example\n"
        "                       f32/1024x1024x1024)\n"
        "      --json FILE|-    write the results as JSON (docs/dlbench.md)\n"
        "      --csv FILE|-     write the results as CSV, one row per case\n"
        "      --report FILE    write an HTML report with SVG charts (no scripts, no\n"
        "                       network)\n"
        "      --link SPEC      put a host link model on every device measured (as\n"
        "                       DLRT_LINK): a rate with an optional latency, 12GB/s or\n"
        "                       12GB/s:10us, or a preset that keeps a GPU's ratio of\n"
        "                       compute to link bandwidth (h200-pcie5, h100-pcie5,\n"
        "                       a100-pcie4, l40s-pcie4, gh200-c2c, mi300x-pcie5; see\n"
        "                       README); copies between host and device then take the\n"
        "                       model's time, the copy table shows it (MODEL), and its\n"
        "                       sizes stop where a copy would pass 50 ms; a preset's\n"
        "                       GEMM rate is measured once per device and kept in\n"
        "                       DLRT_PROFILE_CACHE (DLRT_PROFILE_FRESH=1: again), or\n"
        "                       pinned by DLRT_LINK_FLOPS=RATE (30GFLOP/s)\n"
        "      --quiet          no progress lines on stderr\n"
        "  -h, --help           show this help and exit\n"
        "  -V, --version        show the dlrt version and exit\n\n"
        "The table goes to stdout, or to stderr when --json - or --csv - takes stdout.\n"
        "A FILE is replaced only once the run is done (a failed run keeps the old one),\n"
        "and only if it is a regular file or a link to one; a FIFO or device is\n"
        "written into.\n"
        "Each case: --warmup runs of each side, then timed runs alternating dlrt and\n"
        "the vendor library; median, min and max are reported, and per row whether\n"
        "device events or the host clock (with a synchronize) timed it.\n\n"
        "compare A.json B.json prints, for each (suite, device, case) in both files,\n"
        "the two medians and the ratio B/A.\n\n"
        "Environment: OPENBLAS_NUM_THREADS (both sides on the CPU use the same\n"
        "OpenBLAS), DLRT_BACKEND, DLRT_MEM_LIMIT, DLRT_LINK (see dlinfo --help).\n"
        "Exit status: 0 success, 1 a dlrt call failed, 2 usage error or unknown device.\n",
        out);
}

void dlbench_options_free(dlbench_options *o) {
  for (int i = 0; i < o->n_specs; i++) {
    free(o->specs[i]);
    o->specs[i] = NULL;
  }
  o->n_specs = 0;
}

/* Splits a comma-separated --device list into o->specs. */
static int add_specs(dlbench_options *o, const char *list) {
  char *copy = strdup(list), *save = NULL;
  if (!copy) return tool_usage_error(o->error, "out of memory");
  int ok = 1, added = 0;
  for (char *s = strtok_r(copy, ",", &save); s && ok; s = strtok_r(NULL, ",", &save)) {
    if (o->n_specs == BENCH_MAX_SPECS)
      ok = tool_usage_error(o->error, "more than %d devices", BENCH_MAX_SPECS);
    else if (!(o->specs[o->n_specs] = strdup(s)))
      ok = tool_usage_error(o->error, "out of memory");
    else
      o->n_specs++, added++;
  }
  if (ok && !added)
    ok = tool_usage_error(o->error, "--device needs a spec (cpu, opencl:N, cuda:N, auto)");
  free(copy);
  return ok;
}

/* --link SPEC: checked here (no device needed), set on the devices later. */
static int parse_link(dlbench_options *o, const char *spec) {
  dlrt_link_spec parsed;
  if (dlrt_link_parse(spec, &parsed) != DLRT_OK)
    return tool_usage_error(o->error, "--link: %s", dlrt_last_error());
  o->link = spec;
  return 1;
}

/* The suites of the table (and "all") by name. */
typedef struct {
  const char *const *names;
  int n;
} suite_list;

static int select_suite(dlbench_options *o, const suite_list *suites, const char *name) {
  const char *words[BENCH_MAX_SUITES + 1];
  if (strcmp(name, "all") == 0) {
    for (int i = 0; i < suites->n; i++)
      o->suites[i] = 1;
    return 1;
  }
  for (int i = 0; i < suites->n; i++) {
    if (strcmp(name, suites->names[i]) == 0)
      return o->suites[i] = 1;
    words[i] = suites->names[i];
  }
  words[suites->n] = "all";
  return tool_unknown_word(o->error, "suite", name, words, (size_t)suites->n + 1);
}

/* The operands args[first..argc): suites, or compare A B. */
static int parse_operands(dlbench_options *o, const suite_list *suites, int argc,
                          char *const args[], int first) {
  if (first < argc && strcmp(args[first], "compare") == 0) {
    if (argc - first != 3)
      return tool_usage_error(o->error, "compare needs two JSON files: dlbench compare A.json "
                              "B.json");
    o->compare[0] = args[first + 1];
    o->compare[1] = args[first + 2];
    return 1;
  }
  if (first == argc)
    return select_suite(o, suites, "all");
  for (int i = first; i < argc; i++)
    if (!select_suite(o, suites, args[i]))
      return 0;
  return 1;
}

int dlbench_parse_options(int argc, char *const argv[], const char *const suite_names[],
                          int n_suites, dlbench_options *o) {
  enum { OPT_JSON = 256, OPT_CSV, OPT_REPORT, OPT_QUIET, OPT_LINK };
  static const char shortopts[] = ":d:qr:t:w:f:hV";
  static const struct option longopts[] = {
      {"device", required_argument, NULL, 'd'},  {"quick", no_argument, NULL, 'q'},
      {"reps", required_argument, NULL, 'r'},    {"min-time", required_argument, NULL, 't'},
      {"warmup", required_argument, NULL, 'w'},  {"filter", required_argument, NULL, 'f'},
      {"json", required_argument, NULL, OPT_JSON}, {"csv", required_argument, NULL, OPT_CSV},
      {"report", required_argument, NULL, OPT_REPORT},
      {"quiet", no_argument, NULL, OPT_QUIET},   {"link", required_argument, NULL, OPT_LINK},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},       {NULL, 0, NULL, 0}};
  static const tool_range seconds = {0, 3600, 0, 0};
  memset(o, 0, sizeof *o);
  if (n_suites < 0 || n_suites > BENCH_MAX_SUITES || (n_suites && !suite_names))
    return tool_usage_error(o->error, "dlbench_parse_options: %d suites (at most %d)", n_suites,
                            BENCH_MAX_SUITES), STATUS_USAGE;
  const suite_list suites = {suite_names, n_suites};
  long long reps = -1, warmup = -1; /* -1: the default */
  int c, ok = 1, answer = 0;
  double min_time = -1;
  if (argc < 1 || !argv) argc = 0; /* no program name: nothing to read */
  char **args = tool_argv_copy(argc, argv);
  if (!args) return tool_usage_error(o->error, "out of memory"), STATUS_USAGE;
  tool_getopt_reset();

  /* getopt permutes (a copy of argv), so options may follow the suites
   * (dlbench gemm --quick). */
  while (ok && !answer && argc > 0 &&
         (c = getopt_long(argc, args, shortopts, longopts, NULL)) != -1) {
    switch (c) {
    case 'd': ok = add_specs(o, optarg); break;
    case 'q': o->bench.quick = 1; break;
    case 'r': ok = tool_parse_int("--reps", optarg, 1, BENCH_MAX_REPS, &reps, o->error); break;
    case 't': ok = tool_parse_double("--min-time", optarg, seconds, &min_time, o->error); break;
    case 'w': ok = tool_parse_int("--warmup", optarg, 0, 1000, &warmup, o->error); break;
    case 'f': o->bench.filter = optarg; break;
    case OPT_JSON: o->json = optarg; break;
    case OPT_CSV: o->csv = optarg; break;
    case OPT_REPORT: o->report = optarg; break;
    case OPT_QUIET: o->bench.quiet = 1; break;
    case OPT_LINK: ok = parse_link(o, optarg); break;
    case 'h': answer = TOOL_HELP; break;
    case 'V': answer = TOOL_VERSION; break;
    default: ok = 0, tool_getopt_error(c, args, shortopts, longopts, o->error); break;
    }
  }
  if (ok && !answer)
    ok = parse_operands(o, &suites, argc, args, argc > 0 ? optind : 0);
  free(args);
  int to_stdout = (o->json && !strcmp(o->json, "-")) + (o->csv && !strcmp(o->csv, "-")) +
                  (o->report && !strcmp(o->report, "-"));
  if (ok && !answer && to_stdout > 1)
    ok = tool_usage_error(o->error, "only one of --json, --csv and --report can write to "
                          "stdout ('-')");
  if (answer || !ok) {
    dlbench_options_free(o);
    return answer ? answer : STATUS_USAGE;
  }
  bench_options *b = &o->bench;
  b->warmup = warmup >= 0 ? (int)warmup : b->quick ? BENCH_QUICK_WARMUP : BENCH_DEFAULT_WARMUP;
  b->reps = reps >= 0 ? (int)reps : b->quick ? BENCH_QUICK_REPS : BENCH_DEFAULT_REPS;
  b->min_time = min_time >= 0 ? min_time
                : b->quick    ? BENCH_QUICK_MIN_TIME
                              : BENCH_DEFAULT_MIN_TIME;
  return 0;
}
