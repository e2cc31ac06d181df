#!/usr/bin/env python3
"""The reference for bench/train-vs-pytorch.sh and tests/gpu-check.sh: trains
the same model on the same data with the same recipe as dltrain (Adam, batch
64, pixels scaled to [0, 1], no augmentation, drop-last shuffled batches), on
the CPU with a fixed number of threads or on a GPU (--device cuda), in fp32
or in mixed precision as dltrain --precision does it (--precision fp16|bf16:
torch.autocast, fp32 master weights, and for fp16 a dynamic loss scaler), and
prints one JSON line per run with the figures dltrain --json reports
(train_images_per_s excludes the first 10% of steps, as dltrain's; the loss
read back every step, as dltrain's). --model and --precision take
comma-separated lists: one run each, in one process (PyTorch starts once).

Uses Debian's python3-torch on the CPU, any PyTorch with CUDA on a GPU; reads
the IDX files itself (no torchvision)."""
import argparse
import contextlib
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(folder, split):
    prefix = "train" if split == "train" else "t10k"
    def find(kind):
        for name in (f"{prefix}-{kind}.gz", f"{prefix}-{kind}"):
            if os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
        sys.exit(f"pytorch_train.py: no {prefix}-{kind} in {folder}")
    x = read_idx(find("images-idx3-ubyte")).astype(np.float32) / 255.0
    y = read_idx(find("labels-idx1-ubyte")).astype(np.int64)
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


def model(name, classes):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                             nn.ReLU(), nn.Linear(512, classes))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 6 * 6, 128), nn.ReLU(),
                             nn.Linear(128, classes))
    sys.exit(f"pytorch_train.py: unknown model {name}")


def autocast(device, precision):
    """The mixed-precision context of dltrain --precision: matmuls and
    convolutions in fp16/bf16, losses and softmax in fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device, precision):
    """fp16's dynamic loss scaler (65536, x2 every 2000 clean steps, x0.5 on
    inf/NaN: dltrain's defaults), or None."""
    if precision != "fp16":
        return None
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device.type, init_scale=65536.0, growth_interval=2000)
    return torch.cuda.amp.GradScaler(init_scale=65536.0, growth_interval=2000)


def train(a, name, precision, device, xtr, ytr, xte, yte):
    torch.manual_seed(a.seed)
    net = model(name, 10).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    scaler = grad_scaler(device, precision)
    lossf = nn.CrossEntropyLoss()
    steps = len(xtr) // a.batch
    warmup = steps // 10
    losses = []
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for epoch in range(a.epochs):
        perm = torch.randperm(len(xtr), device=device)
        net.train()
        total = 0.0
        sync()
        warm = time.perf_counter()
        for s in range(steps):
            if s == warmup:
                sync()
                warm = time.perf_counter()
            idx = perm[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            with autocast(device, precision):
                loss = lossf(net(xtr[idx]).float(), ytr[idx])
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            total += loss.item()
        sync()
        end = time.perf_counter()
        ips = (steps - warmup) * a.batch / (end - warm)
        losses.append(total / steps)
    net.eval()
    with torch.no_grad(), autocast(device, precision):
        correct = 0
        test_loss = 0.0
        for i in range(0, len(xte), 1000):
            logits = net(xte[i:i + 1000]).float()
            correct += (logits.argmax(1) == yte[i:i + 1000]).sum().item()
            test_loss += nn.functional.cross_entropy(logits, yte[i:i + 1000],
                                                     reduction="sum").item()
    return {"framework": "pytorch " + torch.__version__, "model": name,
            "device": str(device),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else "cpu"),
            "precision": precision, "epochs": a.epochs, "batch": a.batch,
            "threads": a.threads, "final_loss": losses[-1], "epoch_losses": losses,
            "test_loss": test_loss / len(xte), "test_accuracy": correct / len(xte),
            "train_images_per_s": ips}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", help="mlp, cnn or a comma-separated list")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="use only the first N training images")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--precision", default="fp32",
                   help="fp32, fp16, bf16 or a comma-separated list")
    a = p.parse_args()
    precisions = a.precision.split(",")
    for prec in precisions:
        if prec not in ("fp32", "fp16", "bf16"):
            sys.exit(f"pytorch_train.py: --precision {prec}: use fp32, fp16 or bf16")
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"pytorch_train.py: --device {a.device}: this PyTorch ({torch.__version__})"
                 " sees no CUDA device")
    torch.set_num_threads(a.threads)
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "test")
    if a.limit:
        xtr, ytr = xtr[:a.limit], ytr[:a.limit]
        xte, yte = xte[:max(1, a.limit // 6)], yte[:max(1, a.limit // 6)]
    # The whole (small) set on the device once, as dltrain's loader keeps
    # batches ahead on it: a step then costs the model, not the transfer.
    xtr, ytr, xte, yte = (t.to(device) for t in (xtr, ytr, xte, yte))
    for name in a.model.split(","):
        for prec in precisions:
            print(json.dumps(train(a, name, prec, device, xtr, ytr, xte, yte)), flush=True)


if __name__ == "__main__":
    main()
