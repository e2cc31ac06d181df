/*
 * test-link-model.c — the host link model's arithmetic and specs, built
 * from lib/device/link_model.c itself (its engine is internal):
 *  - specs: every form (rates in each unit, latencies, presets, none) and
 *    every error (unknown preset, missing or unknown unit, bits, a rate not
 *    above zero, a negative latency), and the presets' derived figures;
 *  - the copy engine: copies in one direction queue, the two directions do
 *    not, an idle engine starts a copy when it comes, a copy behind a
 *    running one waits for the rest of it.
 * Points: done_testing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/link_model.h"
#include "dlrt.h"
#include "tap.h"

/* Relative closeness for figures computed two ways. */
static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

/* ---------------------------------------------------------------- specs */

static void parse_ok(const char *text, double rate, double latency) {
  dlrt_link_spec s;
  int rc = dlrt_link_parse(text, &s);
  ok(rc == DLRT_OK && !s.none && !s.preset && near(s.bytes_per_s, rate) &&
         near(s.latency_s + 1, latency + 1),
     "\"%s\" is %g B/s + %g s (got %s: %g B/s + %g s)", text, rate, latency,
     dlrt_err_name(rc), s.bytes_per_s, s.latency_s);
}

/* A refused spec: DLRT_ERR_INVALID_ARG, and the message names `word`. */
static void parse_bad(const char *text, const char *word) {
  dlrt_link_spec s;
  int rc = dlrt_link_parse(text, &s);
  ok(rc == DLRT_ERR_INVALID_ARG && strstr(dlrt_last_error(), word),
     "\"%s\" is refused, the message naming \"%s\" (%s: %s)", text, word, dlrt_err_name(rc),
     dlrt_last_error());
}

static void spec_cases(void) {
  parse_ok("12GB/s", 12e9, 0);
  parse_ok("12GB/s:10us", 12e9, 10e-6);
  parse_ok("1.5GiB/s:2ms", 1.5 * 1073741824.0, 2e-3);
  parse_ok("500MB/s:0s", 500e6, 0);
  parse_ok("64KiB/s:250ns", 65536, 250e-9);
  parse_ok("2TB/s:1s", 2e12, 1);
  parse_ok("100B/s", 100, 0);
  parse_ok("3kB/s", 3e3, 0);
  parse_ok("1MiB/s:1\xc2\xb5s", 1048576, 1e-6);

  dlrt_link_spec s;
  const char *nones[] = {NULL, "", "none", "NONE", "off"};
  for (size_t i = 0; i < sizeof nones / sizeof *nones; i++)
    ok(dlrt_link_parse(nones[i], &s) == DLRT_OK && s.none, "\"%s\" is no model",
       nones[i] ? nones[i] : "(NULL)");

  /* Every preset by name, in any case, with its own latency or another. */
  int n = dlrt_link_preset_count();
  ok(n >= 5, "%d presets", n);
  for (int i = 0; i < n; i++) {
    const dlrt_link_preset *p = dlrt_link_preset_get(i);
    int rc = dlrt_link_parse(p->name, &s);
    ok(rc == DLRT_OK && s.preset == p && s.latency_s == p->latency_s && s.bytes_per_s == 0,
       "\"%s\" is its preset (%s), latency %g s", p->name, p->about, p->latency_s);
    ok(near(p->flops, 0.8 * p->peak_flops) && near(p->flop_per_byte, p->flops / p->bytes_per_s) &&
           p->bytes_per_s <= p->link_peak_bytes_per_s && p->latency_s > 0,
       "%s: %.1f of %.1f TFLOP/s, %.0f of %.0f GB/s: %.0f FLOP/B", p->name, p->flops / 1e12,
       p->peak_flops / 1e12, p->bytes_per_s / 1e9, p->link_peak_bytes_per_s / 1e9,
       p->flop_per_byte);
    for (int j = 0; j < i; j++)
      if (strcmp(dlrt_link_preset_get(j)->name, p->name) == 0) ok(0, "%s twice", p->name);
  }
  ok(dlrt_link_preset_get(n) == NULL && dlrt_link_preset_get(-1) == NULL,
     "no preset past the table");
  ok(dlrt_link_parse("H200-PCIe5:1us", &s) == DLRT_OK && s.preset &&
         strcmp(s.preset->name, "h200-pcie5") == 0 && near(s.latency_s, 1e-6),
     "a preset in another case, its latency replaced (1us)");
  /* The figure: an H200 against PCIe 5, some 14,000 FLOP per byte. */
  ok(dlrt_link_parse("h200-pcie5", &s) == DLRT_OK && s.preset->flop_per_byte > 13000 &&
         s.preset->flop_per_byte < 15000,
     "h200-pcie5 is %.0f FLOP per byte", s.preset->flop_per_byte);

  parse_bad("h300-pcie5", "h200-pcie5, h100-pcie5"); /* the list of presets */
  parse_bad("h300-pcie5", "mi300x-pcie5");
  parse_bad("12", "needs a unit");
  parse_bad("12GB", "not a unit");
  parse_bad("12Gb/s", "bits");
  parse_bad("12 GB/s", "not a unit");
  parse_bad("0GB/s", "above zero");
  parse_bad("-1GB/s", "above zero");
  parse_bad("1e400GB/s", "neither a rate");
  parse_bad("12GB/s:", "nothing after");
  parse_bad("12GB/s:-1us", "negative");
  parse_bad("12GB/s:10", "needs a unit");
  parse_bad("12GB/s:10parsecs", "needs a unit");
  parse_bad("h200-pcie5:fast", "not a time");
  ok(dlrt_link_parse("12GB/s", NULL) == DLRT_ERR_INVALID_ARG, "a NULL out is refused");
}

/* ---------------------------------------------------------------- the engines */

static void engine_cases(void) {
  dlrt__link_engine h2d = {0}, d2h = {0};
  double d = dlrt__link_seconds(1e9, 1e-5, 1000000); /* 1 MB at 1 GB/s + 10 us */
  ok(near(d, 1e-3 + 1e-5), "1 MB at 1 GB/s + 10 us takes %g s", d);
  /* Two copies reaching one engine at once: the second starts at the first's end. */
  double e1 = dlrt__link_engine_take(&h2d, 100.0, d, 1000000);
  double e2 = dlrt__link_engine_take(&h2d, 100.0, d, 1000000);
  ok(near(e1, 100 + d) && near(e2, 100 + 2 * d), "one direction: ends %.6f, %.6f (queued)",
     e1 - 100, e2 - 100);
  ok(near(h2d.queued_s, d) && near(h2d.busy_s, 2 * d) && h2d.copies == 2 &&
         h2d.bytes == 2000000,
     "it counts 2 copies, 2 MB, %g s busy, %g s queued", h2d.busy_s, h2d.queued_s);
  /* The other direction at the same moment: its own engine, no wait. */
  double e3 = dlrt__link_engine_take(&d2h, 100.0, d, 1000000);
  ok(near(e3, 100 + d) && d2h.queued_s == 0, "the other direction ends at %.6f, unqueued",
     e3 - 100);
  /* A copy that comes when its engine is idle starts when it comes. */
  double e4 = dlrt__link_engine_take(&h2d, 200.0, d, 1000000);
  ok(near(e4, 200 + d) && near(h2d.queued_s, d), "an idle engine starts a copy at once");
  /* One that comes while a copy is under way starts at that copy's end. */
  double e5 = dlrt__link_engine_take(&h2d, 200.0 + d / 2, d, 1000000);
  ok(near(e5, 200 + 2 * d) && near(h2d.queued_s, 1.5 * d), "a copy behind a running one "
     "waits for the rest of it (%.6f)", e5 - 200);
}

/* ---------------------------------------------------------------- held copies */

/* A profiled block's slices: its measured time holds them at the host's
 * memcpy; the link adds what it takes past that (the planner's model,
 * choose_model.c). The cnn at a quarter of its peak: 23.7 MB in 115
 * copies. */
static void held_cases(void) {
  /* At 16 GB/s, no latency, against a 9.7 GB/s memcpy: the memcpy is the
   * longer, so each copy adds only its gate (3 us): 115 x 3 us. */
  double t = dlrt__link_seconds_past(16e9, 0, 9.7e9, 3e-6, 23700000, 115);
  ok(near(t, 115 * 3e-6), "16 GB/s under a 9.7 GB/s memcpy: only the gates, %g s", t);
  /* At 1 GB/s: 23.7 ms on the link, 2.443 ms held, 21.257 ms past it, and
   * the gates. */
  t = dlrt__link_seconds_past(1e9, 0, 9.7e9, 3e-6, 23700000, 115);
  ok(near(t, 0.0237 - 23700000 / 9.7e9 + 115 * 3e-6), "1 GB/s: the link past the memcpy "
     "and the gates, %g s", t);
  /* Under 2 ms a copy (16GB/s:2ms): each copy's latency is the link's own. */
  t = dlrt__link_seconds_past(16e9, 2e-3, 9.7e9, 0, 23700000, 115);
  ok(near(t, 115 * 2e-3 + 23700000 / 16e9 - 23700000 / 9.7e9), "2 ms a copy: 115 x 2 ms, "
     "less the memcpy the link hides, %g s", t);
  /* No link: only the gates (none without a link). */
  ok(dlrt__link_seconds_past(0, 0, 9.7e9, 0, 23700000, 115) == 0, "no link: nothing past");
}

int main(void) {
  spec_cases();
  engine_cases();
  held_cases();
  return done_testing();
}
