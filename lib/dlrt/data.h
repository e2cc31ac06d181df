/*
 * dlrt/data.h — data sets (IDX and record files), the data pipeline, host
 * tensors and safetensors files.
 * Included by dlrt.h, which programs include (lib/dlrt.h tells the
 * conventions).
 */
#ifndef DLRT_DATA_H
#define DLRT_DATA_H

#include "dlrt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Data sets: MNIST-family IDX files and dlrt record files                  */
/* ------------------------------------------------------------------------ */

/* Labelled images in host memory (or mapped from a record file), or the
 * windows of a token stream (dlrt_dataset_from_tokens, below). */
typedef struct {
  int64_t count;        /* samples (token windows: those of one pass; for training,
                           whose offsets are random, any number: an epoch's windows) */
  int64_t channels, height, width; /* token windows: 1, 1, the context T */
  int classes;          /* 1 + the largest label (10 for the MNIST family; the
                           vocabulary for token windows) */
  dlrt_dtype image_dtype; /* DLRT_U8 (pixels 0..255) or DLRT_F32 (used as they
                           are); DLRT_I32 for token windows */
  /* count x channels x height x width samples of image_dtype, row-major
   * (bytes; cast to const float * for DLRT_F32). NULL for token windows. */
  uint8_t *images;
  int32_t *labels;      /* count, each in [0, classes); NULL for token windows */
  char source[512];     /* the folder or files it came from, or "generated" */
  void *mapping;        /* private: the mapped record file, or NULL */
  size_t mapping_bytes;
  /* Token windows only (else NULL and 0): the stream, borrowed from a
   * dlrt_tokens that must outlive the data set, and its length. */
  const uint16_t *tokens;
  int64_t token_count;
} dlrt_dataset;

/* Folder Debian's dataset-fashion-mnist package installs. */
#define DLRT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* How dlrt_dataset_load and dlrt_dataset_open_records read record files. */
#define DLRT_DATASET_MMAP 1 /* map the images instead of reading them: the page
                               cache streams them from disk, so a set larger
                               than RAM trains */

/* Loads the training (test = 0) or test (test = 1) split of a data set:
 * `where` is "fashion-mnist" (DLRT_FASHION_MNIST_DIR), a record file, or a
 * folder holding train.dlrec / test.dlrec (record files, preferred) or
 * train-images-idx3-ubyte and train-labels-idx1-ubyte (t10k-... for the test
 * split), each optionally gzip-compressed (.gz). A record file given as
 * `where` holds both: its last tenth (at least one record) is the test
 * split, the rest the training split (so shuffle a file sorted by class
 * first); DLRT_ERR_IO when it has fewer than two records.
 * DLRT_ERR_NOT_FOUND when the files are absent, DLRT_ERR_IO for unreadable,
 * truncated or corrupt files (wrong magic, wrong dimensions, image count !=
 * label count); the message names the file and what is wrong. `flags`:
 * DLRT_DATASET_MMAP or 0 (IDX files are always read into memory). */
DLRT_API int dlrt_dataset_load(const char *where, int test, dlrt_dataset *out);
DLRT_API int dlrt_dataset_load_flags(const char *where, int test, int flags,
                                     dlrt_dataset *out);
/* Both splits of `where` (as dlrt_dataset_load_flags): out[0] the training
 * split, out[1] the test split, checked against each other before anything
 * trains on them (dlrt_dataset_check_splits): DLRT_ERR_INVALID_ARG naming
 * both files and each field that disagrees, and nothing loaded, when they
 * do. */
DLRT_API int dlrt_dataset_load_splits(const char *where, int flags, dlrt_dataset out[2]);
/* Whether a training and a test split fit one model: the same channels,
 * height and width, and no more classes in the test split than in the
 * training one. DLRT_ERR_INVALID_ARG naming both sources and each field
 * that disagrees ("height 28 vs 32"). */
DLRT_API int dlrt_dataset_check_splits(const dlrt_dataset *train, const dlrt_dataset *test);
/* Loads one images file and one labels file (IDX, plain or gzip). */
DLRT_API int dlrt_dataset_load_idx(const char *images_path, const char *labels_path,
                                   dlrt_dataset *out);
/* A generated stand-in of `count` 28 x 28 images in `classes` classes, each
 * class a distinct learnable pattern plus noise, reproducible from `seed`;
 * source is "generated". */
DLRT_API int dlrt_dataset_generate(int64_t count, int classes, uint64_t seed,
                                   dlrt_dataset *out);
/* Releases the arrays (or the mapping); the struct may be reused. NULL is a
 * no-op. */
DLRT_API void dlrt_dataset_free(dlrt_dataset *d);

/* Record files (".dlrec"): a fixed 64-byte header, then the images, then the
 * labels, all little-endian, so a user can write one from their own data
 * with a few lines of any language:
 *   offset size  field
 *   0      8     magic "DLRTREC1"
 *   8      4     u32 header bytes (64)
 *   12     4     u32 image dtype: 1 = u8 (0..255), 2 = f32
 *   16     8     u64 count (samples)
 *   24     4     u32 channels
 *   28     4     u32 height
 *   32     4     u32 width
 *   36     4     u32 label dtype: 1 = u8, 2 = i32
 *   40     4     u32 classes (every label is below it)
 *   44     20    zero
 *   64     count x channels x height x width images of the image dtype
 *   ...    count labels of the label dtype
 * and nothing after. Writing replaces the file atomically (see "Saving
 * files" below: only a regular file, or a link to one, is replaced). Token
 * windows are refused: their stream is saved with dlrt_tokens_save. */
DLRT_API int dlrt_dataset_save_records(const char *path, const dlrt_dataset *d);
DLRT_API int dlrt_dataset_open_records(const char *path, int flags, dlrt_dataset *out);

/* Token streams, the data of language models.
 * dlrt_tokens_load reads
 *   - a token file of llm.c's format: a header of 256 little-endian int32
 *     (magic DLRT_TOKENS_MAGIC 20240520, version 1, the token count, the rest
 *     unused), then that many little-endian uint16 tokens and nothing after,
 *     so data sets prepared for llm.c (tinyshakespeare, tinystories, fineweb
 *     shards) load unchanged; vocab is the largest token + 1;
 *   - any other regular file as text: one token per byte (vocab 256);
 *   - a folder: its top-level regular files in byte order of their names
 *     (hidden files, sub-folders, and files holding a NUL byte, which are not
 *     text, such as fortune's .dat indexes, are skipped), as byte tokens,
 *     one after another; a file with two names (a hard or symbolic link,
 *     such as fortunes' NAME.u8 -> NAME) is read once, at its first name.
 * A FIFO or device is refused at once, as every dlrt reader does. */
#define DLRT_TOKENS_MAGIC 20240520
#define DLRT_TOKENS_VERSION 1
typedef struct {
  uint16_t *tokens;  /* count token ids, each below vocab */
  int64_t count;
  int vocab;         /* 256 for byte tokens */
  int files;         /* files read (1 for a file) */
  char source[256];  /* the path, for messages */
} dlrt_tokens;
DLRT_API int dlrt_tokens_load(const char *path, dlrt_tokens *out);
/* The training split (validation 0: all but the last tenth) or the
 * validation split (1: the last tenth, at least one token) of `all`, as a
 * copy; `all` needs two tokens or more. */
DLRT_API int dlrt_tokens_split(const dlrt_tokens *all, int validation, dlrt_tokens *out);
/* Writes `t` as an llm.c token file (above), replaced atomically (see
 * "Saving files"); llm.c's int32 count allows at most 2^31 - 1 tokens. */
DLRT_API int dlrt_tokens_save(const char *path, const dlrt_tokens *t);
DLRT_API void dlrt_tokens_free(dlrt_tokens *t);
/* A token stream as a data set of windows of `context` (T) tokens, for a
 * language model to train through the loader (below) as images do. It
 * borrows the stream (no copy): `tokens` must outlive it; dlrt_dataset_free
 * releases nothing of the stream. Its fields: channels 1, height 1, width
 * T, image_dtype DLRT_I32, classes the vocabulary, images and labels NULL,
 * and count floor((n - 1) / T), the windows of one pass over n tokens.
 * A loader of it hands out, for sample i of an epoch, the T + 1 tokens at an
 * offset o: the inputs are tokens o .. o + T - 1 (i32, batch x T per batch)
 * and the labels tokens o + 1 .. o + T, the next token of each (i32, batch
 * x T: the label of position t of row b at b x T + t). With the loader's
 * `shuffle` (training) o is drawn uniformly from [0, n - T - 1] by a hash of
 * (seed, epoch x count + i) alone: the sample's number in the whole run, so
 * that with `count` set to a number of steps' windows (any count will do:
 * the offsets are random) the window of row r of step s depends on (seed,
 * s, r) alone, whatever the grouping of steps into epochs; without it (evaluation) o = i x T, the
 * consecutive windows, the same on every pass. DLRT_ERR_INVALID_ARG when
 * the stream has fewer than T + 1 tokens, or a token is not below the
 * vocabulary (naming its position). */
DLRT_API int dlrt_dataset_from_tokens(const dlrt_tokens *tokens, int64_t context,
                                      dlrt_dataset *out);

/* ------------------------------------------------------------------------ */
/* Data pipeline: disk -> RAM -> workers -> pinned staging -> device         */
/* ------------------------------------------------------------------------ */

/* Augmentation, on the CPU, per sample; each sample's randomness comes from
 * (seed, epoch, sample index) alone, so the batches are the same for any
 * number of workers. Applied in this order. */
typedef struct {
  int crop_padding;  /* random crop back to the original size after zero
                        padding each side by this many pixels; 0: off */
  int flip;          /* horizontal flip with probability 1/2 */
  float mean, std;   /* (x - mean) / std on pixels scaled to [0, 1] (u8) or
                        taken as they are (f32); std 0: leave as is */
  float erase_p;     /* random erasing (torchvision's RandomErasing: 2-33%
                        of the area, aspect 0.3-3.3, value 0) with this
                        probability; 0: off */
} dlrt_augment;

typedef struct {
  int64_t batch;     /* samples per batch */
  int workers;       /* threads that decode and augment; 0: the calling thread */
  int prefetch;      /* batches made ready ahead (pinned staging and device
                        buffers); 0: none, each batch is loaded and copied
                        when asked for */
  uint64_t seed;     /* shuffling and augmentation */
  int shuffle;       /* a new order every epoch from (seed, epoch); token
                        windows: offsets drawn from (seed, epoch x count + index)
                        instead of the consecutive windows */
  int pad_last;      /* 0: drop the last partial batch; 1: keep it, filled
                        up from the start of the epoch's order */
  int rank, world;   /* this shard: rank r of world (0 and 1 for all) */
  int augment;       /* 0: none of aug's random parts (crop, flip, erasing):
                        for evaluation; its normalisation still applies */
  dlrt_augment aug;  /* all zero for token windows (refused otherwise) */
  int host_only;     /* batches in pinned host memory only, no device copy
                        (images, labels and ready are NULL): for consumers
                        that take rows from the host (replicas, stages) */
  dlrt_dtype image_type; /* the images' type: DLRT_F32 (0, the default), or
                        DLRT_F16 / DLRT_BF16 for a mixed-precision consumer:
                        rounded to nearest even after augmentation, which
                        halves the staging, the device buffers and the copies
                        (not with host_only). Token windows: DLRT_I32 (or 0),
                        whatever the consumer's precision */
} dlrt_loader_config;

typedef struct dlrt_loader dlrt_loader_t;

/* One batch, on the device, ready once `ready` has passed. A batch of token
 * windows (context T) holds the input tokens as its images (batch x T, i32)
 * and the next tokens as its labels (batch x T, i32; row-major: the label
 * of position t of row b at b x T + t). */
typedef struct {
  dlrt_buffer_t *images;       /* batch x channels x height x width, in image_type */
  dlrt_buffer_t *labels;       /* batch (token windows: batch x T), i32 */
  const float *host_images;    /* the same in pinned host memory (f32 loaders; NULL
                                  for 16-bit ones and token windows) */
  dlrt_dtype image_type;       /* the loader's (dlrt_loader_config); DLRT_I32 for
                                  token windows */
  const int32_t *host_labels;  /* (valid until the batch is released) */
  const int32_t *host_tokens;  /* token windows: the inputs in pinned host memory,
                                  batch x T; NULL for images */
  dlrt_event_t *ready;         /* recorded after the copy to the device */
  int64_t count;               /* real samples; later rows repeat earlier ones */
  int64_t index;               /* batch number within the epoch */
  int slot;                    /* private */
} dlrt_batch;

typedef struct {
  double stall_s;             /* time dlrt_loader_next waited for a batch */
  double work_s;              /* worker time spent decoding and augmenting */
  double first_s, last_s;     /* (monotonic) first batch asked for, last one handed out */
  int64_t batches, images;
  double images_per_s;        /* loader throughput: images / worker time per worker */
} dlrt_loader_stats;

/* A loader of `data` (which must outlive it) onto `dev`: images, or token
 * windows (dlrt_dataset_from_tokens) through the same workers, staging and
 * copies. Uses its own copy stream; the staging ring holds max(prefetch, 1)
 * batches, each of batch x C x H x W inputs of image_type and batch labels
 * (token windows: batch x T i32 inputs and batch x T i32 labels), on the
 * device as in pinned host memory. */
DLRT_API int dlrt_loader_create(dlrt_device_t *dev, const dlrt_dataset *data,
                                const dlrt_loader_config *config, dlrt_loader_t **out);
/* Stops the workers (waiting for nothing the device still reads). */
DLRT_API void dlrt_loader_destroy(dlrt_loader_t *l);
/* Batches per epoch for this shard. */
DLRT_API int64_t dlrt_loader_batches(const dlrt_loader_t *l);
/* Begins epoch `epoch` (its order and augmentation), abandoning what is left
 * of the previous one, and starts the workers on its first batches. */
DLRT_API int dlrt_loader_start(dlrt_loader_t *l, int epoch);
/* The same from batch `first` of the epoch's order (0 <= first <= batches):
 * the batches before it are not made, and those after it are the whole
 * epoch's, augmentation included. */
DLRT_API int dlrt_loader_start_at(dlrt_loader_t *l, int epoch, int64_t first);
/* The next batch: 1 with *out filled, 0 at the end of the epoch, negative on
 * an error (a failing worker's message). Every batch must be released. */
DLRT_API int dlrt_loader_next(dlrt_loader_t *l, dlrt_batch *out);
/* Gives the batch back once the work queued on `consumer` that reads it is
 * done (an event on that stream; nothing blocks); NULL: at once. */
DLRT_API int dlrt_loader_release(dlrt_loader_t *l, dlrt_batch *b, dlrt_stream_t *consumer);
DLRT_API int dlrt_loader_stats_get(const dlrt_loader_t *l, dlrt_loader_stats *out);
DLRT_API int dlrt_loader_stats_reset(dlrt_loader_t *l);

/* ------------------------------------------------------------------------ */
/* Host tensors and safetensors files (checkpoints PyTorch can read)          */
/* ------------------------------------------------------------------------ */

#define DLRT_MAX_DIMS 8

typedef struct {
  char name[128];
  dlrt_dtype dtype;
  int ndim;
  int64_t shape[DLRT_MAX_DIMS];
  void *data;   /* host bytes: product(shape) elements of dtype */
  size_t bytes;
} dlrt_host_tensor;

/* Frees `n` host tensors whose data the library allocated (dlrt_exec_export,
 * and dlrt_safetensors_load without its metadata), and the array. NULL ok. */
DLRT_API void dlrt_host_tensors_free(dlrt_host_tensor *tensors, int n);

/* Saving files (dlrt_safetensors_save, dlrt_dataset_save_records,
 * dlrt_trainer_save) replaces `path` atomically: the content is written to
 * an unnamed file in the same folder (O_TMPFILE; where the filesystem has
 * none, "NAME.tmp-PID-XXXXXX"), flushed to disk, and only then renamed over
 * `path`, so a crash or a kill leaves the old file or the new one, never
 * half of one. What may be at `path`:
 *   - nothing (the folder must exist): the file is created, mode 0666 less
 *     the umask;
 *   - a regular file: replaced, keeping its permission bits (a new inode:
 *     other hard links to it keep the old content);
 *   - a symbolic link to a regular file: the file it names is replaced, in
 *     its own folder, so the link stays a link to the new content;
 *   - anything else (a folder, FIFO, device, socket, a dangling link or a
 *     link to one of those): refused with DLRT_ERR_INVALID_ARG, untouched.
 * A kill can leave a "NAME.tmp-PID-XXXXXX" file (only in the moment between
 * naming the new file and the rename, or during the write without
 * O_TMPFILE); every save removes those of the same NAME whose PID is no
 * longer alive and that belong to the calling user.
 * dlrt_save_path_check tells, without writing or removing anything,
 * whether a save to `path` would be allowed (and its folder is writable):
 * DLRT_OK or the error the save would give, for tools to check before
 * hours of work. */
DLRT_API int dlrt_save_path_check(const char *path);
/* Saves `bytes` of `data` as the file `path`, by the rules above. */
DLRT_API int dlrt_file_save(const char *path, const void *data, size_t bytes);
/* Writes `n` tensors and string metadata (`metadata` holds key, value, key,
 * value, ..., NULL; may be NULL) to `path` in the safetensors format,
 * replaced atomically (above). dlrt adds two metadata keys of its own,
 * checked on load and never handed back: "dlrt.crc32", the CRC-32 of the
 * data bytes, and "dlrt.header_crc32", that of the rest of the header (the
 * other metadata and every tensor's name, dtype, shape and offsets, sorted
 * by key and by name), so a flipped bit or an edited value is refused as
 * corruption; files without them (other writers', older dlrt's) load
 * unchecked. */
DLRT_API int dlrt_safetensors_save(const char *path, const dlrt_host_tensor *tensors, int n,
                                   const char *const *metadata);
/* Reads a safetensors file. *tensors is an array of *n tensors whose data
 * the library allocated; *metadata (may be NULL if not wanted) holds key,
 * value, ..., NULL. A truncated or corrupt file (one that does not match
 * its CRC-32s included) fails with DLRT_ERR_IO and a message naming the
 * file and the defect; nothing is returned then. */
DLRT_API int dlrt_safetensors_load(const char *path, dlrt_host_tensor **tensors, int *n,
                                   char ***metadata);
/* Frees what dlrt_safetensors_load returned. */
DLRT_API void dlrt_safetensors_free(dlrt_host_tensor *tensors, int n, char **metadata);

#ifdef __cplusplus
}
#endif

#endif /* DLRT_DATA_H */
