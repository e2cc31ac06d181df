#!/bin/sh
# shellcheck disable=SC2086
# test-dltrain.sh — TAP checks of the dltrain tool. automake's tap-driver runs it
# from the top of the build tree; DLTRAIN (and DLINFO, used to see whether an
# OpenCL device exists) may name other binaries. Short runs only (--limit):
# the whole script takes well under a minute on two cores.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=25
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

# json PYTHON: runs PYTHON with d = the JSON object on the last line of FILE
# ($tmp/out unless a second argument names another).
json() {
  python3 -c "import json, sys; d = json.loads(sys.stdin.read().splitlines()[-1])
$1" <"${2:-$tmp/out}"
}

# A quick run on generated data (2000 training, 333 test images). $quick, $det
# and $args are split into words on purpose (hence SC2086 off, above).
quick="--data generated --limit 2000 --batch 32 --device cpu --json --quiet"

# 1, 2
run --help
[ $rc -eq 0 ] && grep -q -- --epochs "$tmp/out" && grep -q -- --json "$tmp/out"
result "--help exits 0 and documents --epochs and --json"
run --version
[ $rc -eq 0 ] && grep -q "[0-9]\.[0-9]" "$tmp/out"
result "--version prints the version"

# 3-8
for args in "--optimizer rmsprop" "--epochs -1" "--batch 0" "--lr 0" "--lr 1e-3x" \
  "--no-such-option"; do
  run $args
  [ $rc -eq 2 ] && [ -s "$tmp/err" ] && [ ! -s "$tmp/out" ]
  result "$args is a usage error (exit 2) with a message"
done

# 9
run --device bogus --data generated --limit 100
[ $rc -eq 2 ] && grep -q bogus "$tmp/err"
result "--device bogus exits 2 and says why"

# 10
printf 'conv2d 8 3\nrelu\n# a comment\nlinaer 64\n' >"$tmp/bad.model"
run --model "$tmp/bad.model" --data generated --limit 100 --device cpu
[ $rc -eq 1 ] && grep -q "bad.model:4:" "$tmp/err"
result "a model file with a bad line exits 1 naming FILE:LINE"

if [ $have_python = no ]; then
  while [ $n -lt $PLAN ]; do
    skip "test $((n + 1))" "python3 not found"
  done
  exit 0
fi

# 11
run $quick --epochs 2
[ $rc -eq 0 ] && json '
for k in ("device", "device_name", "model", "data", "epochs", "batch", "optimizer",
          "lr", "seed", "final_loss", "test_loss", "test_accuracy", "train_images_per_s",
          "planned_peak_bytes", "peak_device_bytes", "params", "epoch_losses", "seconds"):
    assert k in d, "no " + k
assert d["device"] == "cpu:0" and d["data"] == "generated" and d["optimizer"] == "adam", d
assert d["train_images"] == 2000 and d["test_images"] == 333, d
assert d["test_accuracy"] > 0.5, d["test_accuracy"]
l = d["epoch_losses"]
assert len(l) == 2 and l[1] < l[0] and d["final_loss"] == l[1], l
assert d["params"] > 0 and d["train_images_per_s"] > 0 and d["peak_device_bytes"] > 0, d'
result "2 epochs on generated data: the JSON parses, accuracy > 0.5, the loss falls"

# 12
if [ -d /usr/share/datasets/fashion-mnist ]; then
  run --data fashion-mnist --limit 6000 --epochs 1 --device cpu --json --quiet
  [ $rc -eq 0 ] && json 'assert d["test_accuracy"] > 0.6, d
assert d["data_source"] == "/usr/share/datasets/fashion-mnist", d'
  result "Fashion-MNIST, 6000 images, 1 epoch: test accuracy > 0.6"
else
  skip "Fashion-MNIST accuracy" "no /usr/share/datasets/fashion-mnist"
fi

# 13-15: a checkpoint after 2 epochs, resumed to 3, gives the third epoch of a
# straight 3-epoch run bit for bit (CPU, one thread). The resumed run's
# epoch_losses holds only the epochs it ran.
det="--deterministic --threads 1"
run $quick $det --epochs 2 --save "$tmp/ckpt.safetensors"
[ $rc -eq 0 ] && python3 -c '
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
assert header["__metadata__"]["epochs_done"] == "2", header["__metadata__"]' \
  "$tmp/ckpt.safetensors"
result "--save writes a safetensors checkpoint with epochs_done 2"
cp "$tmp/out" "$tmp/saved.json"
run $quick $det --epochs 3 --resume "$tmp/ckpt.safetensors"
cp "$tmp/out" "$tmp/resumed.json"
[ $rc -eq 0 ] && grep -q "after 2 epochs" "$tmp/err" &&
  json 'assert d["epochs_run"] == 1 and len(d["epoch_losses"]) == 1, d' "$tmp/resumed.json"
result "--resume after 2 epochs with --epochs 3 runs one more epoch"
run $quick $det --epochs 3
[ $rc -eq 0 ] && python3 -c '
import json, sys
last = lambda p: json.loads(open(p).read().splitlines()[-1])
saved, resumed, straight = (last(p) for p in sys.argv[1:])
assert straight["epoch_losses"][:2] == saved["epoch_losses"], (straight, saved)
assert resumed["epoch_losses"][0] == straight["epoch_losses"][2], (resumed, straight)
assert resumed["test_loss"] == straight["test_loss"], (resumed, straight)' \
  "$tmp/saved.json" "$tmp/resumed.json" "$tmp/out"
result "the resumed third epoch equals a straight run's third epoch exactly"

# 16
head -c 100000 "$tmp/ckpt.safetensors" >"$tmp/short.safetensors"
run $quick --epochs 3 --resume "$tmp/short.safetensors"
[ $rc -eq 1 ] && grep -q "short.safetensors" "$tmp/err" && [ ! -s "$tmp/out" ]
result "a truncated checkpoint exits 1 naming the file"

# 17: a bit flipped in a weight after the save is caught by the CRC-32 the
# checkpoint carries.
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-3] ^= 4
open(sys.argv[2], "wb").write(b)' "$tmp/ckpt.safetensors" "$tmp/flipped.safetensors"
run $quick --epochs 3 --resume "$tmp/flipped.safetensors"
[ $rc -eq 1 ] && grep -q "flipped.safetensors" "$tmp/err" && grep -q "CRC-32" "$tmp/err" &&
  [ ! -s "$tmp/out" ]
result "a checkpoint with a flipped bit exits 1: its bytes do not match their CRC-32"

# 18: part of the optimizer state missing (one tensor's name changed in the
# header, which stays valid JSON; without the header's checksum, which would
# refuse it first, as in a checkpoint of dlrt before it) is refused, not
# trained on from zeros.
python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"].pop("dlrt.header_crc32", None)
name = next(k for k in h if k.endswith(".exp_avg"))
h[name[:-8] + ",exp_avg"] = h.pop(name)
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])' \
  "$tmp/ckpt.safetensors" "$tmp/renamed.safetensors"
run $quick --epochs 3 --resume "$tmp/renamed.safetensors"
[ $rc -eq 1 ] && grep -q "optimizer state of some parameters" "$tmp/err" && [ ! -s "$tmp/out" ]
result "a checkpoint missing part of its optimizer state exits 1 and says so"

# 19: OpenCL (PoCL on a CPU runs a few hundred images a second: keep it short).
opencl=no
if [ -x "$DLINFO" ]; then
  "$DLINFO" --device opencl:0 >/dev/null 2>&1 && opencl=yes
else
  opencl=maybe # no dlinfo: a run that cannot open the device (exit 2) skips
fi
if [ $opencl = no ]; then
  skip "one epoch on opencl:0" "no OpenCL device"
else
  run --data generated --limit 1000 --batch 32 --device opencl:0 --json --quiet
  if [ $opencl = maybe ] && [ $rc -eq 2 ]; then
    skip "one epoch on opencl:0" "no OpenCL device"
  else
    [ $rc -eq 0 ] && json 'assert d["device"] == "opencl:0" and d["test_accuracy"] > 0.5, d'
    result "one short epoch on opencl:0 reaches test accuracy > 0.5"
  fi
fi

# 20-21: --save writes only over a regular file (or nothing): a FIFO is
# refused before training starts, with exit 1, and stays a FIFO; a symbolic
# link to a checkpoint is followed: the link stays and the file it names is
# replaced.
mkfifo "$tmp/fifo"
run $quick --epochs 1 --save "$tmp/fifo"
[ $rc -eq 1 ] && grep -q "fifo is a FIFO" "$tmp/err" && [ -p "$tmp/fifo" ] && [ ! -s "$tmp/out" ]
result "--save to a FIFO exits 1 before training, naming it, and leaves the FIFO"
cp "$tmp/ckpt.safetensors" "$tmp/real.safetensors"
ln -s real.safetensors "$tmp/link.safetensors"
run $quick --epochs 1 --save "$tmp/link.safetensors"
[ $rc -eq 0 ] && [ -L "$tmp/link.safetensors" ] && python3 -c '
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
assert header["__metadata__"]["epochs_done"] == "1", header["__metadata__"]' \
  "$tmp/real.safetensors"
result "--save through a symbolic link replaces the file it names and keeps the link"

# 22-24: epochs_done is checked, not trusted: each value below, in a
# checkpoint without the header checksum (as dlrt wrote them before it), is
# refused naming the key and the value.
for v in -3 abc 99999999999; do
  python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"]["epochs_done"] = sys.argv[3]
h["__metadata__"].pop("dlrt.header_crc32", None)
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])' \
    "$tmp/ckpt.safetensors" "$tmp/epochs.safetensors" "$v"
  run $quick --epochs 3 --resume "$tmp/epochs.safetensors"
  [ $rc -eq 1 ] && grep -q "\"epochs_done\" is \"$v\"" "$tmp/err" && [ ! -s "$tmp/out" ]
  result "a checkpoint with epochs_done $v exits 1 naming the key and the value"
done

# 25: the header checksum covers the metadata: epochs_done edited in place.
python3 -c 'import sys; b = open(sys.argv[1], "rb").read()
assert b.count(b"\"epochs_done\":\"2\"") == 1
open(sys.argv[2], "wb").write(b.replace(b"\"epochs_done\":\"2\"", b"\"epochs_done\":\"1\""))' \
  "$tmp/ckpt.safetensors" "$tmp/edited.safetensors"
run $quick --epochs 3 --resume "$tmp/edited.safetensors"
[ $rc -eq 1 ] && grep -q "edited.safetensors" "$tmp/err" && grep -q "CRC-32" "$tmp/err" &&
  [ ! -s "$tmp/out" ]
result "a checkpoint whose epochs_done was edited exits 1: the header fails its CRC-32"
