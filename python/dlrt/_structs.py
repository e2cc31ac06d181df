"""ctypes mirrors of the C structures of lib/dlrt/*.h, field for field.

Enums are C ints. tests/python-abi (a C program) prints each structure's size
and each field's offset as the compiler lays them out, and the package's
tests compare these mirrors with it, so a field added in C is caught.
"""

import ctypes
from ctypes import (c_char, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t,
                    c_uint8, c_uint16, c_uint64, c_void_p, POINTER)

MAX_DIMS = 8  # DLRT_MAX_DIMS


class Struct(ctypes.Structure):
    """A C structure; as_dict() gives its fields by name (strings decoded)."""

    def as_dict(self):
        out = {}
        for name, ctype in self._fields_:
            value = getattr(self, name)
            if isinstance(value, Struct):
                value = value.as_dict()
            elif isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            out[name] = value
        return out


class DeviceProps(Struct):  # dlrt_device_props
    _fields_ = [("name", c_char * 128), ("vendor", c_char * 64), ("backend", c_char * 16),
                ("driver", c_char * 128), ("spec", c_char * 32), ("index", c_int),
                ("kind", c_int), ("total_memory", c_uint64), ("free_memory", c_uint64),
                ("alignment", c_size_t), ("host_addressable", c_int), ("compute_units", c_int),
                ("threads", c_int)]


class MemCounter(Struct):  # dlrt_mem_counter
    _fields_ = [("current", c_uint64), ("peak", c_uint64)]


class MemStats(Struct):  # dlrt_mem_stats
    _fields_ = [("allocated", MemCounter), ("requested", MemCounter), ("reserved", MemCounter),
                ("active", MemCounter), ("segments", MemCounter), ("alloc_count", c_uint64),
                ("free_count", c_uint64), ("cache_hits", c_uint64), ("driver_allocs", c_uint64),
                ("driver_frees", c_uint64), ("retries", c_uint64), ("oom_count", c_uint64),
                ("cached_free", c_uint64), ("largest_free", c_uint64),
                ("fragmentation", c_double), ("limit", c_uint64)]


class Optimizer(Struct):  # dlrt_optimizer
    _fields_ = [("kind", c_int), ("lr", c_float), ("momentum", c_float), ("nesterov", c_int),
                ("weight_decay", c_float), ("beta1", c_float), ("beta2", c_float),
                ("eps", c_float)]


class GptConfig(Struct):  # dlrt_gpt_config
    _fields_ = [("layers", c_int64), ("heads", c_int64), ("embd", c_int64),
                ("context", c_int64), ("vocab", c_int64), ("dropout", c_float),
                ("attn_dropout", c_float)]


class Augment(Struct):  # dlrt_augment
    _fields_ = [("crop_padding", c_int), ("flip", c_int), ("mean", c_float), ("std", c_float),
                ("erase_p", c_float)]


class SpillConfig(Struct):  # dlrt_spill_config
    _fields_ = [("device_budget", c_uint64), ("host_budget", c_uint64), ("prefetch", c_int),
                ("policy", c_int)]


class LossScaler(Struct):  # dlrt_loss_scaler
    _fields_ = [("enabled", c_int), ("init_scale", c_float), ("growth_factor", c_float),
                ("backoff_factor", c_float), ("growth_interval", c_int)]


class TrainerConfig(Struct):  # dlrt_trainer_config
    _fields_ = [("model", c_char_p), ("gpt", GptConfig), ("batch", c_int64),
                ("opt", Optimizer), ("seed", c_uint64), ("label_smoothing", c_float),
                ("schedule", c_int), ("warmup_steps", c_int64), ("step_size", c_int64),
                ("gamma", c_float), ("total_steps", c_int64), ("clip_norm", c_float),
                ("channels", c_int64), ("workers", c_int), ("prefetch", c_int),
                ("augment", c_int), ("aug", Augment), ("rank", c_int), ("world", c_int),
                ("accum", c_int), ("checkpoint", c_int), ("spill", SpillConfig),
                ("precision", c_int), ("loss_scaler", LossScaler)]


class EpochStats(Struct):  # dlrt_epoch_stats
    _fields_ = [("loss", c_float), ("accuracy", c_float), ("images_per_s", c_double),
                ("seconds", c_double), ("steps", c_int64), ("images", c_int64),
                ("transfer_ms", c_double), ("spilled_bytes", c_uint64),
                ("fetched_bytes", c_uint64), ("disk_bytes", c_uint64),
                ("slice_images", c_int64), ("stall_s", c_double), ("stall_fraction", c_double),
                ("loader_images_per_s", c_double), ("loss_scale", c_float),
                ("skipped_steps", c_int64), ("disk_written_bytes", c_uint64),
                ("tokens_per_s", c_double), ("step_loss", c_float), ("lr", c_float)]


class MemoryPlan(Struct):  # dlrt_memory_plan
    _fields_ = [("batch", c_int64), ("param_count", c_int64), ("params", c_uint64),
                ("grads", c_uint64), ("optimizer_state", c_uint64), ("activations", c_uint64),
                ("activation_peak", c_uint64), ("inputs", c_uint64),
                ("accumulators", c_uint64), ("loader", c_uint64), ("peak", c_uint64),
                ("evaluation_at_peak", c_int), ("spill_least", c_uint64)]


class WhatIf(Struct):  # dlrt_what_if
    _fields_ = [("strategy", c_char_p), ("device_bytes", c_double), ("host_bytes", c_double),
                ("devices", c_double), ("fits_one", c_int)]


class Dataset(Struct):  # dlrt_dataset
    _fields_ = [("count", c_int64), ("channels", c_int64), ("height", c_int64),
                ("width", c_int64), ("classes", c_int), ("image_dtype", c_int),
                ("images", POINTER(c_uint8)), ("labels", POINTER(c_int32)),
                ("source", c_char * 512), ("mapping", c_void_p), ("mapping_bytes", c_size_t),
                ("tokens", POINTER(c_uint16)), ("token_count", c_int64)]


class Tokens(Struct):  # dlrt_tokens
    _fields_ = [("tokens", POINTER(c_uint16)), ("count", c_int64), ("vocab", c_int),
                ("files", c_int), ("source", c_char * 256)]


class ExecInfo(Struct):  # dlrt_exec_info
    _fields_ = [("planned_peak_bytes", c_uint64), ("measured_peak_bytes", c_uint64),
                ("param_bytes", c_uint64), ("state_bytes", c_uint64), ("params", c_int64),
                ("steps", c_int64), ("nodes", c_int)]


class LossScaleState(Struct):  # dlrt_loss_scale_state
    _fields_ = [("scale", c_float), ("skipped_steps", c_int64), ("last_skipped", c_int)]


class Machine(Struct):  # dlrt_machine
    _fields_ = [("name", c_char * 64), ("about", c_char * 160), ("matmul_flops", c_double * 3),
                ("matmul_overhead_s", c_double), ("vector_flops", c_double),
                ("memory_bytes_per_s", c_double), ("attention_flops", c_double),
                ("conv_flops", c_double), ("reduce_bytes_per_s", c_double),
                ("launch_s", c_double), ("link_bytes_per_s", c_double),
                ("link_latency_s", c_double), ("host_bytes_per_s", c_double),
                ("device_memory", c_uint64), ("host_memory", c_uint64),
                ("peak_matmul_flops_bf16", c_double), ("peak_memory_bytes_per_s", c_double),
                ("peer_bytes_per_s", c_double), ("peer_latency_s", c_double),
                ("devices_per_node", c_int), ("network_bytes_per_s", c_double),
                ("network_latency_s", c_double), ("disk_read_bytes_per_s", c_double),
                ("disk_write_bytes_per_s", c_double)]


class SimulatedStep(Struct):  # dlrt_simulated_step
    _fields_ = [("step_s", c_double), ("compute_s", c_double), ("forward_s", c_double),
                ("backward_s", c_double), ("update_s", c_double), ("transfer_s", c_double),
                ("exposed_transfer_s", c_double), ("host_update_s", c_double),
                ("exposed_host_s", c_double), ("host_hidden_fraction", c_double),
                ("host_hidden_s", c_double), ("flops", c_double), ("mfu", c_double),
                ("samples_per_s", c_double), ("tokens_per_s", c_double),
                ("h2d_bytes", c_uint64), ("d2h_bytes", c_uint64), ("copies", c_uint64),
                ("nodes", c_int), ("launches", c_int), ("copies_from", c_char * 96),
                ("params_streamed", c_int), ("ahead", c_int), ("param_peak_bytes", c_uint64),
                ("grad_peak_bytes", c_uint64), ("nodes_measured", c_int),
                ("params_on_disk", c_int), ("state_disk_bytes", c_uint64),
                ("disk_read_bytes", c_uint64), ("disk_written_bytes", c_uint64),
                ("disk_s", c_double), ("disk_wait_s", c_double), ("exposed_disk_s", c_double),
                ("exchange_s", c_double)]


class PlacementPart(Struct):  # dlrt_placement_part
    _fields_ = [("device", c_uint64), ("pinned", c_uint64), ("pageable", c_uint64),
                ("disk", c_uint64), ("how", c_char_p)]


PLACEMENT_PARTS = 5  # DLRT_PARTS_


class Placement(Struct):  # dlrt_placement
    _fields_ = [("fits", c_int), ("rung", c_int), ("strategy", c_char_p), ("policy", c_int),
                ("checkpoint", c_int), ("mem_limit", c_uint64), ("host_limit", c_uint64),
                ("ahead", c_int), ("flags", c_char * 256),
                ("part", PlacementPart * PLACEMENT_PARTS), ("device_need", c_uint64),
                ("host_need", c_uint64), ("pinned_need", c_uint64), ("disk_need", c_uint64),
                ("device_memory", c_uint64), ("host_memory", c_uint64),
                ("device_usable", c_uint64), ("host_usable", c_uint64),
                ("param_count", c_int64), ("why", c_char * 512)]


class Split(Struct):  # dlrt_split
    _fields_ = [("tensor", c_int), ("pipeline", c_int), ("data", c_int), ("zero", c_int),
                ("checkpoint", c_int), ("micro", c_int), ("micro_batch", c_int64),
                ("stage_blocks", c_int), ("stage_params", c_int64),
                ("param_bytes", c_uint64), ("grad_bytes", c_uint64),
                ("optimizer_bytes", c_uint64), ("activation_bytes", c_uint64),
                ("device_bytes", c_uint64), ("host_bytes", c_uint64), ("devices", c_int),
                ("fits", c_int), ("runs_now", c_int), ("flags", c_char * 224),
                ("needs", c_char * 384), ("step_s", c_double), ("compute_s", c_double),
                ("tensor_s", c_double), ("pipeline_s", c_double), ("bubble_s", c_double),
                ("data_s", c_double), ("serial_step_s", c_double), ("tokens_per_s", c_double),
                ("model_tflops", c_double), ("mfu", c_double), ("host_fits", c_int),
                ("exchange_s", c_double)]


class SplitLimits(Struct):  # dlrt_split_limits
    _fields_ = [("device_memory", c_uint64), ("max_devices", c_int), ("max_tensor", c_int),
                ("max_pipeline", c_int), ("max_zero", c_int), ("runs_now_only", c_int),
                ("by_total", c_int)]


# Every mirror, by its C name (what tests/python-abi prints).
C_NAMES = {
    "dlrt_device_props": DeviceProps, "dlrt_mem_counter": MemCounter,
    "dlrt_mem_stats": MemStats, "dlrt_optimizer": Optimizer, "dlrt_gpt_config": GptConfig,
    "dlrt_augment": Augment, "dlrt_spill_config": SpillConfig,
    "dlrt_loss_scaler": LossScaler, "dlrt_trainer_config": TrainerConfig,
    "dlrt_epoch_stats": EpochStats, "dlrt_memory_plan": MemoryPlan, "dlrt_what_if": WhatIf,
    "dlrt_dataset": Dataset, "dlrt_tokens": Tokens, "dlrt_exec_info": ExecInfo,
    "dlrt_loss_scale_state": LossScaleState, "dlrt_machine": Machine,
    "dlrt_simulated_step": SimulatedStep, "dlrt_placement_part": PlacementPart,
    "dlrt_placement": Placement, "dlrt_split": Split,
    "dlrt_split_limits": SplitLimits,
}
