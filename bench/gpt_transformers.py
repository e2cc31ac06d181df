#!/usr/bin/env python3
"""gpt_transformers.py — a dlrt GPT checkpoint in Hugging Face's
transformers: the safetensors file dltrain --save wrote is loaded into
transformers.GPT2LMHeadModel with load_state_dict (its names and layouts
are GPT-2's), and its validation loss over the windows dltrain evaluates
(the first K x batch consecutive windows of the last tenth of the tokens)
is compared with dltrain's. Prints one JSON line; exits 1 when the two
differ by more than --tolerance (default 1e-4).

Usage: gpt_transformers.py CHECKPOINT TOKENS.bin DLTRAIN_VAL_LOSS
       --layers N --heads N --embd N --context T --vocab V
       --batch B --eval-batches K [--tolerance 1e-4]
Needs pip's transformers (CPU) beside Debian's python3-torch.
"""
import argparse
import json
import struct
import sys

import torch
import torch.nn.functional as F
import transformers


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(
            info["shape"]).clone()
    return out


def load_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520:
            raise SystemExit(f"{path}: not an llm.c token file")
        data = f.read(2 * header[2])
    return torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.int64) & 0xFFFF


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("tokens")
    p.add_argument("dlrt_val_loss", type=float)
    for name in ("layers", "heads", "embd", "context", "vocab", "batch", "eval_batches"):
        p.add_argument("--" + name.replace("_", "-"), type=int, required=True)
    p.add_argument("--tolerance", type=float, default=1e-4)
    a = p.parse_args()
    torch.set_num_threads(2)
    state = {k: v for k, v in load_safetensors(a.checkpoint).items() if k.startswith("transformer.")}
    config = transformers.GPT2Config(
        vocab_size=a.vocab, n_positions=a.context, n_embd=a.embd, n_layer=a.layers,
        n_head=a.heads, activation_function="gelu_new", layer_norm_epsilon=1e-5,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).eval()
    state["lm_head.weight"] = state["transformer.wte.weight"]  # tied
    result = model.load_state_dict(state, strict=False)
    # Only the causal-mask buffers some versions register may be absent.
    missing = [k for k in result.missing_keys if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    if missing or result.unexpected_keys:
        raise SystemExit(f"load_state_dict: missing {missing}, unexpected {result.unexpected_keys}")

    tokens = load_tokens(a.tokens)
    held = max(len(tokens) // 10, 1)
    val = tokens[len(tokens) - held :]
    T, B = a.context, a.batch
    n = min(a.eval_batches * B, (len(val) - 1) // T)
    total = 0.0
    with torch.no_grad():
        for s in range(0, n, B):
            rows = range(s, min(s + B, n))
            x = torch.stack([val[i * T : i * T + T] for i in rows])
            y = torch.stack([val[i * T + 1 : i * T + T + 1] for i in rows])
            logits = model(x).logits
            total += float(F.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1))) * len(rows)
    loss = total / n
    diff = abs(loss - a.dlrt_val_loss)
    print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                      "windows": n, "transformers_val_loss": loss, "dlrt_val_loss": a.dlrt_val_loss,
                      "difference": diff, "tolerance": a.tolerance, "agree": diff <= a.tolerance}))
    sys.exit(0 if diff <= a.tolerance else 1)


if __name__ == "__main__":
    main()
