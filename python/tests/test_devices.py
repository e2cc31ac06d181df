"""Devices, their memory statistics, summary and budget."""

import dlrt
from conftest import live_allocations


def test_devices_match_dlinfo(dlinfo):
    info = dlinfo("--json")
    mine = {d.spec: d.properties() for d in dlrt.devices()}
    assert sorted(mine) == sorted(d["spec"] for d in info["devices"])
    for d in info["devices"]:
        p = mine[d["spec"]]
        for key in ("backend", "name", "vendor", "kind", "driver", "total_memory",
                    "alignment", "host_addressable", "compute_units"):
            assert p[key] == d[key], "%s %s: %r vs dlinfo's %r" % (d["spec"], key, p[key], d[key])
    started = {b["name"]: b["available"] for b in info["backends"]}
    assert dlrt.backends() == started


def test_device_by_spec_and_auto(cpu):
    assert cpu.spec == "cpu:0" and cpu.backend == "cpu" and cpu == dlrt.device("CPU:0")
    assert cpu.dlpack_device() == (1, 0)
    total, free = cpu.memory
    assert total > 0 and 0 <= free <= total
    assert dlrt.device() in dlrt.devices()


def test_memory_stats_follow_allocations(cpu):
    cpu.reset_peak_memory_stats()
    before = cpu.memory_stats()
    t = dlrt.empty((1024, 1024), "f32", device=cpu)  # 4 MiB
    during = cpu.memory_stats()
    mib4 = 4 << 20
    assert during["allocated_bytes.all.current"] >= before["allocated_bytes.all.current"] + mib4
    assert during["requested_bytes.all.current"] == before["requested_bytes.all.current"] + mib4
    assert during["reserved_bytes.all.current"] >= during["allocated_bytes.all.current"]
    assert during["allocation.all.allocated"] == before["allocation.all.allocated"] + 1
    del t
    after = cpu.memory_stats()
    assert after["allocation.all.current"] == before["allocation.all.current"]
    assert after["allocated_bytes.all.peak"] >= during["allocated_bytes.all.current"]
    assert after["allocation.all.freed"] == before["allocation.all.freed"] + 1
    keys = {"allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "reserved_bytes.all.peak", "active_bytes.all.current", "segment.all.current",
            "num_alloc_retries", "num_ooms", "limit_bytes", "fragmentation"}
    assert keys <= set(after)
    assert set(cpu.host_memory_stats()) == set(after)


def test_budget_get_and_set(cpu):
    old = cpu.memory_limit
    try:
        cpu.memory_limit = "1G"
        assert cpu.memory_limit == 1 << 30 and cpu.memory_stats()["limit_bytes"] == 1 << 30
        cpu.set_memory_limit(123456789)
        assert cpu.memory_limit == 123456789
        cpu.set_memory_limit("50%")
        assert cpu.memory_limit == cpu.total_memory // 2
    finally:
        cpu.set_memory_limit(old)
    assert cpu.memory_limit == old


def test_memory_summary(cpu):
    keep = dlrt.zeros(1000, device=cpu)
    text = cpu.memory_summary()
    assert text.startswith("dlrt memory summary: cpu:0\n")
    for row in ("device memory", "pinned host pool", "allocated", "reserved", "budget",
                "out-of-memory errors"):
        assert row in text
    cpu.empty_cache()
    assert live_allocations(cpu) >= 1
    del keep


def test_parse_size():
    assert dlrt.parse_size("256M") == 256 << 20 and dlrt.parse_size(4096) == 4096
    assert dlrt.parse_size("50%", 1000) == 500
