/* dltrain-options.c — dltrain's command line: --help, --version and the
 * parsing of every option into `options` (dltrain.h); a bad value or
 * combination is a message in options.error, printed by the caller. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h" /* DLRT_HAVE_MPI */
#include "dlrt.h"
#include "dltrain.h"

void dltrain_usage(FILE *out) {
  fputs("Usage: dltrain [OPTION]...\n"
        "Trains an image classifier with dlrt and evaluates it on the test set, or a GPT\n"
        "language model on token data, evaluated on its validation split.\n"
        "With no options: an MLP on Fashion-MNIST for one epoch on the default device.\n\n"
        "  -m, --model mlp|cnn|FILE|gpt-mini|gpt2|gpt2-medium|gpt2-large|gpt2-xl|gpt3-175b\n"
        "                             the network: a preset or a model file (default\n"
        "                             mlp); the gpt presets are GPT-2's architecture\n"
        "                             (gpt-mini: 4 layers, 4 heads, 128 wide, context 128,\n"
        "                             byte tokens) with Hugging Face's parameter names\n"
        "      --data fashion-mnist|DIR|FILE|generated\n"
        "                             the images (default fashion-mnist, falling back to\n"
        "                             generated data when the package is not installed);\n"
        "                             DIR holds train.dlrec and test.dlrec (see dlrecord)\n"
        "                             or the MNIST-family IDX files, plain or .gz; a\n"
        "                             record FILE alone: its last tenth is the test split;\n"
        "                             the two splits must have the same image sizes\n"
        "      --mmap                 map record files instead of reading them (sets\n"
        "                             larger than memory)\n"
        "  -d, --device SPEC          cpu, cpu:0, opencl:N, cuda:N or auto (default:\n"
        "                             $DLRT_DEVICE, else auto)\n"
        "      --pipeline A,B,...     pipeline parallel: the model's layers (a GPT's\n"
        "                             blocks) cut into stages on these devices (GPipe\n"
        "                             schedule); with --accum, --clip-norm, --checkpoint\n"
        "                             (auto: each stage's own), --precision, and under\n"
        "                             mpirun (a pipeline a rank) --zero 1|2|3; with\n"
        "                             --tensor-parallel N under mpirun, each stage\n"
        "                             split over N ranks; with --mem-limit (not with\n"
        "                             --tensor-parallel), each stage spills within it on\n"
        "                             its device\n"
        "      --micro-batches M      micro-batches per batch with --pipeline (default 4)\n"
        "      --devices A[@W],B[@W],...\n"
        "                             data parallel over these devices (any backends):\n"
        "                             each batch split between them in proportion to\n"
        "                             the weights W, else to their measured speed\n"
        "                             (timed over 4 steps), gradients combined, one\n"
        "                             update everywhere (under mpirun: every rank's\n"
        "                             devices); with --accum (one all-reduce an update),\n"
        "                             --checkpoint (auto: chosen on the first replica,\n"
        "                             the same on all), --clip-norm, --precision, and\n"
        "                             --mem-limit (not --offload params or auto): each\n"
        "                             replica spills within it on its device\n"
        "      --tensor-parallel A[@W],B[@W],...|N\n"
        "                             tensor parallel (GPT models, Megatron-style): each\n"
        "                             block's attention heads and MLP, and the\n"
        "                             vocabulary, split over these devices (any\n"
        "                             backends; heads in proportion to the weights W,\n"
        "                             default even), each training its shard on the\n"
        "                             whole batch; N: over N ranks of mpirun, one shard\n"
        "                             each on its --device (mpirun -np N x R: R data-\n"
        "                             parallel replicas of N shards; with A,B,... under\n"
        "                             mpirun every rank holds a replica split over its\n"
        "                             devices; with --pipeline A,B,... every stage split\n"
        "                             over the N ranks). With --accum, --clip-norm (the\n"
        "                             global norm), --checkpoint (auto: chosen on the\n"
        "                             first peer, the same on all; not with --pipeline),\n"
        "                             fp16 loss scaling; --mem-limit and --offload (not\n"
        "                             auto) give each peer that budget on its device\n"
        "                             (not with --pipeline; --offload params not with\n"
        "                             --clip-norm, fp16 or replicas).\n"
        "                             Checkpoints hold whole tensors\n"
        "                             (resume on any split)\n"
        "      --zero 1|2|3           ZeRO: shard the replicas' model states (of --devices,\n"
        "                             or of the ranks under mpirun): 1 the optimizer\n"
        "                             state, 2 the gradients too, 3 the parameters too\n"
        "                             (gathered for each pass); each replica updates its\n"
        "                             range (with --accum, --clip-norm; not --mem-limit).\n"
        "                             With --tensor-parallel N under mpirun -np\n"
        "                             N x R: each shard's states over its R replicas\n"
        "                             (with --accum, --clip-norm, fp16). With --pipeline\n"
        "                             under mpirun -np R: each stage's states over the R\n"
        "                             ranks, all three stages (with --accum, --clip-norm,\n"
        "                             fp16); with both (-np N x R), each stage's shard\n"
        "                             over its R replicas (default 0: off)\n"
        "  -e, --epochs N             epochs in all, counting resumed ones (default 1)\n"
        "  -b, --batch N              images per step (default 64; a GPT's: windows of\n"
        "                             --context tokens, default 32)\n"
        "      --precision fp32|fp16|bf16\n"
        "                             mixed precision: fp32 master weights and optimizer\n"
        "                             state; matmuls, convolutions and activations in\n"
        "                             fp16 or bf16 (fp32 accumulation); losses, softmax\n"
        "                             and normalisation in fp32 (default fp32)\n"
        "      --loss-scale off|dynamic|INIT[:INTERVAL[:GROWTH[:BACKOFF]]]\n"
        "                             dynamic loss scaling (fp16: on, 65536:2000:2:0.5):\n"
        "                             a step with inf/NaN gradients is skipped and the\n"
        "                             scale times BACKOFF; INTERVAL clean steps in a row\n"
        "                             multiply it by GROWTH; the scale stays within\n"
        "                             2^-64 to 2^64 (5.4e-20 to 1.8e19)\n"
        "      --accum K              accumulate the gradients of K batches of N per\n"
        "                             update: the update of one batch of K x N in the\n"
        "                             memory of N (default 1)\n"
        "      --optimizer sgd|adam|adamw   (default adam)\n"
        "      --lr X                 learning rate (default: the optimizer's, as in\n"
        "                             torch.optim: sgd 0.01, adam and adamw 0.001);\n"
        "                             real values are checked as the floats they become\n"
        "      --momentum X           SGD momentum in [0, 1) (default 0)\n"
        "      --weight-decay X       L2 (sgd, adam) or decoupled (adamw; default 0.01)\n"
        "      --label-smoothing X    in [0, 1) (default 0)\n"
        "      --schedule constant|cosine|step:N[:GAMMA]\n"
        "                             learning rate per step: constant (default), cosine\n"
        "                             decay to 0 over the run, or times GAMMA (default\n"
        "                             0.1) every N steps\n"
        "      --warmup N             rise linearly to the learning rate over N steps\n"
        "      --clip-norm X          clip gradients to a global L2 norm of X\n"
        "      --seed N               parameters, shuffling and generated data (default 1)\n"
        "      --threads N            CPU backend threads (0: all cores)\n"
        "      --deterministic        say how the run can be repeated bit for bit (the CPU\n"
        "                             backend is deterministic for a fixed --threads)\n"
        "      --save FILE            write a checkpoint (safetensors) after each epoch,\n"
        "                             replacing FILE atomically; FILE must be absent, a\n"
        "                             regular file or a link to one (a link is followed)\n"
        "      --resume FILE          continue from a checkpoint up to --epochs in all\n"
        "                             (its metadata is checked: a bad value is refused)\n"
        "      --checkpoint none|sqrt|blocks|every:N|auto\n"
        "                             gradient checkpointing: recompute activations in\n"
        "                             the backward pass, in segments of ceil(sqrt(n))\n"
        "                             or N forward nodes, a GPT's blocks (each from the\n"
        "                             residual stream), or the longest segments that\n"
        "                             fit the device (default none); segments of\n"
        "                             conv/relu/maxpool run a chunk of images at a time\n"
        "      --mem-limit SIZE       device memory budget of the run (512M, 2G, or 25%\n"
        "                             of the device): storages spill to pinned host\n"
        "                             memory beyond it, moved ahead of need; with\n"
        "                             --checkpoint, conv/relu/maxpool segments move\n"
        "                             their batch tensors a chunk at a time if they must;\n"
        "                             a node larger than the budget (a GELU, attention)\n"
        "                             runs over its rows or sequences in slices;\n"
        "                             without it, a plan over 80% of DLRT_MEM_LIMIT\n"
        "                             spills within 85% of that limit\n"
        "      --host-limit SIZE      with a budget: host copies beyond SIZE go to a\n"
        "                             file in $DLRT_SPILL_DIR (default: no bound); with\n"
        "                             --offload params: the fp32 masters and optimizer\n"
        "                             state in host memory, the state beyond on disk\n"
        "                             (where SIZE cannot hold the masters beside the\n"
        "                             state's slots, masters with it), streamed a chunk\n"
        "                             at a time through 4 slots (chunks up to 16 MiB\n"
        "                             of each state, DLRT_PARAM_DISK_CHUNK; smaller if\n"
        "                             SIZE needs; a SIZE below the least chunks' slots\n"
        "                             is refused naming the least)\n"
        "      --spill-dir DIR        the spill file's folder (as DLRT_SPILL_DIR; default\n"
        "                             $TMPDIR, /tmp); one that fills up stops the run\n"
        "                             with an error naming it, never a corrupt run\n"
        "      --offload none|activations|optimizer|all|params|auto\n"
        "                             with a budget: also move saved activations and/\n"
        "                             or optimizer state off the device until needed\n"
        "                             (default none: only when the budget needs room);\n"
        "                             params: parameters, optimizer state and gradient\n"
        "                             copies live on the host, each parameter fetched\n"
        "                             --spill-prefetch nodes ahead of its uses in the\n"
        "                             forward and the backward pass, gradients back as\n"
        "                             soon as complete, updates on the host; the budget\n"
        "                             bounds the device allocator; with --precision\n"
        "                             fp16|bf16 the host writes a 16-bit copy after each\n"
        "                             update and the device fetches that (half the\n"
        "                             bytes); --accum sums and --clip-norm and loss\n"
        "                             scaling check the gradients on the host; with\n"
        "                             --host-limit the optimizer state past SIZE lives\n"
        "                             in the spill file, read ahead of each update and\n"
        "                             written behind it, chunk by chunk (and where SIZE\n"
        "                             cannot hold the masters beside the state's slots,\n"
        "                             the masters with it: updated there, their bytes\n"
        "                             alone read ahead of each fp32 fetch);\n"
        "                             auto: where the model does not fit --mem-limit\n"
        "                             (or the device), the placement --plan prints\n"
        "                             (optimizer, params or all, with --checkpoint,\n"
        "                             --mem-limit, --host-limit it picks); no budget\n"
        "                             needed\n"
        "      --spill-prefetch N     nodes to look ahead for copies back (default 4;\n"
        "                             0: fetch when needed); with --offload params, at\n"
        "                             least 1 (default: chosen after the first step\n"
        "                             from its node times and the link)\n"
        "      --link SPEC            a host link model on the device(s), as DLRT_LINK:\n"
        "                             a rate with an optional latency (12GB/s or\n"
        "                             12GB/s:10us) or a preset keeping a GPU's ratio of\n"
        "                             compute to link bandwidth (h200-pcie5, h100-pcie5,\n"
        "                             a100-pcie4, l40s-pcie4, gh200-c2c, mi300x-pcie5; see\n"
        "                             README): copies between host and device memory,\n"
        "                             --mem-limit's spills among them, take its time;\n"
        "                             the results stay the same bit for bit; a preset's\n"
        "                             GEMM rate is measured once per device and kept in\n"
        "                             DLRT_PROFILE_CACHE (DLRT_PROFILE_FRESH=1: again),\n"
        "                             or pinned by DLRT_LINK_FLOPS=RATE (30GFLOP/s)\n"
        "      --plan-strategy S      with --mem-limit: how the planner spills each\n"
        "                             activation the backward pass reads (as\n"
        "                             DLRT_PLAN_STRATEGY): auto (it chooses keep, swap\n"
        "                             or recompute per tensor from a profile of the\n"
        "                             step and the link), belady (keep; evict by\n"
        "                             furthest next use), swap (all), recompute\n"
        "                             (checkpoint segments of sqrt(n)); prints the\n"
        "                             predicted step beside the measured one (default:\n"
        "                             Belady, unplanned; --plan: auto)\n"
        "      --trace FILE           write a Chrome trace of the run (kernels, spill\n"
        "                             copies, device memory): open it in\n"
        "                             https://ui.perfetto.dev; slows the run down\n"
        "      --workers N            loader threads that decode and augment (default 2;\n"
        "                             0: in the training thread)\n"
        "      --prefetch N           batches made ready ahead in pinned memory and on\n"
        "                             the device (default 2; 0: load each when needed)\n"
        "      --augment              random crop (padding 2) and horizontal flip\n"
        "      --crop-pad N           random crop after padding each side by N pixels\n"
        "      --flip                 random horizontal flip\n"
        "      --erase P              random erasing with probability P\n"
        "      --normalize MEAN,STD   (x - MEAN) / STD on pixels scaled to [0, 1], in\n"
        "                             training and evaluation\n"
        "      --plan                 train nothing: print the memory a training run\n"
        "                             needs at its peak, a step's or an evaluation's\n"
        "                             (parameters, gradients, optimizer state,\n"
        "                             activations, loader buffers, peak), the activation\n"
        "                             peak and the largest batch that fits the device;\n"
        "                             with --tensor-parallel each peer's shard, the\n"
        "                             largest batch every peer fits (and with --simulate\n"
        "                             the split's step)\n"
        "      --device-memory SIZE   plan for a device of SIZE (40G, 80G, ...) instead;\n"
        "                             --plan then also prints the placement: where\n"
        "                             parameters, gradients, optimizer state and\n"
        "                             activations live (device, pinned or pageable\n"
        "                             host, disk), the host and disk bytes, the flags\n"
        "                             that realise it (and its step with --simulate)\n"
        "      --host-memory SIZE     with --plan or --offload auto: the host memory the\n"
        "                             placement plans for (default this machine's RAM,\n"
        "                             or --simulate's machine's); past what streaming\n"
        "                             keeps there, the optimizer state goes to disk,\n"
        "                             and the fp32 masters with it where they do not\n"
        "                             fit (--offload params --host-limit)\n"
        "      --what-if N            with --plan: the memory a model of N parameters\n"
        "                             (175e9, 7B) needs per strategy, and the devices\n"
        "      --splits N             with --plan for a GPT: show its best N (default 5;\n"
        "                             0: none) tensor x pipeline x data splits over\n"
        "                             devices of --device-memory (ZeRO, checkpointing,\n"
        "                             micro-batches), each with its bytes per device,\n"
        "                             devices and dltrain command line (and what this\n"
        "                             version lacks for it), fewest devices first; with\n"
        "                             --simulate, each one's predicted step (compute,\n"
        "                             tensor all-reduces, stage copies, bubble, data-\n"
        "                             parallel sums), most tokens per second first\n"
        "      --max-devices N        the splits' bound on devices (default 4096)\n"
        "      --simulate PRESET|FILE|this\n"
        "                             with --plan: replay a training step's schedule on\n"
        "                             a machine (h200-pcie5, h100-pcie5, a100-pcie4,\n"
        "                             l40s-pcie4, gh200-c2c, mi300x-pcie5; a file of\n"
        "                             key = value figures; or this machine, measured):\n"
        "                             predicted step time, tokens or images per second,\n"
        "                             compute, transfer, exposed transfer, host update;\n"
        "                             with --mem-limit the copies of a dry run on this\n"
        "                             device, with --offload optimizer (no --mem-limit\n"
        "                             needed) the updates on the host, overlapped; with\n"
        "                             --offload params --host-limit also the optimizer\n"
        "                             state's (and masters') disk reads and writes (the\n"
        "                             machine's disk_read, disk_write: a master on disk\n"
        "                             is read there ahead of each fp32 fetch too) and\n"
        "                             how much the step waits\n"
        "GPT models (--model gpt-*):\n"
        "      --data FILE|DIR        the tokens: a text file or a folder of them (bytes,\n"
        "                             vocabulary 256) or an llm.c token file (.bin);\n"
        "                             default Debian's fortunes (/usr/share/games/\n"
        "                             fortunes); the last tenth is the validation split\n"
        "      --layers N --heads N --embd N --context N --vocab N\n"
        "                             the preset's sizes replaced (embd: the width, a\n"
        "                             multiple of heads; context: the window, T)\n"
        "      --dropout P            dropout after the embeddings and on the output of\n"
        "                             each block's attention and MLP, before the\n"
        "                             residual adds (default 0: off, as nanoGPT)\n"
        "      --attn-dropout P       dropout on the attention probabilities, the mask\n"
        "                             drawn again in the backward pass, never stored\n"
        "                             (default 0: off)\n"
        "      --steps N              updates in all, counting resumed ones (default 1000;\n"
        "                             0: evaluate the initial parameters, --save them)\n"
        "      --eval-every N         evaluate (validation loss, perplexity and, for byte\n"
        "                             tokens, bits per byte) every N steps (default 250)\n"
        "      --eval-batches K       validation batches per evaluation (default 20;\n"
        "                             under mpirun, batches of --batch x ranks)\n"
        "      --limit N              use only the first N training and N/6 test images\n"
        "                             (quick runs and tests)\n"
        "  -j, --json                 end stdout with one JSON object of the results (its\n"
        "                             epoch_losses: the epochs this run trained, resumed\n"
        "                             ones left out); the other output goes to stderr\n"
        "  -q, --quiet                no progress display\n"
        "  -h, --help                 show this help and exit\n"
        "  -V, --version              show the dlrt version and exit\n\n"
        "Under mpirun (when built with MPI) each rank trains on its shard of the data with\n"
        "its --batch, gradients are all-reduced (global batch: ranks x N), rank 0 alone\n"
        "reports and saves; DLRT_MPI_TIMEOUT (seconds, default 120) bounds the wait for\n"
        "the other ranks.\n"
        "A run whose training or test loss becomes inf or NaN (learning rate, weight\n"
        "decay or schedule too high, a corrupt checkpoint) stops, naming the update and\n"
        "the likely cause, and saves nothing more; an fp16 update the loss scaler skips\n"
        "is no divergence unless 8 in a row have a loss of inf or NaN.\n"
        "Environment: DLRT_DEVICE, DLRT_BACKEND, DLRT_MEM_LIMIT, DLRT_LINK (see dlinfo\n"
        "--help);\n"
        "DLRT_TRACE=FILE (as --trace); DLRT_SPILL_DIR (the spill file's folder);\n"
        "DLRT_PINNED_LIMIT (the pinned host pool's bound: a size or a percentage of RAM,\n"
        "default 50%; past it staging is pageable, said once).\n"
        "Exit status: 0 success, 1 a dlrt call failed or training diverged, 2 usage error\n"
        "or a device spec that opens nothing.\n",
        out);
}

void dltrain_version(FILE *out) {
#ifdef DLRT_HAVE_MPI
  fprintf(out, "dltrain (dlrt) %s, with MPI\n", dlrt_version_string());
#else
  fprintf(out, "dltrain (dlrt) %s\n", dlrt_version_string());
#endif
}

/* The ranges of the real-valued options. */
static const tool_range POSITIVE = {0, INFINITY, 1, 0}, NON_NEGATIVE = {0, INFINITY, 0, 0},
                        FRACTION = {0, 1, 0, 1}, ANY = {-INFINITY, INFINITY, 0, 0};

/* constant | cosine | step:N[:GAMMA] */
static int parse_schedule(const char *text, options *o) {
  static const char *const names[] = {"constant", "cosine", "step:N[:GAMMA]"};
  char buf[256], *f[3];
  long long n;
  float gamma = 0.1f;
  if (strcmp(text, "constant") == 0) {
    o->schedule = DLRT_LR_CONSTANT;
    return 1;
  }
  if (strcmp(text, "cosine") == 0) {
    o->schedule = DLRT_LR_COSINE;
    return 1;
  }
  int fields = tool_split(text, ':', buf, sizeof buf, f, 3);
  if (fields < 2 || strcmp(f[0], "step") != 0) {
    if (strncmp(text, "step", 4) == 0)
      return tool_usage_error(o->error, "--schedule %s: use step:N or step:N:GAMMA", text);
    return tool_unknown_word(o->error, "schedule", text, names, 3);
  }
  if (!tool_parse_int("--schedule step:N", f[1], 1, INT64_MAX, &n, o->error) ||
      (fields == 3 && !tool_parse_float("--schedule step:N:GAMMA", f[2], POSITIVE, &gamma,
                                        o->error)))
    return 0;
  o->schedule = DLRT_LR_STEP;
  o->step_size = n;
  o->gamma = gamma;
  return 1;
}

/* off | dynamic | INIT[:INTERVAL[:GROWTH[:BACKOFF]]] */
static int parse_loss_scale(const char *text, options *o) {
  static const char *const names[] = {"off", "dynamic", "INIT[:INTERVAL[:GROWTH[:BACKOFF]]]"};
  static const tool_range scales = {DLRT_LOSS_SCALE_MIN, DLRT_LOSS_SCALE_MAX, 0, 0},
                          growths = {1, INFINITY, 0, 0}, backoffs = {0, 1, 1, 0};
  dlrt_loss_scaler *ls = &o->loss_scaler;
  char buf[256], *f[4], *end;
  long long interval = 0;
  if (strcmp(text, "off") == 0) {
    ls->enabled = -1;
    return 1;
  }
  if (strcmp(text, "dynamic") == 0) {
    ls->enabled = 1;
    return 1;
  }
  int fields = tool_split(text, ':', buf, sizeof buf, f, 4);
  if (fields == 0)
    return tool_usage_error(o->error, "--loss-scale %s: use off, dynamic or "
                            "INIT[:INTERVAL[:GROWTH[:BACKOFF]]] (such as 65536:2000:2:0.5)", text);
  strtod(f[0], &end);
  if (fields == 1 && (end == f[0] || *end)) /* a word, not a number */
    return tool_unknown_word(o->error, "loss scale", text, names, 3);
  dlrt_loss_scaler s = {.enabled = 1};
  if (!tool_parse_float("--loss-scale INIT", f[0], scales, &s.init_scale, o->error) ||
      (fields >= 2 && !tool_parse_int("--loss-scale INIT:INTERVAL", f[1], 1, INT32_MAX,
                                      &interval, o->error)) ||
      (fields >= 3 && !tool_parse_float("--loss-scale INIT:INTERVAL:GROWTH", f[2], growths,
                                        &s.growth_factor, o->error)) ||
      (fields >= 4 && !tool_parse_float("--loss-scale INIT:INTERVAL:GROWTH:BACKOFF", f[3],
                                        backoffs, &s.backoff_factor, o->error)))
    return 0;
  s.growth_interval = (int)interval;
  *ls = s;
  return 1;
}

/* none | sqrt | auto | every:N */
static int parse_checkpoint(const char *text, options *o) {
  static const char *const names[] = {"none", "sqrt", "blocks", "every:N", "auto"};
  char buf[64], *f[2];
  long long every;
  if (strcmp(text, "none") == 0)
    o->checkpoint = 0;
  else if (strcmp(text, "sqrt") == 0)
    o->checkpoint = DLRT_CHECKPOINT_SQRT;
  else if (strcmp(text, "auto") == 0)
    o->checkpoint = DLRT_CHECKPOINT_AUTO;
  else if (strcmp(text, "blocks") == 0)
    o->checkpoint = DLRT_CHECKPOINT_MARKS;
  else if (tool_split(text, ':', buf, sizeof buf, f, 2) == 2 && strcmp(f[0], "every") == 0) {
    if (!tool_parse_int("--checkpoint every:N", f[1], 1, 1000000, &every, o->error)) return 0;
    o->checkpoint = (int)every;
  } else {
    return tool_unknown_word(o->error, "checkpointing", text, names, 5);
  }
  return 1;
}

/* MEAN,STD */
static int parse_normalize(const char *text, options *o) {
  char buf[256], *f[2];
  if (tool_split(text, ',', buf, sizeof buf, f, 2) != 2)
    return tool_usage_error(o->error, "--normalize needs MEAN,STD (such as 0.286,0.353), not "
                            "'%s'", text);
  return tool_parse_float("--normalize MEAN", f[0], ANY, &o->aug.mean, o->error) &&
         tool_parse_float("--normalize MEAN,STD", f[1], POSITIVE, &o->aug.std, o->error);
}

/* A parameter count: a number with an optional K, M, B (or G) or T. */
static int parse_what_if(const char *text, options *o) {
  static const tool_range counts = {1, 1e18, 0, 0};
  char buf[64];
  size_t len = strlen(text);
  if (len == 0 || len >= sizeof buf)
    return tool_usage_error(o->error, "--what-if needs a parameter count such as 175e9 or 7B, "
                            "not '%s'", text);
  memcpy(buf, text, len + 1);
  char last = buf[len - 1];
  double unit = last == 'K' ? 1e3 : last == 'M' ? 1e6 : last == 'B' || last == 'G' ? 1e9
                : last == 'T' ? 1e12 : 1;
  if (unit != 1) buf[len - 1] = '\0';
  double count;
  if (!tool_parse_double("--what-if", buf, POSITIVE, &count, o->error)) return 0;
  if (!(count * unit >= counts.min && count * unit <= counts.max))
    return tool_usage_error(o->error, "--what-if needs from 1 to 1e18 parameters, not '%s'",
                            text);
  o->what_if = count * unit;
  return 1;
}

static int parse_optimizer(const char *text, dlrt_optimizer_kind *kind, char *err) {
  const char *names[DLRT_OPT_ADAMW - DLRT_OPT_SGD + 1];
  for (int k = DLRT_OPT_SGD; k <= DLRT_OPT_ADAMW; k++) {
    names[k - DLRT_OPT_SGD] = dlrt_optimizer_name((dlrt_optimizer_kind)k);
    if (strcmp(text, names[k - DLRT_OPT_SGD]) == 0) {
      *kind = (dlrt_optimizer_kind)k;
      return 1;
    }
  }
  return tool_unknown_word(err, "optimizer", text, names, sizeof names / sizeof *names);
}

static int parse_precision(const char *text, dlrt_dtype *out, char *err) {
  static const char *const names[] = {"fp32", "fp16", "bf16"};
  if (strcmp(text, "fp32") == 0 || strcmp(text, "f32") == 0)
    *out = DLRT_F32;
  else if (strcmp(text, "fp16") == 0 || strcmp(text, "f16") == 0)
    *out = DLRT_F16;
  else if (strcmp(text, "bf16") == 0)
    *out = DLRT_BF16;
  else
    return tool_unknown_word(err, "precision", text, names, 3);
  return 1;
}

/* --link SPEC, checked here (no device needed). */
static int parse_link(const char *text, options *o) {
  dlrt_link_spec spec;
  if (dlrt_link_parse(text, &spec) != DLRT_OK)
    return tool_usage_error(o->error, "--link: %s", dlrt_last_error());
  o->link = text;
  return 1;
}

static int parse_offload(const char *text, dlrt_offload_policy *out, char *err) {
  static const char *const names[] = {"none", "activations", "optimizer", "all", "params",
                                       "auto"};
  for (int k = 0; k < 5; k++)
    if (strcmp(text, names[k]) == 0) {
      *out = (dlrt_offload_policy)k;
      return 1;
    }
  return tool_unknown_word(err, "offload policy", text, names, 6);
}

/* Options that go together, or not, once all are read. */
static int check_combinations(options *o, int momentum_given, dlrt_optimizer_kind kind) {
  char *err = o->error;
  if ((o->devices || o->pipeline) && o->device)
    return tool_usage_error(err, "give --device, or --devices, or --pipeline");
  if (o->devices && o->pipeline)
    return tool_usage_error(err, "give --devices or --pipeline, not both");
  if (o->tensor_parallel) {
    int ranks = o->tensor_parallel[0] >= '0' && o->tensor_parallel[0] <= '9';
    if (!o->gpt_model)
      return tool_usage_error(err, "--tensor-parallel splits GPT models (--model gpt-mini, "
                              "gpt2, ...); for %s use --devices or --pipeline", o->model);
    if (o->devices || (o->pipeline && !ranks))
      return tool_usage_error(err, "--tensor-parallel goes without --devices, and with "
                              "--pipeline as a number of MPI ranks only (mpirun -np N "
                              "dltrain --pipeline A,B --tensor-parallel N), in this version");
    /* Each rank's stage would choose automatic segments apart (their
     * collectives must meet); the planner plans one split model's peers. */
    if (o->pipeline && (o->checkpoint == DLRT_CHECKPOINT_AUTO || o->plan))
      return tool_usage_error(err, "--tensor-parallel with --pipeline takes --checkpoint "
                              "blocks, sqrt or every:N (not auto) and no --plan, in this "
                              "version");
    if (o->device && !ranks)
      return tool_usage_error(err, "give --device or --tensor-parallel A,B,... (its devices), "
                              "not both");
    /* Each peer spills within the budget on its device, its gradient sums
     * beside it for the updates that go through the host; streamed
     * parameters make no gradient runs. */
    if (o->mem_limit && (o->clip_norm > 0 || o->precision == DLRT_F16) &&
        o->spill.policy == DLRT_OFFLOAD_PARAMS)
      return tool_usage_error(err, "--tensor-parallel with --offload params goes without "
                              "--clip-norm and --precision fp16 in this version (their update "
                              "goes through the host; --offload optimizer, activations or all "
                              "work)");
    if (o->offload_auto)
      return tool_usage_error(err, "--tensor-parallel takes --offload activations, optimizer, "
                              "params or all, not auto (its placement is one device's), in "
                              "this version");
  }
  /* Each stage spills within the budget on its device; streamed
   * parameters make no gradient runs, which the stages hand out. */
  if (o->pipeline && o->mem_limit &&
      (o->tensor_parallel || o->spill.policy == DLRT_OFFLOAD_PARAMS))
    return tool_usage_error(err, "--pipeline with --mem-limit goes without --tensor-parallel "
                            "and --offload params in this version (each stage spills within "
                            "the budget on its device)");
  /* A split model's replicas shard through tensor_parallel.c's host update,
   * a pipeline's stages through pipeline.c's, which take loss scaling and
   * accumulation too. */
  int zero_own_update = o->tensor_parallel || o->pipeline;
  if (o->zero && o->precision == DLRT_F16 && !zero_own_update)
    return tool_usage_error(err, "--zero goes without --precision fp16 (loss scaling) in this "
                            "version, but with --tensor-parallel or --pipeline: use bf16");
  if (o->zero && o->mem_limit)
    return tool_usage_error(err, "--zero goes without --mem-limit in this version");
  /* Each replica spills within the budget on its device; streamed
   * parameters make no gradient runs, which the replicas hand out. */
  if (o->devices && o->mem_limit && o->spill.policy == DLRT_OFFLOAD_PARAMS)
    return tool_usage_error(err, "--devices with --mem-limit goes without --offload params in "
                            "this version (each replica spills within the budget on its "
                            "device: --offload activations, optimizer or all work)");
  if (o->devices && o->offload_auto)
    return tool_usage_error(err, "--devices takes --offload activations, optimizer or all, "
                            "not auto (its placement is one device's), in this version");
  /* DLRT_MEM_LIMIT is a budget too: the trainer spills within it. */
  const char *env_limit = getenv("DLRT_MEM_LIMIT");
  if ((o->host_limit || o->spill.policy != DLRT_OFFLOAD_NONE) && !o->mem_limit &&
      !(env_limit && *env_limit) && !(o->plan && o->simulate))
    return tool_usage_error(err, "--host-limit and --offload go with --mem-limit (or "
                            "DLRT_MEM_LIMIT)");
  if (o->simulate && !o->plan)
    return tool_usage_error(err, "--simulate goes with --plan");
  if (o->simulate && !*o->simulate)
    return tool_usage_error(err, "--simulate needs a preset (h200-pcie5, ...), a file of "
                            "figures or this");
  if ((o->what_if > 0 || o->device_memory > 0) && !o->plan)
    return tool_usage_error(err, "--what-if and --device-memory go with --plan");
  if (o->host_memory > 0 && !o->plan && !o->offload_auto)
    return tool_usage_error(err, "--host-memory goes with --plan or --offload auto");
  if (o->offload_auto && o->host_limit)
    return tool_usage_error(err, "--offload auto chooses --host-limit itself: give it with "
                            "--offload optimizer or all instead");
  if ((o->splits_given || o->max_devices) && !(o->plan && o->gpt_model))
    return tool_usage_error(err, "--splits and --max-devices go with --plan for a GPT model "
                            "(--model gpt-mini, gpt2, gpt3-175b, ...)");
  if (momentum_given && kind != DLRT_OPT_SGD)
    return tool_usage_error(err, "--momentum applies to --optimizer sgd only");
  return 1;
}

int dltrain_parse_options(int argc, char *const argv[], options *o) {
  enum { OPT_DATA = 256, OPT_OPTIMIZER, OPT_LR, OPT_MOMENTUM, OPT_WEIGHT_DECAY,
         OPT_SMOOTHING, OPT_SEED, OPT_THREADS, OPT_SAVE, OPT_RESUME, OPT_DETERMINISTIC,
         OPT_LIMIT, OPT_SCHEDULE, OPT_WARMUP, OPT_CLIP, OPT_WORKERS, OPT_PREFETCH,
         OPT_AUGMENT, OPT_CROP_PAD, OPT_FLIP, OPT_ERASE, OPT_NORMALIZE, OPT_MMAP, OPT_ACCUM,
         OPT_PLAN, OPT_DEVICE_MEMORY, OPT_HOST_MEMORY, OPT_WHAT_IF, OPT_CHECKPOINT, OPT_MEM_LIMIT,
         OPT_HOST_LIMIT, OPT_OFFLOAD, OPT_SPILL_PREFETCH, OPT_SPILL_DIR, OPT_TRACE, OPT_DEVICES, OPT_PIPELINE, OPT_ZERO,
         OPT_MICRO, OPT_PRECISION, OPT_LOSS_SCALE, OPT_STEPS, OPT_EVAL_EVERY,
         OPT_EVAL_BATCHES, OPT_LAYERS, OPT_HEADS, OPT_EMBD, OPT_CONTEXT, OPT_VOCAB,
         OPT_DROPOUT, OPT_LINK, OPT_TENSOR_PARALLEL, OPT_PLAN_STRATEGY, OPT_ATTN_DROPOUT, OPT_SIMULATE,
         OPT_SPLITS, OPT_MAX_DEVICES };
  static const char shortopts[] = ":m:d:e:b:jqhV";
  static const struct option longopts[] = {
      {"model", required_argument, NULL, 'm'},   {"data", required_argument, NULL, OPT_DATA},
      {"device", required_argument, NULL, 'd'},  {"epochs", required_argument, NULL, 'e'},
      {"batch", required_argument, NULL, 'b'},
      {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
      {"lr", required_argument, NULL, OPT_LR},
      {"momentum", required_argument, NULL, OPT_MOMENTUM},
      {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
      {"label-smoothing", required_argument, NULL, OPT_SMOOTHING},
      {"seed", required_argument, NULL, OPT_SEED},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"save", required_argument, NULL, OPT_SAVE},
      {"resume", required_argument, NULL, OPT_RESUME},
      {"deterministic", no_argument, NULL, OPT_DETERMINISTIC},
      {"limit", required_argument, NULL, OPT_LIMIT},
      {"schedule", required_argument, NULL, OPT_SCHEDULE},
      {"warmup", required_argument, NULL, OPT_WARMUP},
      {"clip-norm", required_argument, NULL, OPT_CLIP},
      {"workers", required_argument, NULL, OPT_WORKERS},
      {"prefetch", required_argument, NULL, OPT_PREFETCH},
      {"augment", no_argument, NULL, OPT_AUGMENT},
      {"crop-pad", required_argument, NULL, OPT_CROP_PAD},
      {"flip", no_argument, NULL, OPT_FLIP},
      {"erase", required_argument, NULL, OPT_ERASE},
      {"normalize", required_argument, NULL, OPT_NORMALIZE},
      {"mmap", no_argument, NULL, OPT_MMAP},
      {"accum", required_argument, NULL, OPT_ACCUM},
      {"plan", no_argument, NULL, OPT_PLAN},
      {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
      {"mem-limit", required_argument, NULL, OPT_MEM_LIMIT},
      {"host-limit", required_argument, NULL, OPT_HOST_LIMIT},
      {"offload", required_argument, NULL, OPT_OFFLOAD},
      {"spill-prefetch", required_argument, NULL, OPT_SPILL_PREFETCH},
      {"spill-dir", required_argument, NULL, OPT_SPILL_DIR},
      {"trace", required_argument, NULL, OPT_TRACE},
      {"link", required_argument, NULL, OPT_LINK},
      {"plan-strategy", required_argument, NULL, OPT_PLAN_STRATEGY},
      {"simulate", required_argument, NULL, OPT_SIMULATE},
      {"devices", required_argument, NULL, OPT_DEVICES},
      {"zero", required_argument, NULL, OPT_ZERO},
      {"pipeline", required_argument, NULL, OPT_PIPELINE},
      {"tensor-parallel", required_argument, NULL, OPT_TENSOR_PARALLEL},
      {"micro-batches", required_argument, NULL, OPT_MICRO},
      {"precision", required_argument, NULL, OPT_PRECISION},
      {"loss-scale", required_argument, NULL, OPT_LOSS_SCALE},
      {"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
      {"host-memory", required_argument, NULL, OPT_HOST_MEMORY},
      {"what-if", required_argument, NULL, OPT_WHAT_IF},
      {"splits", required_argument, NULL, OPT_SPLITS},
      {"max-devices", required_argument, NULL, OPT_MAX_DEVICES},
      {"steps", required_argument, NULL, OPT_STEPS},
      {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
      {"eval-batches", required_argument, NULL, OPT_EVAL_BATCHES},
      {"layers", required_argument, NULL, OPT_LAYERS},
      {"heads", required_argument, NULL, OPT_HEADS},
      {"embd", required_argument, NULL, OPT_EMBD},
      {"context", required_argument, NULL, OPT_CONTEXT},
      {"vocab", required_argument, NULL, OPT_VOCAB},
      {"dropout", required_argument, NULL, OPT_DROPOUT},
      {"attn-dropout", required_argument, NULL, OPT_ATTN_DROPOUT},
      {"json", no_argument, NULL, 'j'},          {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  *o = (options){.model = "mlp", .data = "fashion-mnist", .epochs = 1, .threads = -1,
                 .batch = 64, .seed = 1, .workers = 2, .prefetch = 2, .accum = 1,
                 .spill = {.prefetch = 4}, .micro = 4, .splits = 5};
  /* Learning rate, momentum and weight decay wait for the optimizer's
   * defaults; NAN: not given. */
  float lr = NAN, momentum = NAN, decay = NAN;
  dlrt_optimizer_kind kind = DLRT_OPT_ADAM;
  char *err = o->error;
  long long v;
  int c, ok = 1, answer = 0;
  if (argc < 1 || !argv) argc = 0; /* no program name: nothing to read */
  char **args = tool_argv_copy(argc, argv);
  if (!args) return tool_usage_error(err, "out of memory"), STATUS_USAGE;
  tool_getopt_reset();

  while (ok && !answer && argc > 0 &&
         (c = getopt_long(argc, args, shortopts, longopts, NULL)) != -1) {
    switch (c) {
    case 'm': o->model = optarg; break;
    case OPT_DATA: o->data = optarg, o->data_given = 1; break;
    case 'd': o->device = optarg; break;
    case 'e':
      if ((ok = tool_parse_int("--epochs", optarg, 0, 1000000, &v, err))) o->epochs = (int)v;
      break;
    case 'b':
      if ((ok = tool_parse_int("--batch", optarg, 1, 1 << 20, &v, err))) o->batch = v;
      o->batch_given = 1;
      break;
    case OPT_STEPS:
      if ((ok = tool_parse_int("--steps", optarg, 0, INT64_MAX / 2, &v, err)))
        o->steps = v, o->steps_given = 1;
      break;
    case OPT_EVAL_EVERY:
      if ((ok = tool_parse_int("--eval-every", optarg, 1, INT64_MAX / 2, &v, err)))
        o->eval_every = v;
      break;
    case OPT_EVAL_BATCHES:
      if ((ok = tool_parse_int("--eval-batches", optarg, 1, 1 << 30, &v, err)))
        o->eval_batches = v;
      break;
    case OPT_LAYERS:
      if ((ok = tool_parse_int("--layers", optarg, 1, 1000, &v, err))) o->gpt.layers = v;
      break;
    case OPT_HEADS:
      if ((ok = tool_parse_int("--heads", optarg, 1, 1 << 16, &v, err))) o->gpt.heads = v;
      break;
    case OPT_EMBD:
      if ((ok = tool_parse_int("--embd", optarg, 1, 1 << 20, &v, err))) o->gpt.embd = v;
      break;
    case OPT_CONTEXT:
      if ((ok = tool_parse_int("--context", optarg, 1, 1 << 20, &v, err))) o->gpt.context = v;
      break;
    case OPT_VOCAB:
      if ((ok = tool_parse_int("--vocab", optarg, 2, 1 << 24, &v, err))) o->gpt.vocab = v;
      break;
    case OPT_ATTN_DROPOUT:
      ok = tool_parse_float("--attn-dropout", optarg, FRACTION, &o->gpt.attn_dropout, err);
      break;
    case OPT_DROPOUT:
      ok = tool_parse_float("--dropout", optarg, FRACTION, &o->gpt.dropout, err);
      break;
    case OPT_LIMIT:
      if ((ok = tool_parse_int("--limit", optarg, 1, INT64_MAX, &v, err))) o->limit = v;
      break;
    case OPT_SEED:
      if ((ok = tool_parse_int("--seed", optarg, 0, INT64_MAX, &v, err))) o->seed = (uint64_t)v;
      break;
    case OPT_THREADS:
      if ((ok = tool_parse_int("--threads", optarg, 0, 4096, &v, err))) o->threads = (int)v;
      break;
    case OPT_LR: ok = tool_parse_float("--lr", optarg, POSITIVE, &lr, err); break;
    case OPT_MOMENTUM: ok = tool_parse_float("--momentum", optarg, FRACTION, &momentum, err); break;
    case OPT_WEIGHT_DECAY:
      ok = tool_parse_float("--weight-decay", optarg, NON_NEGATIVE, &decay, err);
      break;
    case OPT_SMOOTHING:
      ok = tool_parse_float("--label-smoothing", optarg, FRACTION, &o->label_smoothing, err);
      break;
    case OPT_OPTIMIZER: ok = parse_optimizer(optarg, &kind, err); break;
    case OPT_SCHEDULE: ok = parse_schedule(optarg, o); break;
    case OPT_WARMUP:
      if ((ok = tool_parse_int("--warmup", optarg, 0, INT64_MAX, &v, err))) o->warmup = v;
      break;
    case OPT_CLIP:
      ok = tool_parse_float("--clip-norm", optarg, POSITIVE, &o->clip_norm, err);
      break;
    case OPT_WORKERS:
      if ((ok = tool_parse_int("--workers", optarg, 0, 256, &v, err))) o->workers = (int)v;
      break;
    case OPT_PREFETCH:
      if ((ok = tool_parse_int("--prefetch", optarg, 0, 64, &v, err))) o->prefetch = (int)v;
      break;
    case OPT_AUGMENT:
      o->augment = 1, o->aug.crop_padding = 2, o->aug.flip = 1;
      break;
    case OPT_CROP_PAD:
      if ((ok = tool_parse_int("--crop-pad", optarg, 0, 64, &v, err)))
        o->augment = 1, o->aug.crop_padding = (int)v;
      break;
    case OPT_FLIP: o->augment = 1, o->aug.flip = 1; break;
    case OPT_ERASE:
      ok = tool_parse_float("--erase", optarg, FRACTION, &o->aug.erase_p, err);
      o->augment |= ok;
      break;
    case OPT_NORMALIZE: ok = parse_normalize(optarg, o); break;
    case OPT_MMAP: o->mmap = 1; break;
    case OPT_PLAN: o->plan = 1; break;
    case OPT_MEM_LIMIT: o->mem_limit = optarg; break;
    case OPT_TRACE: o->trace = optarg; break;
    case OPT_LINK: ok = parse_link(optarg, o); break;
    case OPT_PLAN_STRATEGY: {
      dlrt_plan_strategy strategy;
      if (dlrt_plan_strategy_parse(optarg, &strategy) != DLRT_OK)
        ok = tool_usage_error(o->error, "--plan-strategy: %s", dlrt_last_error());
      else
        o->plan_strategy = optarg;
      break;
    }
    case OPT_SIMULATE: o->simulate = optarg; break;
    case OPT_DEVICES: o->devices = optarg; break;
    case OPT_ZERO:
      if ((ok = tool_parse_int("--zero", optarg, 0, 3, &v, err))) o->zero = (int)v;
      break;
    case OPT_PIPELINE: o->pipeline = optarg; break;
    case OPT_TENSOR_PARALLEL: o->tensor_parallel = optarg; break;
    case OPT_MICRO:
      if ((ok = tool_parse_int("--micro-batches", optarg, 1, 1 << 20, &v, err))) o->micro = (int)v;
      break;
    case OPT_PRECISION: ok = parse_precision(optarg, &o->precision, err); break;
    case OPT_LOSS_SCALE: ok = parse_loss_scale(optarg, o); break;
    case OPT_HOST_LIMIT: o->host_limit = optarg; break;
    case OPT_OFFLOAD:
      o->offload_auto = strcmp(optarg, "auto") == 0;
      if (o->offload_auto) o->spill.policy = DLRT_OFFLOAD_NONE;
      else ok = parse_offload(optarg, &o->spill.policy, err);
      break;
    case OPT_SPILL_DIR: o->spill_dir = optarg; break;
    case OPT_SPILL_PREFETCH:
      if ((ok = tool_parse_int("--spill-prefetch", optarg, 0, 1024, &v, err)))
        o->spill.prefetch = (int)v, o->spill_prefetch_given = 1;
      break;
    case OPT_CHECKPOINT: ok = parse_checkpoint(optarg, o); break;
    case OPT_DEVICE_MEMORY:
      ok = dlrt_parse_size(optarg, 0, &o->device_memory) == DLRT_OK && o->device_memory > 0;
      if (!ok)
        tool_usage_error(err, "--device-memory needs a size such as 40G or 512M, not '%s'",
                         optarg);
      break;
    case OPT_HOST_MEMORY:
      ok = dlrt_parse_size(optarg, 0, &o->host_memory) == DLRT_OK && o->host_memory > 0;
      if (!ok)
        tool_usage_error(err, "--host-memory needs a size such as 64G or 2T, not '%s'", optarg);
      break;
    case OPT_WHAT_IF: ok = parse_what_if(optarg, o); break;
    case OPT_SPLITS:
      if ((ok = tool_parse_int("--splits", optarg, 0, 1000, &v, err)))
        o->splits = (int)v, o->splits_given = 1;
      break;
    case OPT_MAX_DEVICES:
      if ((ok = tool_parse_int("--max-devices", optarg, 1, 1 << 20, &v, err)))
        o->max_devices = (int)v;
      break;
    case OPT_ACCUM:
      if ((ok = tool_parse_int("--accum", optarg, 1, 65536, &v, err))) o->accum = (int)v;
      break;
    case OPT_SAVE: o->save = optarg; break;
    case OPT_RESUME: o->resume = optarg; break;
    case OPT_DETERMINISTIC: o->deterministic = 1; break;
    case 'j': o->json = 1; break;
    case 'q': o->quiet = 1; break;
    case 'h': answer = TOOL_HELP; break;
    case 'V': answer = TOOL_VERSION; break;
    default: ok = 0, tool_getopt_error(c, args, shortopts, longopts, err); break;
    }
  }
  if (ok && !answer && optind < argc)
    ok = tool_usage_error(err, "unexpected argument '%s'", args[optind]);
  free(args);
  if (answer) return answer;
  dlrt_gpt_config preset;
  o->gpt_model = dlrt_gpt_preset(o->model, &preset) == DLRT_OK;
  if (o->gpt_model && !o->batch_given) o->batch = 32;
  if (o->gpt_model && !o->steps_given) o->steps = 1000;
  if (o->gpt_model && !o->eval_every)
    o->eval_every = o->steps < 1 ? 1 : o->steps < 250 ? o->steps : 250;
  if (o->gpt_model && !o->eval_batches) o->eval_batches = 20;
  if (ok && !o->gpt_model &&
      (o->gpt.layers || o->gpt.heads || o->gpt.embd || o->gpt.context || o->gpt.vocab ||
       o->gpt.dropout || o->gpt.attn_dropout || o->steps_given || o->eval_every ||
       o->eval_batches))
    ok = tool_usage_error(err, "--layers, --heads, --embd, --context, --vocab, --dropout, "
                          "--attn-dropout, --steps, --eval-every and --eval-batches are for "
                          "GPT models "
                          "(--model gpt-mini, gpt2, ...), not %s", o->model);
  if (ok && o->gpt_model) {
    dlrt_gpt_override(&preset, &o->gpt);
    if (dlrt_gpt_check(&preset) < 0) ok = tool_usage_error(err, "%s", dlrt_last_error());
  }
  if (ok) ok = check_combinations(o, !isnan(momentum), kind);
  if (!ok) return STATUS_USAGE;
  o->opt = dlrt_optimizer_defaults(kind);
  if (!isnan(lr)) o->opt.lr = lr;
  if (!isnan(momentum)) o->opt.momentum = momentum;
  if (!isnan(decay)) o->opt.weight_decay = decay;
  /* The devices take the model as they open, whichever the run uses
   * (--device, --devices, --pipeline): dltrain parses before dlrt_init. */
  if (o->link && setenv("DLRT_LINK", o->link, 1) != 0)
    return tool_usage_error(err, "--link: cannot set DLRT_LINK"), STATUS_USAGE;
  /* The trainer reads it (dlrt_trainer_create); --plan with --mem-limit
   * plans with auto unless told. */
  const char *strategy = o->plan_strategy ? o->plan_strategy
                         : o->plan && o->mem_limit && !getenv("DLRT_PLAN_STRATEGY") ? "auto"
                                                                                    : NULL;
  if (strategy && setenv("DLRT_PLAN_STRATEGY", strategy, 1) != 0)
    return tool_usage_error(err, "--plan-strategy: cannot set DLRT_PLAN_STRATEGY"), STATUS_USAGE;
  struct stat dir;
  if (o->spill_dir && (stat(o->spill_dir, &dir) != 0 || !S_ISDIR(dir.st_mode) ||
                       access(o->spill_dir, W_OK | X_OK) != 0))
    return tool_usage_error(err, "--spill-dir %s: not a folder this process can write to",
                            o->spill_dir), STATUS_USAGE;
  /* --offload params without --spill-prefetch: the look-ahead chosen from
   * the first step's node times and the link (0). */
  if (o->spill.policy == DLRT_OFFLOAD_PARAMS && !o->spill_prefetch_given) o->spill.prefetch = 0;
  if (o->spill_dir && setenv("DLRT_SPILL_DIR", o->spill_dir, 1) != 0)
    return tool_usage_error(err, "--spill-dir: cannot set DLRT_SPILL_DIR"), STATUS_USAGE;
  return 0;
}
