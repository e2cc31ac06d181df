"""The options of dlrt.plan and dlrt.Trainer, with dltrain's defaults and
names, made into a dlrt_trainer_config as dltrain makes it (tools/dltrain.c),
so that the same options give the same run."""

import ctypes
import math

from . import _structs as S
from ._lib import lib, text
from .device import parse_size
from .errors import check

PRECISIONS = {"fp32": 0, "f32": 0, "fp16": 1, "f16": 1, "bf16": 2}  # dlrt_dtype
PRECISION_NAMES = {0: "fp32", 1: "fp16", 2: "bf16"}
# dlrt_offload_policy
OFFLOAD = {"none": 0, "activations": 1, "optimizer": 2, "all": 3, "params": 4}
CHECKPOINT_SQRT, CHECKPOINT_AUTO, CHECKPOINT_MARKS = -1, -2, -3
SCHEDULES = {"constant": 0, "step": 1, "cosine": 2}  # dlrt_lr_schedule
GPT_SIZES = ("layers", "heads", "embd", "context", "vocab", "dropout", "attn_dropout")

# dltrain's defaults (tools/dltrain-options.c).
DEFAULTS = dict(model="mlp", data=None, device=None, batch=None, optimizer="adam", lr=None,
                momentum=None, weight_decay=None, label_smoothing=0.0, schedule="constant",
                warmup=0, clip_norm=0.0, seed=1, threads=None, limit=0, workers=2,
                prefetch=2, augment=False, crop_pad=None, flip=False, erase=0.0,
                normalize=None, mmap=False, accum=1, checkpoint=None, mem_limit=None,
                host_limit=None, offload="none", spill_prefetch=4, precision="fp32",
                loss_scale=None, epochs=1, steps=None, eval_every=None, eval_batches=None,
                layers=0, heads=0, embd=0, context=0, vocab=0, dropout=0.0,
                attn_dropout=0.0)


def gpt_preset(name):
    """The GPT preset `name` as a GptConfig, or None when it is not one."""
    cfg = S.GptConfig()
    return cfg if lib.dlrt_gpt_preset(str(name).encode(), ctypes.byref(cfg)) == 0 else None


def options(given):
    """dltrain's options: the defaults, then `given`; checked, GPT-aware."""
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        raise TypeError("unknown option%s: %s" % ("s" if len(unknown) > 1 else "",
                                                  ", ".join(sorted(unknown))))
    o = dict(DEFAULTS)
    o.update({k: v for k, v in given.items() if v is not None})
    o["model"] = str(o["model"])
    preset = gpt_preset(o["model"])
    o["gpt_model"] = preset is not None
    if preset is not None:
        o["batch"] = o["batch"] or 32
        o["steps"] = 1000 if o["steps"] is None else o["steps"]
        o["eval_every"] = o["eval_every"] or min(o["steps"], 250) or 1
        o["eval_batches"] = o["eval_batches"] or 20
        sizes = S.GptConfig(**{k: o[k] for k in GPT_SIZES})
        lib.dlrt_gpt_override(ctypes.byref(preset), ctypes.byref(sizes))
        check(lib.dlrt_gpt_check(ctypes.byref(preset)))
        o["gpt"] = sizes
        o["gpt_resolved"] = preset
    else:
        bad = [k for k in GPT_SIZES + ("steps", "eval_every", "eval_batches")
               if given.get(k) not in (None, 0, 0.0)]
        if bad:
            raise ValueError("%s: for GPT models (gpt-mini, gpt2, ...), not %s"
                             % (", ".join(bad), o["model"]))
        o["batch"] = o["batch"] or 64
        o["gpt"] = S.GptConfig()
    if int(o["batch"]) < 1 or int(o["accum"]) < 1:
        raise ValueError("batch and accum are >= 1")
    if o["momentum"] is not None and o["optimizer"] != "sgd":
        raise ValueError("momentum applies to optimizer='sgd' only")
    return o


def _optimizer(o):
    kinds = {text(lib.dlrt_optimizer_name(k)): k for k in range(3)}
    if o["optimizer"] not in kinds:
        raise ValueError("optimizer %r: one of %s" % (o["optimizer"], ", ".join(kinds)))
    opt = lib.dlrt_optimizer_defaults(kinds[o["optimizer"]])
    for key in ("lr", "momentum", "weight_decay"):
        if o[key] is not None:
            value = float(o[key])
            if not math.isfinite(value) or value < 0:
                raise ValueError("%s %r: a finite value >= 0" % (key, o[key]))
            setattr(opt, key, value)
    return opt


def _schedule(cfg, text_):
    name, _, rest = str(text_).partition(":")
    if name not in SCHEDULES or (name == "step") != bool(rest):
        raise ValueError("schedule %r: constant, cosine or step:N[:GAMMA]" % (text_,))
    cfg.schedule = SCHEDULES[name]
    if name == "step":
        n, _, gamma = rest.partition(":")
        cfg.step_size, cfg.gamma = int(n), float(gamma) if gamma else 0.1


def checkpoint_code(value):
    """none | sqrt | blocks | auto | every:N | N as dlrt's checkpoint int."""
    if value in (None, 0, "none"):
        return 0
    if isinstance(value, int):
        return value
    named = {"sqrt": CHECKPOINT_SQRT, "auto": CHECKPOINT_AUTO, "blocks": CHECKPOINT_MARKS}
    if value in named:
        return named[value]
    if str(value).startswith("every:"):
        return int(str(value)[6:])
    raise ValueError("checkpoint %r: none, sqrt, blocks, every:N or auto" % (value,))


def _loss_scale(value):
    ls = S.LossScaler()
    if value in (None, "dynamic"):
        ls.enabled = 0 if value is None else 1
    elif value == "off":
        ls.enabled = -1
    else:
        fields = str(value).split(":")
        ls.enabled, ls.init_scale = 1, float(fields[0])
        if len(fields) > 1:
            ls.growth_interval = int(fields[1])
        if len(fields) > 2:
            ls.growth_factor = float(fields[2])
        if len(fields) > 3:
            ls.backoff_factor = float(fields[3])
    return ls


def trainer_config(o, train, device_total):
    """The dlrt_trainer_config dltrain makes from options `o` for the training
    split `train` (a Dataset); the config keeps its model string alive."""
    cfg = S.TrainerConfig()
    cfg._model = o["model"].encode()  # the char * points into it
    cfg.model = cfg._model
    cfg.gpt = o["gpt"]
    cfg.batch = int(o["batch"])
    cfg.opt = _optimizer(o)
    cfg.seed = int(o["seed"])
    cfg.label_smoothing = float(o["label_smoothing"])
    _schedule(cfg, o["schedule"])
    cfg.warmup_steps = int(o["warmup"])
    cfg.accum = int(o["accum"])
    cfg.total_steps = (int(o["steps"]) if o["gpt_model"] else
                       int(o["epochs"]) * (train.count // cfg.batch // cfg.accum))
    cfg.clip_norm = float(o["clip_norm"])
    cfg.channels = train.channels
    cfg.workers, cfg.prefetch = int(o["workers"]), int(o["prefetch"])
    aug = S.Augment()
    if o["augment"]:
        aug.crop_padding, aug.flip = 2, 1
    if o["crop_pad"] is not None:
        aug.crop_padding = int(o["crop_pad"])
    if o["flip"]:
        aug.flip = 1
    aug.erase_p = float(o["erase"])
    if o["normalize"] is not None:
        aug.mean, aug.std = (float(x) for x in o["normalize"])
    cfg.augment = int(bool(o["augment"] or o["crop_pad"] is not None or o["flip"] or
                           aug.erase_p > 0))
    cfg.aug = aug
    cfg.rank, cfg.world = 0, 1  # one process, as dltrain outside mpirun
    cfg.checkpoint = checkpoint_code(o["checkpoint"])
    spill = S.SpillConfig(prefetch=int(o["spill_prefetch"]), policy=OFFLOAD[o["offload"]])
    if o["mem_limit"] is not None:
        spill.device_budget = parse_size(o["mem_limit"], device_total)
    if o["host_limit"] is not None:
        spill.host_budget = parse_size(o["host_limit"])
    cfg.spill = spill
    if o["precision"] not in PRECISIONS:
        raise ValueError("precision %r: fp32, fp16 or bf16" % (o["precision"],))
    cfg.precision = PRECISIONS[o["precision"]]
    cfg.loss_scaler = _loss_scale(o["loss_scale"])
    return cfg
