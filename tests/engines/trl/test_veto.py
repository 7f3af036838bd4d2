"""The veto on the LM path (agentrl/grpo_veto.py): a vetoed trajectory contributes no gradient at all.

SPEC 6: a trajectory that is not eligible may never contribute a gradient update, whatever its
reward, while its penalised reward still counts in the group baseline. The veto relies on TRL
private API (`_compute_loss`, `_generate_and_score_completions`, the batch keys), so these tests
pin its behaviour on trl==1.16.0: masking the vetoed rows must give the gradient of the batch
without them; zeroing their advantage must not (the KL term still reaches them).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from agentrl.engines.trl.veto import ROW_INDEX, VetoGRPOTrainer, apply_veto
from agentrl.tasks.refund.tiny_model import default_model_dir

VETOED = [1, 4]  # rows of the 6-row test batch


def test_the_private_trl_api_the_veto_relies_on_is_there():
    assert trl.__version__ == "1.16.0", "re-run tests/test_grpo_veto.py and re-read TRL's GRPOTrainer before moving the pin"
    for name in ("_generate_and_score_completions", "_compute_loss", "_get_per_token_logps_and_entropies"):
        assert callable(getattr(trl.GRPOTrainer, name))


def make_trainer(tmp_path, beta: float = 0.0, entropy_coef: float = 0.0, **extra):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(default_model_dir()), local_files_only=True, dtype=torch.float32)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"), per_device_train_batch_size=6, num_generations=3, max_completion_length=8,
        beta=beta, entropy_coef=entropy_coef, loss_type="dapo", use_cpu=True, bf16=False, gradient_checkpointing=False,
        report_to="none", disable_tqdm=True, max_steps=1, seed=0,
    )
    dataset = Dataset.from_list([{"prompt": "state: start"}] * 2)
    trainer = VetoGRPOTrainer(
        model=model, reward_funcs=[lambda completions, **kwargs: [0.0] * len(completions)], args=args,
        train_dataset=dataset, processing_class=tokenizer, **extra,
    )
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; the test calls the loss directly
    trainer.model.train()
    return trainer


def make_batch(beta: float) -> dict:
    generator = torch.Generator().manual_seed(0)
    rows, prompt_len, completion_len = 6, 5, 7
    lengths = torch.tensor([7, 3, 5, 7, 2, 6])
    completion_mask = (torch.arange(completion_len) < lengths.unsqueeze(1)).long()
    batch = {
        "prompt_ids": torch.randint(3, 600, (rows, prompt_len), generator=generator),
        "prompt_mask": torch.ones(rows, prompt_len, dtype=torch.long),
        "completion_ids": torch.randint(3, 600, (rows, completion_len), generator=generator),
        "completion_mask": completion_mask,
        "advantages": torch.randn(rows, generator=generator),
        "num_items_in_batch": completion_mask.sum(),
    }
    if beta:
        batch["ref_per_token_logps"] = -3.0 + 0.5 * torch.randn(rows, completion_len, generator=generator)
    return batch


def gradient(trainer, batch: dict) -> dict[str, torch.Tensor]:
    model = trainer.model
    model.zero_grad()
    trainer._compute_loss(model, batch).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def without_rows(batch: dict, rows: list[int]) -> dict:
    keep = torch.tensor([i not in rows for i in range(batch["completion_ids"].size(0))])
    out = {k: (v[keep] if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in batch.items()}
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("beta,entropy_coef", [(0.0, 0.0), (0.1, 0.01)], ids=["plain", "kl-and-entropy-bonus"])
def test_masking_vetoed_rows_gives_the_gradient_of_the_batch_without_them(tmp_path, beta, entropy_coef):
    trainer = make_trainer(tmp_path, beta=beta, entropy_coef=entropy_coef)
    batch = make_batch(beta)
    vetoed = torch.tensor([i in VETOED for i in range(6)])
    masked = gradient(trainer, apply_veto({k: v.clone() for k, v in batch.items()}, vetoed))
    removed = gradient(trainer, without_rows(batch, VETOED))
    assert max_difference(masked, removed) < 1e-6
    assert max_difference(masked, gradient(trainer, batch)) > 1e-4  # and the vetoed rows did matter


def test_zeroing_the_advantage_is_not_a_veto(tmp_path):
    trainer = make_trainer(tmp_path, beta=0.1)
    batch = make_batch(0.1)
    zeroed = {k: v.clone() for k, v in batch.items()}
    zeroed["advantages"][VETOED] = 0.0
    removed = gradient(trainer, without_rows(batch, VETOED))
    assert max_difference(gradient(trainer, zeroed), removed) > 1e-4  # the KL term still reaches those rows


def test_apply_veto_recomputes_the_loss_normaliser_over_tool_masked_tokens():
    batch = make_batch(0.0)
    batch["tool_mask"] = torch.ones_like(batch["completion_mask"])
    batch["tool_mask"][:, 0] = 0  # a tool result token is never in the loss
    vetoed = torch.tensor([i in VETOED for i in range(6)])
    apply_veto(batch, vetoed)
    assert batch["completion_mask"][VETOED].sum() == 0 and batch["tool_mask"][VETOED].sum() == 0
    assert batch["num_items_in_batch"].item() == (batch["completion_mask"] * batch["tool_mask"]).sum().item()


def test_in_a_real_step_vetoed_rollouts_get_no_gradient_and_keep_their_baseline(tmp_path):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.tasks.refund.task import outcome
    from agentrl.tasks.refund.tools import RefundToolEnv, task_rows
    from agentrl.tasks.refund.tasksets import TRAIN_TASKS

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(default_model_dir()), local_files_only=True, dtype=torch.float32)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"), per_device_train_batch_size=8, num_generations=4, max_completion_length=96,
        max_tool_calling_iterations=8, learning_rate=1e-3, use_cpu=True, bf16=False, gradient_checkpointing=False,
        report_to="none", disable_tqdm=True, max_steps=1, logging_steps=1, save_strategy="no", seed=0,
    )
    # Veto every other rollout, whatever it did: the update must not see them at all.
    trainer = VetoGRPOTrainer(
        model=model, reward_funcs=[outcome], args=args, train_dataset=Dataset.from_list(task_rows(TRAIN_TASKS[:2])),
        processing_class=tokenizer, environment_factory=RefundToolEnv,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        eligibility=lambda environments, inputs: [i % 2 == 0 for i in range(len(environments))],
    )
    original = trainer._generate_and_score_completions
    seen = {}

    def spy(inputs):
        batch = original(inputs)
        seen["advantages"] = batch["advantages"].clone()
        seen["rows"] = batch[ROW_INDEX].clone()
        return batch

    trainer._generate_and_score_completions = spy
    trainer.train()
    record = trainer.last_batch
    assert record.vetoed == [False, True] * 4
    assert trainer.vetoed_total == 4 and record.vetoed_updates == 0 and trainer.vetoed_updates_total == 0
    assert not any(u for u, v in zip(record.updated, record.vetoed) if v)
    assert not any(m for m, v in zip(record.in_loss_mask, record.vetoed) if v)
    assert record.updates == sum(1 for a, v in zip(record.advantages, record.vetoed) if not v and a != 0)
    # The vetoed rewards stayed in the baseline: each group's advantages still sum to about 0 over all 4 rows.
    for group in seen["advantages"].view(-1, 4):
        assert abs(group.sum().item()) < 1e-3
    assert all(record.prompts) and all("<tool_call>" in c or c for c in record.completions)
