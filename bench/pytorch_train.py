#!/usr/bin/env python3
"""The reference for bench/train-vs-pytorch.sh: trains the same model on the
same data with the same recipe as dltrain (Adam, batch 64, pixels scaled to
[0, 1], no augmentation, drop-last shuffled batches), on the CPU with a fixed
number of threads, and prints one JSON line with the figures dltrain --json
reports (train_images_per_s excludes the first 10% of steps, as dltrain's).

Uses Debian's python3-torch; reads the IDX files itself (no torchvision)."""
import argparse
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="use only the first N training images")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "test")
    if a.limit:
        xtr, ytr = xtr[:a.limit], ytr[:a.limit]
        xte, yte = xte[:max(1, a.limit // 6)], yte[:max(1, a.limit // 6)]
    net = model(a.model, 10)
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss()
    steps = len(xtr) // a.batch
    warmup = steps // 10
    losses = []
    for epoch in range(a.epochs):
        perm = torch.randperm(len(xtr))
        net.train()
        total = 0.0
        start = time.perf_counter()
        for s in range(steps):
            if s == warmup:
                warm = time.perf_counter()
            idx = perm[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            loss = lossf(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            total += loss.item()
        end = time.perf_counter()
        ips = (steps - warmup) * a.batch / (end - warm)
        losses.append(total / steps)
    net.eval()
    with torch.no_grad():
        correct = 0
        for i in range(0, len(xte), 1000):
            correct += (net(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
    print(json.dumps({"framework": "pytorch " + torch.__version__, "model": a.model,
                      "epochs": a.epochs, "batch": a.batch, "threads": a.threads,
                      "final_loss": losses[-1], "epoch_losses": losses,
                      "test_accuracy": correct / len(xte), "train_images_per_s": ips}))


if __name__ == "__main__":
    main()
