/* dlgen-options.c — dlgen's command line into dlgen_options (dlgen.h); a
 * bad one is a message in dlgen_options.error, printed by the caller. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlgen.h"
#include "dlrt.h"

void dlgen_usage(FILE *out) {
  fputs("Usage: dlgen [OPTION]... CHECKPOINT\n"
        "Samples text from a GPT checkpoint (dltrain --model gpt-mini --save FILE), one\n"
        "token at a time with a key/value cache: each new token attends to the keys and\n"
        "values the earlier ones left on the device, so nothing is recomputed and a\n"
        "token costs the same matrix products at every position plus attention over\n"
        "the positions so far. Tokens are printed as they come.\n\n"
        "  -p, --prompt TEXT        what the sample continues (default: a newline; with\n"
        "                           a vocabulary other than bytes, <|endoftext|> 50256\n"
        "                           where the vocabulary has it, else token 0). With\n"
        "                           byte tokens (vocabulary 256) its bytes are the\n"
        "                           tokens; otherwise give token ids (\"464 3290 318\"):\n"
        "                           dlrt has no BPE tokenizer\n"
        "  -n, --tokens N           tokens to sample after the prompt (default 200);\n"
        "                           sampling stops early at the model's context\n"
        "  -t, --temperature T      divides the logits (default 1); 0: always the\n"
        "                           likeliest token (greedy, no draws)\n"
        "  -k, --top-k K            draw from the K likeliest tokens only (0: all, the\n"
        "                           default)\n"
        "      --top-p P            draw from the likeliest tokens whose probabilities\n"
        "                           sum to P (nucleus sampling; in (0, 1], 1: all, the\n"
        "                           default), after --top-k\n"
        "  -s, --seed S             the draws' seed (default 1): the same seed, model,\n"
        "                           device and --threads give the same text\n"
        "  -d, --device SPEC        cpu, cpu:0, opencl:N, cuda:N or auto (default:\n"
        "                           $DLRT_DEVICE, else auto)\n"
        "      --threads N          CPU backend threads (0: all cores)\n"
        "      --timing             each position's time (the model's step: inputs\n"
        "                           written, run, logits read) and the tokens per\n"
        "                           second on stderr\n"
        "      --bench P,Q,...      after sampling, run the steps at positions P, Q,\n"
        "                           ... again in turn, 21 rounds, and print each one's\n"
        "                           median time and its ratio to P's on stderr (the\n"
        "                           same token at each: the caches stay as they were;\n"
        "                           the sample must reach the last position)\n"
        "  -h, --help               show this help and exit\n"
        "  -V, --version            show the dlrt version and exit\n\n"
        "Output: with byte tokens, the prompt and then each sampled byte as it is,\n"
        "and a newline at the end when the text does not end in one; otherwise the\n"
        "token ids, separated by spaces, on one line. When the positions reach the\n"
        "model's context, dlgen says so on stderr and stops (no sliding window).\n"
        "Exit status: 0 success, 1 the checkpoint cannot be read or is not a GPT's,\n"
        "or a dlrt call failed, 2 usage error (a bad option, an unknown device).\n",
        out);
}

void dlgen_version(FILE *out) { fprintf(out, "dlgen (dlrt) %s\n", dlrt_version_string()); }

/* --bench P,Q,...: positions from 0 to the largest context a GPT may have. */
static int parse_bench(const char *text, dlgen_options *o) {
  char buf[256], *fields[DLGEN_BENCH_MAX];
  int n = tool_split(text, ',', buf, sizeof buf, fields, DLGEN_BENCH_MAX);
  if (n == 0)
    return tool_usage_error(o->error, "--bench needs 1 to %d positions such as 50,1000, not "
                            "'%.60s'", DLGEN_BENCH_MAX, text);
  for (int i = 0; i < n; i++) {
    long long v;
    if (!tool_parse_int("--bench", fields[i], 0, (1 << 20) - 1, &v, o->error)) return 0;
    o->bench[i] = v;
  }
  o->n_bench = n;
  return 1;
}

int dlgen_parse_options(int argc, char *const argv[], dlgen_options *o) {
  static const char shortopts[] = ":p:n:t:k:s:d:hV";
  enum { OPT_TOP_P = 256, OPT_THREADS, OPT_TIMING, OPT_BENCH };
  static const struct option longopts[] = {{"prompt", required_argument, NULL, 'p'},
                                           {"tokens", required_argument, NULL, 'n'},
                                           {"temperature", required_argument, NULL, 't'},
                                           {"top-k", required_argument, NULL, 'k'},
                                           {"top-p", required_argument, NULL, OPT_TOP_P},
                                           {"seed", required_argument, NULL, 's'},
                                           {"device", required_argument, NULL, 'd'},
                                           {"threads", required_argument, NULL, OPT_THREADS},
                                           {"timing", no_argument, NULL, OPT_TIMING},
                                           {"bench", required_argument, NULL, OPT_BENCH},
                                           {"help", no_argument, NULL, 'h'},
                                           {"version", no_argument, NULL, 'V'},
                                           {NULL, 0, NULL, 0}};
  static const tool_range temperatures = {0, INFINITY, 0, 0}, shares = {0, 1, 1, 0};
  *o = (dlgen_options){.tokens = 200, .temperature = 1.0f, .top_p = 1.0f, .seed = 1,
                       .threads = -1};
  int c, ok = 1, answer = 0;
  long long v;
  if (argc < 1 || !argv) argc = 0; /* no program name: nothing to read */
  char **args = tool_argv_copy(argc, argv);
  if (!args) return tool_usage_error(o->error, "out of memory"), STATUS_USAGE;
  tool_getopt_reset();
  while (ok && !answer && argc > 0 &&
         (c = getopt_long(argc, args, shortopts, longopts, NULL)) != -1) {
    switch (c) {
    case 'p': o->prompt = optarg; break;
    case 'n':
      /* At most the largest context a GPT may have (dlrt_gpt_check). */
      if ((ok = tool_parse_int("--tokens", optarg, 0, 1 << 20, &v, o->error))) o->tokens = v;
      break;
    case 't':
      ok = tool_parse_float("--temperature", optarg, temperatures, &o->temperature, o->error);
      break;
    case 'k':
      if ((ok = tool_parse_int("--top-k", optarg, 0, 1 << 24, &v, o->error))) o->top_k = v;
      break;
    case OPT_TOP_P: ok = tool_parse_float("--top-p", optarg, shares, &o->top_p, o->error); break;
    case 's':
      if ((ok = tool_parse_int("--seed", optarg, 0, LLONG_MAX, &v, o->error)))
        o->seed = (uint64_t)v;
      break;
    case 'd': o->device = optarg; break;
    case OPT_THREADS:
      if ((ok = tool_parse_int("--threads", optarg, 0, 4096, &v, o->error))) o->threads = (int)v;
      break;
    case OPT_TIMING: o->timing = 1; break;
    case OPT_BENCH: ok = parse_bench(optarg, o); break;
    case 'h': answer = TOOL_HELP; break;
    case 'V': answer = TOOL_VERSION; break;
    default: ok = 0, tool_getopt_error(c, args, shortopts, longopts, o->error); break;
    }
  }
  int first = argc > 0 ? optind : 0;
  if (ok && !answer) {
    if (first >= argc)
      ok = tool_usage_error(o->error, "give a checkpoint: dlgen FILE (dltrain --model gpt-mini "
                            "--save FILE makes one)");
    else if (argc - first > 1)
      ok = tool_usage_error(o->error, "one checkpoint, not %d operands ('%s', then '%s')",
                            argc - first, args[first], args[first + 1]);
    else
      o->checkpoint = args[first];
  }
  free(args);
  if (answer) return answer;
  return ok ? 0 : STATUS_USAGE;
}
