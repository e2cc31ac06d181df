#!/bin/sh
# make-corpus.sh — writes the seed corpora of tests/fuzz/corpus/ (small valid
# inputs of each target): IDX pairs and record files written byte by byte,
# then a record file by dlrecord, a checkpoint by dltrain --save and
# safetensors files of every dtype; model files (the presets, the tests'
# models, every layer kind); typical dltrain command lines. Run it from a
# build folder after make (it uses tools/dlrecord and tools/dltrain) and
# commit what changed; files named regression-* (inputs that once found a
# bug) are left alone.
#
# Usage: tests/fuzz/make-corpus.sh [BUILDDIR]   (default: .)
set -e
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-.}" && pwd)
corpus=$here/corpus
command -v python3 >/dev/null 2>&1 || { echo "make-corpus.sh: needs python3" >&2; exit 1; }
for tool in dlrecord dltrain; do
  if [ ! -x "$build/tools/$tool" ]; then
    echo "make-corpus.sh: no $build/tools/$tool: make first" >&2
    exit 1
  fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/make-corpus.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for t in idx records safetensors model dltrain-options; do
  mkdir -p "$corpus/$t"
  find "$corpus/$t" -type f ! -name 'regression-*' -exec rm -f {} +
done

# ---------------------------------------------------------------- byte by byte
python3 - "$corpus" "$tmp" <<'EOF'
import gzip, json, struct, sys
corpus, tmp = sys.argv[1], sys.argv[2]

def idx_images(n, h, w):
    return struct.pack(">IIII", 0x803, n, h, w) + bytes((i * 37) % 256 for i in range(n * h * w))
def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)
def gz(b):
    return gzip.compress(b, mtime=0)
def idx_pair(name, images, labels):
    # fuzz-idx.c's input: the images file's length (u32 LE), images, labels.
    open(f"{corpus}/idx/{name}", "wb").write(struct.pack("<I", len(images)) + images + labels)

im, lb = idx_images(3, 4, 4), idx_labels([0, 1, 2])
idx_pair("plain-3x4x4", im, lb)
idx_pair("plain-1x1x1", idx_images(1, 1, 1), idx_labels([0]))
idx_pair("plain-2x28x28", idx_images(2, 28, 28), idx_labels([9, 3]))
idx_pair("gzip-images", gz(im), lb)
idx_pair("gzip-both", gz(im), gz(lb))
open(f"{tmp}/images", "wb").write(im)
open(f"{tmp}/labels", "wb").write(lb)

def dlrec(name, n, c, h, w, f32, wide, classes):
    head = b"DLRTREC1" + struct.pack("<IIQIIIII", 64, 2 if f32 else 1, n, c, h, w,
                                     2 if wide else 1, classes)
    head += bytes(64 - len(head))
    pix = n * c * h * w
    images = struct.pack(f"<{pix}f", *[i / 7 for i in range(pix)]) if f32 else \
        bytes(i % 256 for i in range(pix))
    labels = [i % classes for i in range(n)]
    labels = struct.pack(f"<{n}i", *labels) if wide else bytes(labels)
    open(f"{corpus}/records/{name}", "wb").write(head + images + labels)
dlrec("f32-i32.dlrec", 3, 2, 3, 3, True, True, 300)
dlrec("u8-2x1x2x2.dlrec", 2, 1, 2, 2, False, False, 2)

DT = {"F32": ("f", 4), "F16": ("e", 2), "BF16": (None, 2), "I32": ("i", 4), "U8": ("B", 1)}
def safetensors(name, tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for tname, dtype, shape in tensors:
        count = 1
        for d in shape:
            count *= d
        code, size = DT[dtype]
        if code is None:
            raw = b"".join(struct.pack("<H", 0x3f80 + i) for i in range(count))
        elif code == "B":
            raw = bytes(i % 256 for i in range(count))
        else:
            raw = struct.pack(f"<{count}{code}", *[(i % 5) + 1 for i in range(count)])
        header[tname] = {"dtype": dtype, "shape": shape,
                         "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, ensure_ascii=True).encode()
    text += b" " * (-len(text) % 8)
    open(f"{corpus}/safetensors/{name}", "wb").write(struct.pack("<Q", len(text)) + text + data)
safetensors("every-dtype.safetensors",
            [("w.f32", "F32", [2, 3]), ("w.f16", "F16", [4]), ("w.bf16", "BF16", [2, 2]),
             ("ids", "I32", [3]), ("bytes", "U8", [5]), ("scalar", "F32", []),
             ("empty", "F32", [0, 4])],
            {"format": "pt", "note": "caf\u00e9 \u2603 \ud83d\ude00 \"quoted\" \\ tab\t"})
safetensors("no-metadata.safetensors", [("x", "F32", [1])])
safetensors("only-metadata.safetensors", [], {"epochs_done": "1"})
safetensors("four-dims.safetensors", [("conv1.weight", "F32", [2, 1, 3, 3]),
                                      ("conv1.bias", "F32", [2])], {})
EOF

# ---------------------------------------------------------------- by the tools
"$build/tools/dlrecord" idx "$tmp/images" "$tmp/labels" "$corpus/records/dlrecord-3x4x4.dlrec" \
  >/dev/null
printf 'maxpool 14\nlinear 4\n' >"$tmp/tiny.model"
"$build/tools/dltrain" --model "$tmp/tiny.model" --data generated --limit 60 --batch 20 \
  --device cpu --quiet --save "$corpus/safetensors/dltrain-adam.safetensors" >/dev/null
"$build/tools/dltrain" --model "$tmp/tiny.model" --data generated --limit 60 --batch 20 \
  --device cpu --quiet --optimizer sgd --momentum 0.9 \
  --save "$corpus/safetensors/dltrain-sgd.safetensors" >/dev/null

# ---------------------------------------------------------------- model files
m=$corpus/model
printf 'flatten\nlinear 512\nrelu\nlinear 512\nrelu\n' >"$m/mlp"
printf 'conv2d 32 3\nrelu\nmaxpool 2\nconv2d 64 3 pad=1\nrelu\nmaxpool 2\n' >"$m/cnn"
printf 'flatten\nlinear 128\nrelu\n' >>"$m/cnn"
printf 'conv2d 12 3 pad=1\nrelu\nmaxpool 2\nconv2d 16 3 pad=5\nrelu\nmaxpool 2\nlinear 10\n' \
  >"$m/two-blocks"
printf 'conv2d 32 5 pad=2\nrelu\nmaxpool 2\nconv2d 32 3 pad=1\nrelu\nmaxpool 2\n' >"$m/no-linear"
printf '# every layer kind\n\nconv2d 8 3 stride=1 pad=1 dilation=1\nbatchnorm\nrelu\n' \
  >"$m/every-layer"
printf 'conv2d 8 3 stride=2 dilation=2  # a comment\navgpool 2 stride=1\ntanh\nmaxpool 2\n' \
  >>"$m/every-layer"
printf 'sigmoid\ngelu\ndropout 0.25\nflatten\nlinear 32\nbatchnorm\nrelu\nlinear 10\n' \
  >>"$m/every-layer"
printf 'CONV2D 4 3\r\n\tReLU\r\n   \r\nLinear 16\r\n' >"$m/crlf-upper-case"
printf 'conv2d 8 3\nrelu\n# a comment\nlinaer 64\n' >"$m/bad-line"

# ---------------------------------------------------------------- dltrain command lines
o=$corpus/dltrain-options
args() { name=$1; shift; printf '%s\n' "$@" >"$o/$name"; }
printf '' >"$o/none"
args cnn --model cnn --epochs 2 --batch 128 --device cpu
args sgd-schedule --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 5e-4 \
  --schedule step:100:0.5 --warmup 10
args mixed-precision --precision fp16 --loss-scale 1024:100:2:0.5 --clip-norm 1.0 \
  --label-smoothing 0.1
args memory --mem-limit 25% --host-limit 1G --offload all --spill-prefetch 8 \
  --checkpoint every:3 --accum 4
args plan --plan --device-memory 80G --what-if 7B -j
args data --data generated --augment --crop-pad 4 --flip --erase 0.25 --normalize 0.5,0.25 \
  --workers 0 --prefetch 0 --mmap
args pipeline --pipeline cpu,cpu --micro-batches 8 --seed 7 --threads 2 --deterministic -q
args devices --devices cpu:0,opencl:0 --save run.safetensors --resume old.safetensors \
  --limit 100 --trace t.json
args help --help
args usage-error --lr -1
printf '%s\0' --schedule=cosine --lr=1e-3 -e3 -b 16 --json --quiet --optimizer=adamw \
  >"$o/nul-separated"
echo "make-corpus.sh: wrote $(find "$corpus" -type f | wc -l) files under $corpus"
