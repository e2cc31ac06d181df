#!/usr/bin/env python3
"""host_adam_torch.py — torch.optim.Adam on the CPU over the tensors of
bench/host-adam.c (GPT-2's shapes), the peer it is compared with: one JSON
line with the median step in ms and the parameter updates per second.

Usage: host_adam_torch.py [--layers 4] [--embd 768] [--vocab 50257]
       [--steps 5] [--threads 2] [--foreach 0|1]
"""
import argparse
import json
import time

import torch


def main():
    a = argparse.ArgumentParser()
    for name, v in (("layers", 4), ("embd", 768), ("vocab", 50257), ("steps", 5),
                    ("threads", 2), ("foreach", 0)):
        a.add_argument("--" + name, type=int, default=v)
    a = a.parse_args()
    torch.set_num_threads(a.threads)
    C = a.embd
    sizes = [a.vocab * C, 1024 * C]
    for _ in range(a.layers):
        sizes += [C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C]
    sizes += [C, C]
    gen = torch.Generator().manual_seed(7)
    params = [torch.nn.Parameter(torch.rand(n, generator=gen) * 2 - 1) for n in sizes]
    for q in params:
        q.grad = torch.rand(q.numel(), generator=gen) * 2 - 1
    opt = torch.optim.Adam(params, lr=1e-3, foreach=bool(a.foreach))
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.step()
        if step:
            times.append(1e3 * (time.perf_counter() - t0))
    times.sort()
    k = len(times)
    median = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
    total = sum(sizes)
    print(json.dumps({"impl": "torch.optim.Adam" + (" foreach" if a.foreach else ""),
                      "params": total, "tensors": len(sizes), "threads": a.threads,
                      "median_ms": median, "updates_per_s": total / (median * 1e-3),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
