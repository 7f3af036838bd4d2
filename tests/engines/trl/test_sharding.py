"""The memory budget of a run on several processes (agentrl/engines/trl/sharding.py), by hand-computed examples.

One example throughout, in round numbers: 2.0 GB of base weights, 10 million trainable adapter
parameters (16 bytes each: 160 MB), a KV cache of 800 MB for the whole step, 400 MB of
activations and logits, 0.9 GB of runtime, 2 GB of OS reserve, on 2 or 4 processes.
"""

from __future__ import annotations

import pytest

from agentrl.config import make_config
from agentrl.engines.trl.budget import GB, Budget, run_budget
from agentrl.engines.trl.distributed import gpu_memory
from agentrl.engines.trl.sharding import shard_budget, shard_state
from agentrl.tasks.refund.tiny_model import default_model_dir

MB = 10**6
WEIGHTS, TRAINABLE = 2 * GB, 10_000_000


def one_process(machine_bytes: int = 16 * GB) -> Budget:
    """The whole step in one process, as SPEC 11's arithmetic gives it."""
    return Budget(machine_bytes=machine_bytes, weights=WEIGHTS, adapter=TRAINABLE * 16, kv_cache=800 * MB,
                  activations_logits=400 * MB, sandbox=0, os_reserve=2 * GB, parameters=1_000_000_000,
                  trainable_parameters=TRAINABLE, runtime=900 * MB)


# -- what one process holds, per strategy (4 processes) ----------------------------------------


def test_ddp_replicates_weights_gradients_and_optimiser_state():
    assert shard_state("ddp", 4, WEIGHTS, TRAINABLE) == (2 * GB, 160 * MB)


def test_zero1_shards_the_optimiser_state():
    # weight 40 MB + gradient 40 MB + Adam's moments 80 MB / 4 = 20 MB
    assert shard_state("zero1", 4, WEIGHTS, TRAINABLE) == (2 * GB, 100 * MB)


def test_zero2_also_shards_the_gradients():
    # weight 40 MB + gradient 40 / 4 = 10 MB + moments 20 MB
    assert shard_state("zero2", 4, WEIGHTS, TRAINABLE) == (2 * GB, 70 * MB)


@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
def test_zero3_and_fsdp_also_shard_the_weights(strategy):
    assert shard_state(strategy, 4, WEIGHTS, TRAINABLE) == (500 * MB, 40 * MB)


def test_a_share_is_rounded_up_never_under_counted():
    assert shard_state("zero3", 4, 10, 1) == (3, 1 + 1 + 2)  # 10 bytes / 4 -> 3; 4/4, 4/4, 8/4


def test_one_process_shards_nothing_whatever_the_strategy():
    assert {shard_state(s, 1, WEIGHTS, TRAINABLE) for s in ("ddp", "zero1", "zero2", "zero3", "fsdp")} == {(2 * GB, 160 * MB)}


def test_an_unknown_strategy_or_process_count_is_refused():
    with pytest.raises(ValueError, match="unknown sharding strategy 'zero4'"):
        shard_state("zero4", 2, WEIGHTS, TRAINABLE)
    with pytest.raises(ValueError, match="processes must be a positive integer"):
        shard_state("ddp", 0, WEIGHTS, TRAINABLE)


# -- the run: on CPU every process shares the machine ------------------------------------------


def test_on_cpu_the_total_is_n_processes_plus_the_launcher_and_os():
    budget = shard_budget(one_process(), 2, "ddp", launcher_bytes=400 * MB)
    # per process: 2.0 GB + 160 MB + 800/2 MB KV + 400 MB + 900 MB runtime = 3.86 GB
    assert budget.per_process == 3_860 * MB
    assert budget.run_total == 2 * 3_860 * MB + 400 * MB == 8_120 * MB
    assert budget.used == 10_120 * MB and budget.free == 5_880 * MB and budget.fits
    assert budget.refusal() is None


def test_on_cpu_a_run_too_big_for_the_machine_is_refused_with_the_processes_named():
    budget = shard_budget(one_process(machine_bytes=8 * GB), 2, "ddp", launcher_bytes=400 * MB)
    assert not budget.fits
    assert budget.refusal() == (
        "memory budget does not fit: 2 processes x 3.9 GB + the launcher and OS reserve need 10.1 GB but the machine "
        "has 8.0 GB (2.1 GB short); use fewer processes, or shrink each: largest per process: weights 2.0 GB (use a "
        "smaller model); KV cache 0.4 GB (use fewer rollouts or fewer tokens per rollout)")


def test_the_store_rows_are_the_whole_run_and_add_up_to_its_total():
    budget = shard_budget(one_process(), 2, "zero2", launcher_bytes=400 * MB)
    rows = {r["component"]: r["bytes"] for r in budget.rows("run-1")}
    assert rows["weights"] == 4 * GB and rows["adapter"] == 2 * (40 + 20 + 40) * MB  # zero2 on 2: 40 + 40/2 + 80/2
    assert rows["kv_cache"] == 800 * MB and rows["launcher"] == 400 * MB
    parts = sum(n for name, n in rows.items() if name not in ("free", "total", "os_reserve"))
    assert rows["total"] == parts == budget.run_total
    assert {r["source"] for r in budget.rows("run-1")} == {"estimate"}


def test_the_table_shows_each_process_and_the_total():
    lines = shard_budget(one_process(), 2, "ddp", launcher_bytes=400 * MB).table_text().splitlines()
    assert lines[0].split() == ["per", "process", "2", "processes"]
    cells = {line[:33].strip(): line[33:].split() for line in lines[1:-1]}
    assert cells["weights"] == ["2.0", "GB", "4.0", "GB"]
    assert cells["Python + torch runtime"] == ["0.9", "GB", "1.8", "GB"]
    assert cells["accelerate launch"] == ["0.4", "GB"] and cells["OS reserve"] == ["2.0", "GB"]
    assert cells["free"] == ["5.9", "GB"] and cells["machine"] == ["16.0", "GB"]
    assert "2 processes, ddp: every process holds all weights" in lines[-1] and "on CPU" in lines[-1]


# -- the run: on GPUs each process has its own device --------------------------------------------


def test_on_gpus_one_process_must_fit_one_device_and_the_host_holds_the_rest():
    budget = shard_budget(one_process(), 2, "zero3", launcher_bytes=400 * MB, device_bytes=4 * GB)
    # per GPU: 2.0 GB / 2 + 160 MB / 2 + 400 MB KV + 400 MB = 1.88 GB
    assert budget.per_device == 1_880 * MB and budget.device_free == 2_120 * MB
    # host: 2 runtimes + the launcher + the OS reserve
    assert budget.host_used == 2 * 900 * MB + 400 * MB + 2 * GB and budget.host_free == 11_800 * MB
    assert budget.free == 2_120 * MB and budget.refusal() is None


def test_on_gpus_ddp_that_does_not_fit_a_device_is_refused_pointing_at_zero3():
    budget = shard_budget(one_process(), 2, "ddp", device_bytes=2_900 * MB)
    # per GPU: 2.0 GB + 160 MB + 400 MB + 400 MB = 2.96 GB, 60 MB more than the GPU
    assert budget.per_device == 2_960 * MB and budget.device_free == -60 * MB
    refusal = budget.refusal()
    assert refusal.startswith("memory budget does not fit on a GPU: each of the 2 processes needs 3.0 GB on its GPU "
                              "but a GPU has 2.9 GB (60.0 MB short)")
    assert refusal.endswith("strategy 'zero3' or 'fsdp' splits the weights across GPUs")
    assert shard_budget(one_process(), 2, "fsdp", device_bytes=2_900 * MB).fits  # the same run, weights split


# -- what a config asks for -------------------------------------------------------------------


def tiny_config(**distributed):
    return make_config(kind="trl", group_size=4, lm={"tasks_per_step": 2}, distributed=distributed)


def test_a_one_process_run_keeps_the_single_process_budget():
    assert type(run_budget(tiny_config(), default_model_dir())) is Budget


@pytest.mark.skipif(bool(gpu_memory()), reason="this machine has a GPU: the budget is per device")
def test_a_two_process_run_on_this_cpu_counts_both_and_the_launcher():
    one = run_budget(tiny_config(), default_model_dir())
    two = run_budget(tiny_config(num_processes=2), default_model_dir())
    assert two.device_bytes is None  # this machine has no GPU (the run would train on its CPU)
    assert two.process.kv_cache == -(-one.kv_cache // 2) and two.process.weights == one.weights
    assert two.run_total == 2 * two.per_process + two.launcher and two.launcher > 0
    assert two.run_total > one.run_total
