#!/usr/bin/env python3
"""gpt_pytorch.py — the peer of `dltrain --model gpt-*` in PyTorch: GPT-2's
architecture (the same as tests/gpt_reference.py, as an nn.Module), trained
on an llm.c token file (written by `dlrecord tokens`) split as dlrt splits
it (the last tenth for validation), with the same recipe: AdamW, weight
decay on the blocks' matrices only, windows of T + 1 tokens at random
offsets, evaluation on the first K x batch consecutive validation windows.
With --windows dlrt (the default) the training windows are dltrain's own:
the offsets lib/data/windows.c draws from (seed, round, index), computed
here with the same SplitMix64 (lib/data/sample_rng.h), so both sides see
the same data and differ only in their initial draws; --windows torch
draws them with torch.randint instead.
Prints one JSON line like dltrain's --json: tokens_per_s (steady state: the
first tenth of the steps left out), val_loss, val_bpb, steps.

Usage: gpt_pytorch.py --data FILE.bin [--layers 4 --heads 4 --embd 128
       --context 128 --vocab 256] [--batch 32] [--steps N] [--lr 1e-3]
       [--weight-decay 0.01] [--eval-every N] [--eval-batches K]
       [--threads 2] [--seed 1] [--windows dlrt|torch] [--window-seed S]
       [--clip-norm X] [--init CHECKPOINT]

--init starts from the parameters of a dltrain checkpoint (safetensors under
Hugging Face's GPT-2 names, Conv1D weights in x out): `dltrain --steps 0
--save` writes the initial ones, so both sides can start from the same
draws as well as train on the same windows.
"""
import argparse
import json
import math
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            raise SystemExit(f"{path}: not an llm.c token file (magic {header[0]})")
        data = f.read(2 * header[2])
    return torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.int64) & 0xFFFF


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)).masked_fill(~mask, -1e30)
        a = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(a)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, c, context, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(context, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))


M64 = (1 << 64) - 1


def mix64(z):
    """SplitMix64's finaliser, as dlrt__mix64."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def dlrt_window_offset(seed, epoch, count, index, n, T):
    """dlrt__window_offset of a shuffled window: the first draw of the sample
    generator of (seed, 0, epoch x count + index), uniform in [0, n - T - 1];
    dltrain's training epoch is a round of --eval-every steps, count = its
    samples."""
    state = mix64(seed ^ mix64(0 ^ mix64((epoch * count + index) & M64)))
    return mix64((state * 0xD1342543DE82EF95) & M64) % (n - T)


def load_dlrt_params(model, path):
    """Copies a dltrain checkpoint's parameters into `model` (its Linear
    weights are out x in, the checkpoint's Conv1D ones in x out)."""
    with open(path, "rb") as f:
        raw = f.read()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]

    def tensor(name):
        info = header[name]
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}, not F32")
        begin, end = info["data_offsets"]
        return torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(
            info["shape"])

    ours = {"wte.weight": "transformer.wte.weight", "wpe.weight": "transformer.wpe.weight",
            "ln_f.weight": "transformer.ln_f.weight", "ln_f.bias": "transformer.ln_f.bias"}
    for i in range(len(model.h)):
        h = f"transformer.h.{i}."
        for mine, theirs in (("ln_1", "ln_1"), ("ln_2", "ln_2"), ("c_attn", "attn.c_attn"),
                             ("c_proj", "attn.c_proj"), ("c_fc", "mlp.c_fc"),
                             ("mlp_proj", "mlp.c_proj")):
            for kind in ("weight", "bias"):
                ours[f"h.{i}.{mine}.{kind}"] = h + theirs + "." + kind
    with torch.no_grad():
        for name, q in model.named_parameters():
            t = tensor(ours[name])
            if q.dim() == 2 and not name.startswith(("wte", "wpe")):
                t = t.t()  # Conv1D (in x out) -> Linear (out x in)
            if tuple(t.shape) != tuple(q.shape):
                raise SystemExit(f"{path}: {ours[name]} is {tuple(t.shape)}, the model's "
                                 f"{name} {tuple(q.shape)}")
            q.copy_(t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    for name, v in (("layers", 4), ("heads", 4), ("embd", 128), ("context", 128), ("vocab", 256),
                    ("batch", 32), ("steps", 100), ("eval_every", 0), ("eval_batches", 20),
                    ("threads", 2), ("seed", 1)):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=v)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip-norm", type=float, default=0.0,
                   help="clip the gradients' global L2 norm (dltrain's --clip-norm; 0: off)")
    p.add_argument("--windows", choices=("dlrt", "torch"), default="dlrt")
    p.add_argument("--init", help="start from a dltrain checkpoint's parameters")
    p.add_argument("--window-seed", type=int, default=None,
                   help="dltrain's --seed for --windows dlrt (default: --seed)")
    a = p.parse_args()
    window_seed = a.seed if a.window_seed is None else a.window_seed
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tokens = load_tokens(a.data)
    split = len(tokens) - max(len(tokens) // 10, 1)
    train, val = tokens[:split], tokens[split:]
    T, B = a.context, a.batch
    model = GPT(a.layers, a.heads, a.embd, a.context, a.vocab)
    if a.init:
        load_dlrt_params(model, a.init)
    decay = [q for n, q in model.named_parameters() if n.startswith("h.") and n.endswith("weight") and "ln_" not in n]
    rest = [q for n, q in model.named_parameters() if not (n.startswith("h.") and n.endswith("weight") and "ln_" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=a.lr)
    n_val = min(a.eval_batches * B, (len(val) - 1) // T)

    def evaluate():
        model.eval()
        total = 0.0
        with torch.no_grad():
            for s in range(0, n_val, B):
                rows = range(s, min(s + B, n_val))
                x = torch.stack([val[i * T : i * T + T] for i in rows])
                y = torch.stack([val[i * T + 1 : i * T + T + 1] for i in rows])
                total += float(model(x, y)) * len(rows)
        model.train()
        return total / n_val

    gen = torch.Generator().manual_seed(a.seed)
    warm = a.steps // 10
    start = time.perf_counter()
    warm_start = start
    val_loss = float("nan")
    for step in range(a.steps):
        if step == warm:
            warm_start = time.perf_counter()
        if a.windows == "dlrt":
            # dltrain's rounds end at each evaluation: round = epoch, and the
            # row's index counts from the round's first step.
            every = a.eval_every or a.steps
            off = [dlrt_window_offset(window_seed, step // every, every * B,
                                      (step % every) * B + r, len(train), T) for r in range(B)]
        else:
            off = torch.randint(0, len(train) - T - 1, (B,), generator=gen)
        x = torch.stack([train[o : o + T] for o in off])
        y = torch.stack([train[o + 1 : o + T + 1] for o in off])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_norm)
        opt.step()
        if a.eval_every and (step + 1) % a.eval_every == 0:
            t0 = time.perf_counter()
            val_loss = evaluate()
            warm_start += time.perf_counter() - t0  # evaluation is not training time
            start += time.perf_counter() - t0
    seconds = time.perf_counter() - warm_start
    if not a.eval_every:
        val_loss = evaluate()
    timed = a.steps - warm
    print(json.dumps({"model": "pytorch-gpt", "steps": a.steps, "batch": B, "context": T,
                      "tokens_per_s": timed * B * T / seconds, "final_loss": float(loss),
                      "val_loss": val_loss, "val_bpb": val_loss / math.log(2),
                      "params": sum(q.numel() for q in model.parameters()),
                      "threads": a.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
