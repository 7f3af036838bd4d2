"""The GPU side of a run's hardware record, through its seams: a stand-in for torch.cuda's memory
counters and one for NVML (`pynvml`), since this machine has no GPU. What they stand in for is
the library's interface, not ours: `cuda_peak`, `GpuPeaks`, `nvml_device_memory` and
`gpu_rank_rows` run as they do on a GPU."""

from __future__ import annotations

from agentrl.engines.trl.budget import measured_rows
from agentrl.engines.trl.distributed import nvml_memory
from agentrl.engines.trl.ranks import Ranks
from agentrl.record.hardware import GpuPeaks, cuda_peak, gpu_rank_rows, nvml_device_memory
from gpu_stand_ins import GIB, FakeCuda, FakeNvml


def test_a_steps_peak_is_read_then_reset_so_the_next_step_starts_from_now():
    cuda = FakeCuda()
    cuda.allocate(5 * GIB, 6 * GIB)
    cuda.allocate(2 * GIB, 6 * GIB)  # a short peak between two samples: the counter keeps it
    assert cuda_peak(cuda) == {"allocated_bytes": 5 * GIB, "reserved_bytes": 6 * GIB}
    assert cuda.resets == 1
    assert cuda_peak(cuda) == {"allocated_bytes": 2 * GIB, "reserved_bytes": 6 * GIB}


def test_no_gpu_no_peak_and_no_reset():
    cuda = FakeCuda(available=False)
    assert cuda_peak(cuda) == {} and cuda.resets == 0
    peaks = GpuPeaks(cuda=cuda, nvml=FakeNvml(mig=False))
    assert peaks.step() == {} and peaks.run_peak() == {} and not peaks.measured


def test_the_runs_peak_is_the_largest_step_peak_and_what_came_after_the_last_step():
    cuda = FakeCuda()
    peaks = GpuPeaks(cuda=cuda, nvml=FakeNvml(mig=False))
    cuda.allocate(7 * GIB, 8 * GIB)
    assert peaks.step() == {"allocated_bytes": 7 * GIB, "reserved_bytes": 8 * GIB}
    cuda.allocate(3 * GIB, 8 * GIB)
    peaks.step()
    cuda.allocate(9 * GIB, 12 * GIB)  # the final evaluation
    cuda.allocate(1 * GIB, 12 * GIB)
    assert peaks.run_peak() == {"allocated_bytes": 9 * GIB, "reserved_bytes": 12 * GIB, "device_total_bytes": 80 * GIB}


def test_a_mig_device_is_counted_as_itself_not_as_the_whole_gpu():
    nvml = FakeNvml(mig=True)
    assert nvml_device_memory(nvml, "MIG-3") == {"total_bytes": 10 * GIB, "used_bytes": 3 * GIB, "mig": True}
    assert nvml_device_memory(nvml, None) == {"total_bytes": 10 * GIB, "used_bytes": 0, "mig": True}
    assert nvml_device_memory(FakeNvml(mig=False), "0") == {"total_bytes": 80 * GIB, "used_bytes": 30 * GIB, "mig": False}
    assert nvml_memory(nvml, "MIG-2,MIG-5") == (10 * GIB, 10 * GIB)  # the preflight's GPU memory
    assert nvml_memory(None, "0") == ()


def test_nvml_that_cannot_tell_is_no_figure():
    assert nvml_device_memory(FakeNvml(mig=False), "7") == {}
    assert nvml_memory(FakeNvml(mig=False), "0,7") == ()


def test_every_ranks_peak_sits_beside_the_per_gpu_estimate_and_their_sum_is_the_measured_gpu_peak():
    peaks = [{"allocated_bytes": 9 * GIB, "reserved_bytes": 12 * GIB, "device_total_bytes": 80 * GIB},
             {"allocated_bytes": 8 * GIB, "reserved_bytes": 10 * GIB, "device_total_bytes": None}]
    rows = {(r["component"], r["source"]): r["bytes"] for r in gpu_rank_rows("run-1", peaks, estimate_bytes=11 * GIB)}
    assert rows == {
        ("gpu_peak/rank 0", "measured"): 9 * GIB, ("gpu_reserved_peak/rank 0", "measured"): 12 * GIB,
        ("gpu_memory/rank 0", "measured"): 80 * GIB, ("gpu_peak/rank 0", "estimate"): 11 * GIB,
        ("gpu_peak/rank 1", "measured"): 8 * GIB, ("gpu_reserved_peak/rank 1", "measured"): 10 * GIB,
        ("gpu_peak/rank 1", "estimate"): 11 * GIB,
    }
    measured = {r["component"]: r["bytes"] for r in measured_rows("run-1", 3 * GIB, gpu_peak_bytes=17 * GIB)}
    assert measured == {"process_peak_rss": 3 * GIB, "gpu_peak": 17 * GIB, "total": 20 * GIB}


def test_one_process_gathers_its_own_value():
    assert Ranks().gather({"allocated_bytes": 1}) == [{"allocated_bytes": 1}]
