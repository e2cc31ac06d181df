/* dlinfo-options.c — dlinfo's command line: --help, --version and the
 * parsing of its options into dlinfo_options (dlinfo.h); a bad one is a
 * message in dlinfo_options.error, printed by the caller. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlinfo.h"
#include "dlrt.h"

void dlinfo_usage(FILE *out) {
  fputs("Usage: dlinfo [--json] [--watch SECONDS] [--device SPEC] [--link SPEC] [--help]\n"
        "              [--version]\n"
        "Lists dlrt's backends and devices with their memory, and the dlrt processes\n"
        "using each device, as nvidia-smi does for every vendor.\n\n"
        "  -j, --json           print one JSON object instead of a table\n"
        "  -w, --watch SECONDS  refresh every SECONDS (0.001 up to a year)\n"
        "                       until interrupted\n"
        "  -d, --device SPEC    show one device: cpu, cpu:0, opencl:N, cuda:N or\n"
        "                       auto (\"\" means $DLRT_DEVICE)\n"
        "  -l, --link SPEC      put a host link model on the devices shown (as\n"
        "                       DLRT_LINK does) and show it: 12GB/s[:10us], or a\n"
        "                       preset (h200-pcie5, ...), whose rate is then this\n"
        "                       device's measured GEMM rate over the preset's FLOP\n"
        "                       per byte (measured once, under a second); none\n"
        "  -h, --help           show this help and exit\n"
        "  -V, --version        show the dlrt version and exit\n\n"
        "Processes: every dlrt program keeps a file of what its allocators hold on\n"
        "each device, in $XDG_RUNTIME_DIR/dlrt (else /tmp/dlrt-UID; a folder of\n"
        "your own, mode 0700), rewritten at most every 0.2 s and removed when it\n"
        "shuts down. dlinfo lists each process under the device it uses: PID,\n"
        "NAME, RESERVED (held from the driver), ALLOCATED (in live buffers) and\n"
        "PEAK (most allocated at once since it started), and removes the files\n"
        "of processes that have gone. Only your own processes are seen, and only\n"
        "those that see the same XDG_RUNTIME_DIR.\n\n"
        "Environment:\n"
        "  DLRT_DEVICE     device programs open by default (a SPEC; unset: auto)\n"
        "  DLRT_BACKEND    backends to start, comma-separated (cpu,opencl,cuda), in\n"
        "                  any case; a name this build lacks is an error;\n"
        "                  unset: every compiled backend\n"
        "  DLRT_MEM_LIMIT  allocator budget per device: bytes with an optional\n"
        "                  K, M, G or T suffix (256M, 1.5G) or a percentage of\n"
        "                  the device's memory (50%)\n"
        "  DLRT_LINK       a host link model on every device: a rate with an\n"
        "                  optional latency (12GB/s, 12GB/s:10us) or a preset\n"
        "                  keeping a GPU's compute-to-link ratio (h200-pcie5,\n"
        "                  h100-pcie5, a100-pcie4, l40s-pcie4, gh200-c2c,\n"
        "                  mi300x-pcie5); copies between host and device memory\n"
        "                  then take its time (README, \"The host link\")\n"
        "  DLRT_PROCESS_REGISTRY  0: a program keeps no registry file (dlinfo does\n"
        "                  not list it); 1 (the default): it does\n"
        "  XDG_RUNTIME_DIR where the registry folder lies (see Processes)\n"
        "Exit status: 0 success (also when --watch is interrupted), 1 a dlrt call\n"
        "failed, 2 usage error or a spec that opens nothing.\n",
        out);
}

void dlinfo_version(FILE *out) { fprintf(out, "dlinfo (dlrt) %s\n", dlrt_version_string()); }

int dlinfo_parse_options(int argc, char *const argv[], dlinfo_options *o) {
  static const char shortopts[] = ":jw:d:l:hV";
  static const struct option longopts[] = {
      {"json", no_argument, NULL, 'j'},         {"watch", required_argument, NULL, 'w'},
      {"device", required_argument, NULL, 'd'}, {"link", required_argument, NULL, 'l'},
      {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  dlrt_link_spec link;
  /* Below a millisecond the refreshes would only spin (the sleep is a
   * timespec); above a year is a typo. */
  static const tool_range seconds = {0.001, 86400.0 * 365, 0, 0};
  memset(o, 0, sizeof *o);
  int c, ok = 1, answer = 0;
  if (argc < 1 || !argv) argc = 0; /* no program name: nothing to read */
  char **args = tool_argv_copy(argc, argv);
  if (!args) return tool_usage_error(o->error, "out of memory"), STATUS_USAGE;
  tool_getopt_reset();

  while (ok && !answer && argc > 0 &&
         (c = getopt_long(argc, args, shortopts, longopts, NULL)) != -1) {
    switch (c) {
    case 'j': o->json = 1; break;
    case 'd': o->spec = optarg; break;
    case 'l': /* checked here (no device needed), set on the devices later */
      o->link = optarg;
      if (dlrt_link_parse(optarg, &link) != DLRT_OK)
        ok = tool_usage_error(o->error, "--link: %s", dlrt_last_error());
      break;
    case 'w': ok = tool_parse_double("--watch", optarg, seconds, &o->watch, o->error); break;
    case 'h': answer = TOOL_HELP; break;
    case 'V': answer = TOOL_VERSION; break;
    default: ok = 0, tool_getopt_error(c, args, shortopts, longopts, o->error); break;
    }
  }
  if (ok && !answer && argc > 0 && optind < argc)
    ok = tool_usage_error(o->error, "unexpected argument '%s'", args[optind]);
  free(args);
  return answer ? answer : ok ? 0 : STATUS_USAGE;
}
