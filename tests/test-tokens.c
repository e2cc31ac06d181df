/*
 * test-tokens.c — token streams (dlrt_tokens, data.h): a text file is its
 * bytes; a folder is its top-level text files in name order (hidden files,
 * sub-folders, FIFOs and files holding a NUL byte skipped); an llm.c token
 * file written by dlrt_tokens_save has llm.c's exact bytes (a 1024-byte
 * header of magic 20240520, version 1 and the count, then uint16 tokens) and
 * loads back the same; a truncated, over-long, wrong-version or empty token
 * file and a FIFO are refused with a message naming the file; the
 * validation split is the last tenth, deterministically.
 * Points: computed at run time (done_testing).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

/* A call that must succeed, as one point. */
#define check(call, ...) is_status((call), DLRT_OK, __VA_ARGS__)

static char root[4096];

static const char *at(const char *name) { return tap_join(root, name); }

static int same_as_bytes(const dlrt_tokens *t, const char *text) {
  size_t n = strlen(text);
  if (t->count != (int64_t)n) return 0;
  for (size_t i = 0; i < n; i++)
    if (t->tokens[i] != (unsigned char)text[i]) return 0;
  return 1;
}

static void expect_refused(const char *path, const char *what, const char *word) {
  dlrt_tokens t;
  int rc = dlrt_tokens_load(path, &t);
  const char *msg = dlrt_last_error();
  ok(rc < 0 && !t.tokens && t.count == 0, "%s is refused (status %d)", what, rc);
  ok(strstr(msg, path) && strstr(msg, word), "%s: the message names the file and says '%s'",
     what, word);
  diag("%s", msg);
}

static void test_text(void) {
  const char *text = "Q: What is a compiler?\nA: A program.\n\xc3\xa9t\xc3\xa9\n";
  tap_write_file(at("one.txt"), text, strlen(text));
  dlrt_tokens t;
  check(dlrt_tokens_load(at("one.txt"), &t), "a text file loads");
  ok(same_as_bytes(&t, text) && t.vocab == 256 && t.files == 1,
     "a text file is its bytes as tokens (UTF-8 too), vocabulary 256");
  dlrt_tokens_free(&t);
}

static void test_folder(void) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/corpus", root);
  mkdir(dir, 0755);
  tap_write_file(at("corpus/b"), "bbb\n", 4);
  tap_write_file(at("corpus/a"), "aa\n", 3);
  tap_write_file(at("corpus/.hidden"), "hidden\n", 7);
  static const unsigned char binary[] = {'x', 0, 1, 2};
  tap_write_file(at("corpus/a.dat"), binary, sizeof binary);
  mkdir(at("corpus/sub"), 0755);
  tap_write_file(at("corpus/sub/c"), "nested\n", 7);
  ok(mkfifo(at("corpus/fifo"), 0600) == 0, "a FIFO in the folder (made)");
  /* Debian's fortunes names each file twice: NAME and NAME.u8 -> NAME. */
  ok(symlink("a", at("corpus/a.u8")) == 0 && link(at("corpus/b"), at("corpus/b2")) == 0,
     "a symbolic and a hard link in the folder (made)");
  dlrt_tokens t;
  check(dlrt_tokens_load(dir, &t), "a folder loads (its FIFO does not block it)");
  ok(same_as_bytes(&t, "aa\nbbb\n") && t.files == 2 && t.vocab == 256,
     "a folder is its top-level text files in name order (hidden, binary, nested and FIFO "
     "skipped, a file with two names read once): %d files, %lld tokens", t.files,
     (long long)t.count);
  dlrt_tokens_free(&t);
  mkdir(at("empty"), 0755);
  expect_refused(at("empty"), "a folder without text", "no text file");
}

static void test_token_file(void) {
  enum { N = 1000 };
  dlrt_tokens t = {0};
  t.tokens = malloc(N * sizeof *t.tokens);
  for (int i = 0; i < N; i++) t.tokens[i] = (uint16_t)((i * 7919) % 50257);
  t.count = N;
  t.vocab = 50257;
  check(dlrt_tokens_save(at("toks.bin"), &t), "a token file is saved");
  size_t n = 0;
  unsigned char *b = tap_read_file(at("toks.bin"), &n);
  int header = b && n == 1024 + 2 * N;
  for (int i = 0; header && i < 256; i++) {
    uint32_t v = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                 (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
    uint32_t want = i == 0 ? 20240520u : i == 1 ? 1u : i == 2 ? (uint32_t)N : 0u;
    header = v == want;
  }
  int body = header;
  for (int i = 0; body && i < N; i++)
    body = (b[1024 + 2 * i] | b[1024 + 2 * i + 1] << 8) == t.tokens[i];
  ok(header && body, "its bytes are llm.c's: 256 int32 (20240520, 1, %d, zeros), then "
     "little-endian uint16 tokens", N);
  dlrt_tokens back;
  check(dlrt_tokens_load(at("toks.bin"), &back), "the token file loads");
  int top = 0;
  for (int i = 0; i < N; i++) top = t.tokens[i] > top ? t.tokens[i] : top;
  ok(back.count == N && !memcmp(back.tokens, t.tokens, N * sizeof *t.tokens) &&
         back.vocab == top + 1,
     "it loads back the same tokens, vocabulary the largest + 1 (%d)", back.vocab);
  dlrt_tokens_free(&back);

  tap_write_file(at("cut.bin"), b, n - 3);
  expect_refused(at("cut.bin"), "a truncated token file", "truncated");
  unsigned char *longer = malloc(n + 2);
  memcpy(longer, b, n);
  longer[n] = longer[n + 1] = 0;
  tap_write_file(at("long.bin"), longer, n + 2);
  expect_refused(at("long.bin"), "a token file with bytes after its tokens", "truncated or corrupt");
  b[4] = 2;
  tap_write_file(at("v2.bin"), b, n);
  expect_refused(at("v2.bin"), "a token file of version 2", "version 2");
  b[4] = 1;
  b[8] = b[9] = b[10] = b[11] = 0;
  tap_write_file(at("none.bin"), b, 1024);
  expect_refused(at("none.bin"), "a token file of no tokens", "no tokens");
  free(longer);
  free(b);

  dlrt_tokens big = {.tokens = t.tokens, .count = (int64_t)INT32_MAX + 1};
  is_status(dlrt_tokens_save(at("big.bin"), &big), DLRT_ERR_INVALID_ARG,
            "over 2^31 - 1 tokens is refused (llm.c's int32 count)");
  ok(access(at("big.bin"), F_OK) != 0, "and nothing is written");
  dlrt_tokens_free(&t);
}

static void test_refused_inputs(void) {
  ok(mkfifo(at("pipe"), 0600) == 0, "a FIFO (made)");
  expect_refused(at("pipe"), "a FIFO with no writer", "FIFO");
  tap_write_file(at("zero.txt"), "", 0);
  expect_refused(at("zero.txt"), "an empty file", "empty");
  expect_refused(at("missing"), "a missing file", "no such file");
}

static void test_split(void) {
  char text[1005];
  for (int i = 0; i < 1004; i++) text[i] = (char)('a' + i % 26);
  text[1004] = '\0';
  tap_write_file(at("split.txt"), text, 1004);
  dlrt_tokens all, train, val, again;
  check(dlrt_tokens_load(at("split.txt"), &all), "1004 tokens load");
  check(dlrt_tokens_split(&all, 0, &train), "the training split");
  check(dlrt_tokens_split(&all, 1, &val), "the validation split");
  check(dlrt_tokens_split(&all, 1, &again), "the validation split again");
  ok(train.count == 904 && val.count == 100 &&
         !memcmp(train.tokens, all.tokens, 904 * sizeof *all.tokens) &&
         !memcmp(val.tokens, all.tokens + 904, 100 * sizeof *all.tokens),
     "validation is the last tenth (100 of 1004), training the rest before it");
  ok(again.count == val.count && !memcmp(again.tokens, val.tokens, 100 * sizeof *val.tokens),
     "the same split every time");
  dlrt_tokens_free(&train);
  dlrt_tokens_free(&val);
  dlrt_tokens_free(&again);
  dlrt_tokens one = all;
  one.count = 1;
  is_status(dlrt_tokens_split(&one, 1, &val), DLRT_ERR_INVALID_ARG,
            "one token has no validation split");
  dlrt_tokens_free(&all);
}

int main(void) {
  tap_tempdir("dlrt-tokens", root, sizeof root);
  test_text();
  test_folder();
  test_token_file();
  test_refused_inputs();
  test_split();
  tap_remove_tree(root);
  return done_testing();
}
