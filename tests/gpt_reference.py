#!/usr/bin/env python3
"""gpt_reference.py — GPT-2 in PyTorch, written out here, checked against
what tests/gpt-dump wrote (in the manner of llm.c's test_gpt2.c): from the
same initial parameters and the same batch, the logits (within 1e-4 of the
largest), every parameter's gradient (within 1e-3 of its largest value) and
the losses of 10 AdamW steps (within 1e-4 relative). Prints TAP points.

Usage: gpt_reference.py DUMP LABEL [--loose]
  --loose: for fp16 / bf16 runs, against fp32 PyTorch (the reference for
  both: torch.autocast on the CPU knows bf16 only, and rounds elsewhere than
  dlrt does): logits within 1e-2 of the largest, gradients within 3e-2 of
  their largest, losses within 1e-2 relative (measured: fp16 3e-4, 8e-4,
  1e-3; bf16 3e-3, 8e-3, 2.4e-3).
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

LAYERS, HEADS, EMBD, CONTEXT, VOCAB = 2, 4, 32, 16, 64
LR, BETAS, EPS, DECAY, STEPS = 1e-2, (0.9, 0.999), 1e-8, 0.1, 10

DTYPES = {"F32": (torch.float32, 4), "I32": (torch.int32, 4)}


def load_safetensors(path):
    """The tensors of a safetensors file (8-byte little-endian header size,
    the JSON header, the data)."""
    with open(path, "rb") as f:
        raw = f.read()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, _ = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def forward(p, tokens, targets):
    """GPT-2: Conv1D weights are in x out (Hugging Face's layout)."""
    B, T = tokens.shape
    C, D = EMBD, EMBD // HEADS
    x = p["transformer.wte.weight"][tokens.long()] + p["transformer.wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(LAYERS):
        h = f"transformer.h.{i}."
        y = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5)
        qkv = y @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, HEADS, D).transpose(1, 2)
        k = k.view(B, T, HEADS, D).transpose(1, 2)
        v = v.view(B, T, HEADS, D).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        a = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + a @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        y = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        m = F.gelu(y @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5)
    logits = (x @ p["transformer.wte.weight"].t()).reshape(B * T, VOCAB)
    return logits, F.cross_entropy(logits, targets.long())


def decayed(name):
    """GPT-2 recipes' AdamW: the blocks' matrices only."""
    return name.startswith("transformer.h.") and name.endswith(".weight") and (
        "c_attn" in name or "c_proj" in name or "c_fc" in name)


def main():
    dump, label = sys.argv[1], sys.argv[2]
    loose = "--loose" in sys.argv
    tol_logits, tol_grad, tol_loss = (1e-2, 3e-2, 1e-2) if loose else (1e-4, 1e-3, 1e-4)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    d = load_safetensors(dump)
    names = sorted(k[len("param."):] for k in d if k.startswith("param."))
    params = {n: d["param." + n].clone().requires_grad_(True) for n in names}
    tokens, targets = d["tokens"], d["targets"]
    tests = []

    def check(ok, what):
        tests.append((bool(ok), what))

    expected = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                "transformer.ln_f.bias"}
    for i in range(LAYERS):
        for s in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            expected |= {f"transformer.h.{i}.{s}.weight", f"transformer.h.{i}.{s}.bias"}
    check(set(names) == expected,
          f"{label}: the parameters are GPT-2's, under Hugging Face's names ({len(names)})")
    check(tuple(params["transformer.h.0.attn.c_attn.weight"].shape) == (EMBD, 3 * EMBD),
          f"{label}: c_attn.weight is in x out (Conv1D's layout)")
    wte_std = float(params["transformer.wte.weight"].std())
    proj_std = float(params["transformer.h.0.attn.c_proj.weight"].std())
    check(abs(wte_std - 0.02) < 0.002 and abs(proj_std - 0.02 / math.sqrt(2 * LAYERS)) < 0.002,
          f"{label}: initialised as GPT-2: std {wte_std:.4f} (0.02), residual projections "
          f"{proj_std:.4f} (0.02 / sqrt(2 N) = {0.02 / math.sqrt(2 * LAYERS):.4f})")

    logits, loss = forward(params, tokens, targets)
    diff = float((logits.detach() - d["logits"]).abs().max())
    scale = float(logits.detach().abs().max())
    check(diff <= tol_logits * scale,
          f"{label}: logits agree: max |difference| {diff:.3g} <= {tol_logits:g} x {scale:.3g}")
    loss.backward()
    worst, worst_name = 0.0, ""
    for n in names:
        ref = params[n].grad
        err = float((ref - d["grad." + n]).abs().max()) / max(float(ref.abs().max()), 1e-12)
        if err > worst:
            worst, worst_name = err, n
    check(worst <= tol_grad, f"{label}: every gradient agrees: worst {worst:.3g} of its largest "
          f"value ({worst_name}) <= {tol_grad:g}")

    # 10 AdamW steps on the same batch from the same start.
    fresh = {n: d["param." + n].clone().requires_grad_(True) for n in names}
    opt = torch.optim.AdamW(
        [{"params": [fresh[n] for n in names if decayed(n)], "weight_decay": DECAY},
         {"params": [fresh[n] for n in names if not decayed(n)], "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        _, l = forward(fresh, tokens, targets)
        l.backward()
        opt.step()
        losses.append(float(l))
    got = d["losses"].tolist()
    rel = max(abs(a - b) / abs(a) for a, b in zip(losses, got))
    check(rel <= tol_loss, f"{label}: the losses of {STEPS} AdamW steps agree: worst relative "
          f"difference {rel:.3g} <= {tol_loss:g} (torch {losses[0]:.5f} .. {losses[-1]:.5f}, "
          f"dlrt {got[0]:.5f} .. {got[-1]:.5f})")
    check(losses[-1] < losses[0] - 0.1, f"{label}: and the loss falls ({losses[-1]:.4f} < "
          f"{losses[0]:.4f} - 0.1)")
    for ok, what in tests:
        print(("ok - " if ok else "not ok - ") + what)


if __name__ == "__main__":
    main()
