/* fuzz-tokens.c — dlrt_tokens_load on one file (lib/data/tokens.c): an
 * llm.c token file when it starts with the magic, else text.
 *
 * Input: the file itself.
 *
 * A stream that loads has tokens below its vocabulary (256 for text); it is
 * saved with dlrt_tokens_save and loaded again: the same tokens; its
 * validation split is the last tenth. No descriptor is left open.
 *
 * fuzz-sources: */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz_file file;
  const char *path = fuzz_file_set(&file, data, size);
  int fds = fuzz_lowest_free_fd();
  dlrt_tokens t;
  int rc = dlrt_tokens_load(path, &t);
  FUZZ_CHECK(fuzz_lowest_free_fd() == fds, "dlrt_tokens_load left a descriptor open");
  FUZZ_CHECK(rc == 0 || (dlrt_last_error() && *dlrt_last_error()),
             "dlrt_tokens_load failed (%d) without a message", rc);
  if (rc < 0) {
    FUZZ_CHECK(!t.tokens && t.count == 0, "a failed load returned tokens");
    return 0;
  }
  FUZZ_CHECK(t.count >= 1 && t.vocab >= 1 && t.vocab <= 65536, "%lld tokens, vocabulary %d",
             (long long)t.count, t.vocab);
  for (int64_t i = 0; i < t.count; i++)
    FUZZ_CHECK(t.tokens[i] < t.vocab, "token %lld is %d, past the vocabulary %d",
               (long long)i, t.tokens[i], t.vocab);
  char copy[4200];
  snprintf(copy, sizeof copy, "%s/copy.bin", fuzz_scratch_dir());
  rc = dlrt_tokens_save(copy, &t);
  FUZZ_CHECK(rc == 0, "a stream that loads cannot be saved: %s", dlrt_last_error());
  dlrt_tokens again;
  rc = dlrt_tokens_load(copy, &again);
  FUZZ_CHECK(rc == 0 && again.count == t.count &&
                 !memcmp(again.tokens, t.tokens, (size_t)t.count * sizeof *t.tokens),
             "saved and loaded again: not the same tokens (%s)", rc ? dlrt_last_error() : "");
  dlrt_tokens_free(&again);
  if (t.count >= 2) {
    dlrt_tokens val;
    rc = dlrt_tokens_split(&t, 1, &val);
    int64_t held = t.count / 10 > 0 ? t.count / 10 : 1;
    FUZZ_CHECK(rc == 0 && val.count == held &&
                   !memcmp(val.tokens, t.tokens + t.count - held, (size_t)held * 2),
               "the validation split is not the last tenth");
    dlrt_tokens_free(&val);
  }
  dlrt_tokens_free(&t);
  return 0;
}
