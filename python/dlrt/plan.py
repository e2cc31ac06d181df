"""dlrt.plan: the memory planner, as `dltrain --plan --json` reports it.

The figures come from the library's planner calls (dlrt_plan_memory,
dlrt_plan_max_batch, dlrt_plan_what_if), combined as tools/dltrain-plan.c
combines them, so the dict equals that command's JSON for the same options
(python/tests/test_plan.py checks it against the tool).
"""

import ctypes

from . import _config as C
from . import _structs as S
from . import data as _data
from ._lib import lib, text
from .device import device as _open_device, parse_size
from .errors import check


def gpt_presets():
    """The GPT presets' names ("gpt-mini", "gpt2", ..., "gpt3-175b")."""
    out, i = [], 0
    while True:
        name = lib.dlrt_gpt_preset_name(i)
        if not name:
            return out
        out.append(text(name))
        i += 1


def parameter_count(value):
    """175e9, "175B", "7B", "350M", "1.5T" as a number of parameters."""
    if isinstance(value, (int, float)):
        return float(value)
    s = str(value)
    unit = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(s[-1:], 1)
    count = float(s[:-1] if unit != 1 else s) * unit
    if not 1 <= count <= 1e18:
        raise ValueError("what_if needs from 1 to 1e18 parameters, not %r" % (value,))
    return count


def _plan(cfg, d, out):
    check(lib.dlrt_plan_memory(ctypes.byref(cfg), d.channels, d.height, d.width, d.classes,
                               ctypes.byref(out)))
    return out


def _max_batch(cfg, d, memory, **changes):
    c = S.TrainerConfig.from_buffer_copy(cfg)
    for key, value in changes.items():
        if key == "policy":
            c.spill.policy = value
        else:
            setattr(c, key, value)
    out = S.MemoryPlan()
    check(lib.dlrt_plan_max_batch(ctypes.byref(c), d.channels, d.height, d.width, d.classes,
                                  memory, ctypes.byref(out)))
    return out.batch


def _transformer(cfg, d):
    """The activations one block keeps (the plans of one and two layers
    apart) and the peaks, plain and checkpointed, in fp32 and in 16 bits."""
    acts = []
    for layers in (1, 2):
        c = S.TrainerConfig.from_buffer_copy(cfg)
        c.gpt.layers, c.checkpoint = layers, 0
        acts.append(_plan(c, d, S.MemoryPlan()).activation_peak)
    peaks = {}
    for ck in (0, 1):
        for low in (0, 1):
            c = S.TrainerConfig.from_buffer_copy(cfg)
            c.precision = 2 if low else 0  # DLRT_BF16 : DLRT_F32
            c.checkpoint = C.CHECKPOINT_SQRT if ck else 0
            peaks[low, ck] = _plan(c, d, S.MemoryPlan()).peak
    return {"context": d.width, "block_activation_bytes": max(acts[1] - acts[0], 0),
            "peak_fp32": peaks[0, 0], "peak_fp32_checkpointed": peaks[0, 1],
            "peak_16bit": peaks[1, 0], "peak_16bit_checkpointed": peaks[1, 1]}


def _g(x, digits):
    """x as C's %.<digits>g prints it, read back (dltrain's JSON numbers)."""
    return float(format(x, ".%dg" % digits))


PLACEMENT_KEYS = ("master_params", "compute_copies", "gradients", "optimizer_state",
                  "activations")


def _placement(cfg, d, device_memory, host_memory, machine, prefetch_given):
    """dltrain --plan --json's "placement" object (tools/dltrain-plan.c):
    dlrt_plan_placement, and with a machine the placed step on it."""
    c = S.TrainerConfig.from_buffer_copy(cfg)
    if not prefetch_given:
        c.spill.prefetch = 0  # the placement's own look-ahead
    pl = S.Placement()
    check(lib.dlrt_plan_placement(ctypes.byref(c), d.channels, d.height, d.width, d.classes,
                                  device_memory, host_memory,
                                  ctypes.byref(machine) if machine is not None else None,
                                  ctypes.byref(pl)))
    out = {"fits": bool(pl.fits), "rung": pl.rung, "strategy": text(pl.strategy),
           "flags": text(pl.flags)}
    for key in ("device_memory", "host_memory", "device_usable", "host_usable", "device_need",
                "host_need", "pinned_need", "disk_need", "mem_limit", "host_limit", "ahead"):
        out[key] = getattr(pl, key)
    out["params"], out["why_not_cheaper"] = pl.param_count, text(pl.why)
    out["parts"] = {key: {"device": part.device, "pinned_host": part.pinned,
                          "pageable_host": part.pageable, "disk": part.disk,
                          "how": text(part.how) if part.how else ""}
                    for key, part in zip(PLACEMENT_KEYS, pl.part)}
    if machine is not None and pl.fits:
        placed = S.TrainerConfig.from_buffer_copy(cfg)
        lib.dlrt_placement_apply(ctypes.byref(pl), ctypes.byref(placed))
        placed.spill.device_budget = 0  # the host budget stays: the state's split on disk
        st = S.SimulatedStep()
        check(lib.dlrt_simulate_step(ctypes.byref(placed), d.channels, d.height, d.width,
                                     d.classes, ctypes.byref(machine), None, ctypes.byref(st)))
        out["simulate"] = {"machine": text(machine.name)}
        for key in ("step_s", "compute_s", "exposed_transfer_s", "host_update_s",
                    "exposed_host_s"):
            out["simulate"][key] = _g(getattr(st, key), 9)
        out["simulate"]["host_hidden_fraction"] = _g(st.host_hidden_fraction, 6)
        for key in ("tokens_per_s", "samples_per_s"):
            out["simulate"][key] = _g(getattr(st, key), 9)
        out["simulate"].update(_disk(st))
    return out


def _disk(st):
    """The optimizer state on disk of a simulated step, and the trainer's
    exchange with the host that closes it, as dltrain prints them."""
    out = {key: getattr(st, key) for key in ("params_on_disk", "state_disk_bytes",
                                             "disk_read_bytes", "disk_written_bytes")}
    out.update({key: _g(getattr(st, key), 9) for key in ("disk_s", "disk_wait_s",
                                                          "exposed_disk_s", "exchange_s")})
    return out


def _simulate(spec, cfg, d, dev, model, device_memory, host_memory, prefetch_given):
    """dltrain --plan --simulate SPEC --json's "simulate" object (with its
    "placement" beside it where the model does not fit the machine, or
    device_memory is given)."""
    m = S.Machine()
    check(lib.dlrt_machine_get(str(spec).encode(), dev._handle, ctypes.byref(m)))
    p = _plan(cfg, d, S.MemoryPlan())
    st = S.SimulatedStep()
    check(lib.dlrt_simulate_step(ctypes.byref(cfg), d.channels, d.height, d.width, d.classes,
                                 ctypes.byref(m), dev._handle, ctypes.byref(st)))
    # What has to be on the device: the plan's peak, or with the optimizer
    # on the host its parameters' and gradients' share without the state;
    # streamed, the peak without the states plus what the stream holds.
    offload = cfg.spill.policy in (C.OFFLOAD["optimizer"], C.OFFLOAD["all"])
    states = p.params + p.grads + p.optimizer_state
    if cfg.spill.policy == C.OFFLOAD["params"]:
        need = max(p.peak - states, 0) + st.param_peak_bytes + st.grad_peak_bytes
    else:
        need = (cfg.spill.device_budget or (p.peak - p.optimizer_state if offload else p.peak))
    fits = need <= m.device_memory
    out = {"machine": text(m.name), "about": text(m.about), "model": model,
           "batch": cfg.batch, "precision": C.PRECISION_NAMES[cfg.precision],
           "params": p.param_count, "planned_peak_bytes": p.peak,
           "device_memory": m.device_memory, "fits_device_memory": fits,
           "copies_from": text(st.copies_from), "nodes_measured": bool(st.nodes_measured)}
    for key in ("params_streamed", "ahead", "param_peak_bytes", "grad_peak_bytes"):
        out[key] = getattr(st, key)
    for key in ("step_s", "compute_s", "forward_s", "backward_s", "update_s", "transfer_s",
                "exposed_transfer_s", "host_update_s", "exposed_host_s"):
        out[key] = _g(getattr(st, key), 9)
    out["host_hidden_fraction"] = _g(st.host_hidden_fraction, 6)
    for key in ("host_hidden_s", "samples_per_s", "tokens_per_s", "flops"):
        out[key] = _g(getattr(st, key), 9)
    out["mfu"] = _g(st.mfu, 6)
    for key in ("h2d_bytes", "d2h_bytes", "copies", "nodes", "launches"):
        out[key] = getattr(st, key)
    f = {"matmul_fp32": m.matmul_flops[0], "matmul_fp16": m.matmul_flops[1],
         "matmul_bf16": m.matmul_flops[2], "matmul_overhead_s": m.matmul_overhead_s,
         "vector_fp32": m.vector_flops, "memory_bandwidth": m.memory_bytes_per_s,
         "launch_s": m.launch_s, "link": m.link_bytes_per_s,
         "link_latency_s": m.link_latency_s, "host_bandwidth": m.host_bytes_per_s}
    out["figures"] = {k: _g(v, 6) for k, v in f.items()}
    out["figures"]["host_memory"] = m.host_memory
    out["figures"].update({"attention": _g(m.attention_flops, 6), "conv": _g(m.conv_flops, 6),
                           "reduce_bandwidth": _g(m.reduce_bytes_per_s, 6),
                           "device_memory": m.device_memory,
                           "disk_read": _g(m.disk_read_bytes_per_s, 6),
                           "disk_write": _g(m.disk_write_bytes_per_s, 6)})
    out.update(_disk(st))
    result = {"simulate": out}
    if device_memory or not fits:
        result["placement"] = _placement(cfg, d, device_memory or m.device_memory,
                                         host_memory or m.host_memory, m, prefetch_given)
    return result


def plan(model="mlp", batch=None, precision="fp32", device_memory=None, device=None,
         what_if=None, simulate=None, splits=5, max_devices=0, host_memory=None, **options):
    """What a training run needs at its peak, the largest batch each strategy
    fits, the what-if table (and a transformer's own lines): the dict of
    `dltrain --plan --json` with the same options, keyed as it is.

    device_memory: the device size to plan for ("40G", bytes); default the
    device's budget, else its memory. what_if: a parameter count (175e9,
    "7B"); a GPT's own count by default. simulate: a machine ("h200-pcie5"
    and the other presets, a file of figures, or "this", measured on
    `device`): instead, the predicted training step on it, the dict of
    `dltrain --plan --simulate MACHINE --json` ({"simulate": {...}}; with
    mem_limit the copies of a dry run on `device`, with offload="optimizer"
    the host optimizer's). splits, max_devices: a GPT's best splits over
    devices of device_memory ("splits": dltrain's --splits and
    --max-devices). host_memory: the host to place the model on ("placement":
    dltrain's --host-memory; default this machine's RAM, with simulate the
    machine's). The other options are dltrain's (data, accum,
    optimizer, checkpoint, layers, context, mem_limit, offload, ...)."""
    o = C.options(dict(options, model=model, batch=batch, precision=precision, device=device))
    dev = _open_device(o["device"])
    props = dev.properties()
    limit = dev.memory_limit
    memory = (parse_size(device_memory) if device_memory is not None
              else limit or props["total_memory"])
    if memory <= 0:
        raise ValueError("device_memory needs a size such as 40G or 512M")
    if o["gpt_model"]:
        gpt = o["gpt_resolved"]
        sets = (_data.plan_windows(gpt, o["batch"]) if o["data"] is None else
                _data.tokens(o["data"], gpt.context, o["batch"], o["eval_every"],
                             o["eval_batches"], o["accum"]))
    else:
        sets = _data.images(o["data"], o["seed"], o["limit"], o["mmap"])
    d = sets.train
    cfg = C.trainer_config(o, d, props["total_memory"])
    host = parse_size(host_memory) if host_memory is not None else 0
    prefetch_given = "spill_prefetch" in options
    if simulate is not None:
        return _simulate(simulate, cfg, d, dev, o["model"],
                         parse_size(device_memory) if device_memory is not None else 0, host,
                         prefetch_given)
    p = _plan(cfg, d, S.MemoryPlan())
    # Each row is one technique over the plain run (tools/dltrain-plan.c):
    # the run's own accum, checkpoint and offload left out.
    plain = dict(accum=1, checkpoint=0, policy=C.OFFLOAD["none"])
    fits = {
        "plain": _max_batch(cfg, d, memory, **plain),
        "accumulation": _max_batch(cfg, d, memory, **dict(plain, accum=2)),  # any K > 1
        "checkpoint_sqrt": _max_batch(cfg, d, memory, **dict(plain, checkpoint=C.CHECKPOINT_SQRT)),
        "offload": _max_batch(cfg, d, memory, **dict(plain, policy=C.OFFLOAD["optimizer"])),
        "mixed_precision": _max_batch(cfg, d, memory, precision=1, **plain),  # bf16: the same
    }
    count = (parameter_count(what_if) if what_if is not None
             else float(p.param_count) if o["gpt_model"] else 0)
    rows = []
    if count > 0:
        table, n = (S.WhatIf * 8)(), ctypes.c_int()
        check(lib.dlrt_plan_what_if(count, memory, table, ctypes.byref(n)))
        rows = [{"strategy": text(r.strategy), "device_bytes": int(format(r.device_bytes, ".0f")),
                 "host_bytes": int(format(r.host_bytes, ".0f")),
                 "devices": int(format(r.devices, ".0f")), "fits_one_device": bool(r.fits_one)}
                for r in table[:n.value]]
    out = {
        "plan": {"model": o["model"], "device": dev.spec, "device_memory": memory,
                 "batch": p.batch, "accum": int(o["accum"]), "params": p.param_count,
                 "param_bytes": p.params, "grad_bytes": p.grads,
                 "optimizer_state_bytes": p.optimizer_state, "activation_bytes": p.activations,
                 "activation_peak_bytes": p.activation_peak, "input_bytes": p.inputs, "accumulator_bytes": p.accumulators,
                 "loader_bytes": p.loader, "planned_peak_bytes": p.peak,
                 "peak_is_evaluation": bool(p.evaluation_at_peak)},
        "max_batch": fits,
        "precision": C.PRECISION_NAMES[cfg.precision],
        "spill_least_bytes": p.spill_least,
        # dltrain prints it with %.0f: the same rounding here.
        "folk_rule_batch": int(format(memory / (4.0 * p.param_count), ".0f")),
        "what_if": rows,
        "placement": _placement(cfg, d, memory, host, None, prefetch_given),
    }
    if o["gpt_model"]:
        out["transformer"] = _transformer(cfg, d)
        out["splits"] = _splits(cfg, d, memory, o["model"], splits, max_devices)
    return out


def _split_dict(s):
    keys = ("devices", "tensor", "pipeline", "data", "zero")
    out = {k: getattr(s, k) for k in keys}
    out["checkpoint"] = bool(s.checkpoint)
    out["micro_batches"], out["micro_batch"] = s.micro, s.micro_batch
    for k in ("stage_blocks", "stage_params", "param_bytes", "grad_bytes", "optimizer_bytes",
              "activation_bytes", "device_bytes", "host_bytes"):
        out[k] = getattr(s, k)
    out["fits"], out["runs_now"] = bool(s.fits), bool(s.runs_now)
    out["flags"], out["needs"] = text(s.flags), text(s.needs)
    return out


def _splits(cfg, d, memory, model, count, max_devices):
    """A GPT's best splits over devices of `memory`, as dltrain --plan's
    "splits" (tools/dltrain-split.c): dlrt_split_search, fewest devices
    first, and the best that this version runs when none of those shown does."""
    limits = S.SplitLimits(device_memory=memory, max_devices=max_devices, max_zero=3)
    want = max(count, 1)
    best, n, total, fitting = (S.Split * want)(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    check(lib.dlrt_split_search(ctypes.byref(cfg), d.width, ctypes.byref(limits), None, best,
                                want, ctypes.byref(n), ctypes.byref(total),
                                ctypes.byref(fitting)))
    shown = [best[i] for i in range(min(n.value, count))]
    out = {"model": model, "batch": cfg.batch, "context": d.width,
           "precision": C.PRECISION_NAMES[cfg.precision], "device_memory": memory,
           "max_devices": max_devices or 4096, "enumerated": total.value,
           "fitting": fitting.value, "ranked_by": "devices", "machine": None,
           "best": [_split_dict(s) for s in shown]}
    if any(s.runs_now and s.fits for s in shown):
        out["best_runs_now"] = "above"
    elif count > 0:
        limits.runs_now_only = 1
        one, m = S.Split(), ctypes.c_int()
        check(lib.dlrt_split_search(ctypes.byref(cfg), d.width, ctypes.byref(limits), None,
                                    ctypes.byref(one), 1, ctypes.byref(m), None, None))
        out["best_runs_now"] = _split_dict(one) if m.value and one.fits else None
    else:
        out["best_runs_now"] = None
    return out
