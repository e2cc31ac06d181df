/* dlrecord-options.c — dlrecord's command line: --help, --version, and the
 * command with its operands into dlrecord_options (dlrecord.h); a bad one
 * is a message in dlrecord_options.error, printed by the caller. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrecord.h"
#include "dlrt.h"

void dlrecord_usage(FILE *out) {
  fputs("Usage: dlrecord convert SOURCE FOLDER\n"
        "  or:  dlrecord idx IMAGES LABELS FILE.dlrec\n"
        "  or:  dlrecord tokens TEXT FILE.bin\n"
        "  or:  dlrecord info FILE.dlrec|FILE.bin...\n"
        "Writes and inspects dlrt record files, which dltrain --data reads, and\n"
        "llm.c token files for language models.\n\n"
        "  convert SOURCE FOLDER   both splits of SOURCE (fashion-mnist, a folder of\n"
        "                          MNIST-family IDX files, or generated) into\n"
        "                          FOLDER/train.dlrec and FOLDER/test.dlrec (FOLDER is\n"
        "                          created); then: dltrain --data FOLDER\n"
        "  idx IMAGES LABELS FILE  one pair of IDX files (plain or .gz) into FILE\n"
        "  tokens TEXT FILE.bin    a text file, or a folder's text files in name order,\n"
        "                          as byte tokens (vocabulary 256) into an llm.c token\n"
        "                          file (256 int32 header: 20240520, 1, count; uint16\n"
        "                          tokens)\n"
        "  info FILE...            count, shape, dtype, classes and label histogram\n"
        "                          (a .bin token file: its count and vocabulary)\n"
        "  -h, --help              show this help and exit\n"
        "  -V, --version           show the dlrt version and exit\n\n"
        "Files are replaced atomically, and only a regular file (or a link to one);\n"
        "both targets are checked before anything is written.\n"
        "The format (a 64-byte little-endian header, the images, the labels) is\n"
        "described in dlrt.h and README, so other tools can write it too.\n"
        "Exit status: 0 success, 1 unreadable or corrupt input or a failed write,\n"
        "2 usage error.\n",
        out);
}

void dlrecord_version(FILE *out) {
  fprintf(out, "dlrecord (dlrt) %s\n", dlrt_version_string());
}

void dlrecord_options_free(dlrecord_options *o) {
  free(o->owned);
  o->owned = NULL;
  o->operands = NULL;
  o->n_operands = 0;
}

/* The command and the number of operands it takes (max -1: any, at least min). */
static const struct {
  const char *name, *operands;
  int min, max;
} commands[] = {{"convert", "SOURCE FOLDER", 2, 2},
                {"idx", "IMAGES LABELS FILE.dlrec", 3, 3},
                {"tokens", "TEXT FILE.bin", 2, 2},
                {"info", "one or more files", 1, -1}};
enum { N_COMMANDS = sizeof commands / sizeof *commands };

static int check_command(dlrecord_options *o) {
  const char *names[N_COMMANDS];
  for (int i = 0; i < N_COMMANDS; i++) {
    names[i] = commands[i].name;
    if (strcmp(o->command, commands[i].name) != 0) continue;
    if (o->n_operands < commands[i].min ||
        (commands[i].max >= 0 && o->n_operands > commands[i].max))
      return tool_usage_error(o->error, "%s needs %s", commands[i].name, commands[i].operands);
    return 1;
  }
  return tool_unknown_word(o->error, "command", o->command, names, N_COMMANDS);
}

int dlrecord_parse_options(int argc, char *const argv[], dlrecord_options *o) {
  static const char shortopts[] = ":hV";
  static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                           {"version", no_argument, NULL, 'V'},
                                           {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  int c, ok = 1, answer = 0;
  if (argc < 1 || !argv) argc = 0; /* no program name: nothing to read */
  char **args = tool_argv_copy(argc, argv);
  if (!args) return tool_usage_error(o->error, "out of memory"), STATUS_USAGE;
  tool_getopt_reset();

  /* Options may stand anywhere ("dlrecord info --help"); "--" ends them, for
   * a file whose name starts with '-'. */
  while (ok && !answer && argc > 0 &&
         (c = getopt_long(argc, args, shortopts, longopts, NULL)) != -1) {
    switch (c) {
    case 'h': answer = TOOL_HELP; break;
    case 'V': answer = TOOL_VERSION; break;
    default: ok = 0, tool_getopt_error(c, args, shortopts, longopts, o->error); break;
    }
  }
  int first = argc > 0 ? optind : 0;
  if (ok && !answer && first >= argc)
    ok = tool_usage_error(o->error, "give a command: convert, idx, tokens or info");
  if (ok && !answer) {
    o->command = args[first];
    o->operands = args + first + 1;
    o->n_operands = argc - first - 1;
    o->owned = args;
    ok = check_command(o);
  }
  if (answer || !ok) {
    if (o->owned != args) free(args);
    dlrecord_options_free(o);
    o->command = NULL;
    return answer ? answer : STATUS_USAGE;
  }
  return 0;
}
