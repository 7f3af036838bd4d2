"""A plain TRL GRPO script, recorded by agentrl (the lines marked "agentrl" below).

A tool-calling refund agent: the environment's public methods are the tools (TRL's
`environment_factory`), two reward functions score each episode, and GRPOTrainer trains a LoRA
adapter on a small local model (the repository's tiny Qwen-style model; nothing is downloaded).
Everything else is TRL as its documentation writes it. agentrl records every step's metrics
(`reward`, `rewards/<func>/mean`, `tools/call_frequency`, ...) and every completion with each
reward function's value and the `log_extra` columns.

The completions come through the reward functions (`agentrl.track`): TRL 1.16 cannot write its
own completions table (`log_completions=True`) when a tool takes no arguments, as these do. With
tools that take arguments, set `log_completions=True` and drop `track`: agentrl then reads TRL's
table, advantages included.

    python examples/trl_grpo_script.py --steps 8 --runs-dir runs      # then: make run, open Live

On a GPU drop `use_cpu`; on a real model point --model at its folder.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model only
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from agentrl.integrations.trl import AgentrlCallback  # agentrl (1 of 3)

TINY_MODEL = Path(__file__).resolve().parent.parent / "agentrl" / "assets" / "tiny-refund-lm"
SYSTEM = "You are a refund agent. Call one tool per turn."
USER = "Handle this refund request.\n"


class RefundEnv:
    """One refund request. Above 50 the refund needs a manager's approval first."""

    def reset(self, amount: int, **row) -> str:
        self.amount, self.state, self.calls = amount, "start", 0
        self.refunded = self.violation = self.finished = False
        return f"state: {self.state}"

    def lookup(self) -> str:
        """Look up the order of this refund request."""
        return self._step("lookup")

    def request_approval(self) -> str:
        """Ask a manager to approve this refund."""
        return self._step("request_approval")

    def refund(self) -> str:
        """Pay the refund to the customer."""
        return self._step("refund")

    def finish(self) -> str:
        """End the episode."""
        return self._step("finish")

    def _step(self, action: str) -> str:
        self.calls += 1
        if self.finished:
            return "error: the episode has finished"
        if action == "finish":
            self.finished = True
        elif action == "lookup" and self.state in ("start", "recover"):
            self.state = "known_high" if self.amount > 50 else "known_low"
        elif action == "request_approval" and self.state == "known_high":
            self.state = "approved"
        elif action == "refund" and self.state in ("known_low", "approved", "known_high"):
            self.violation = self.violation or self.state == "known_high"  # paid without approval
            self.refunded, self.state = True, "refunded"
        else:
            self.state = "recover"
        return f"state: {self.state}"


def refund_paid(completions, environments, task_id, log_extra=None, **kwargs) -> list[float]:
    """1 when the refund was paid and the episode finished, else 0."""
    if log_extra is not None:  # extra columns in TRL's completions table
        log_extra("task_id", list(task_id))
        log_extra("violation", [env.violation for env in environments])
    return [float(env.refunded and env.finished) for env in environments]


def tool_cost(completions, environments, **kwargs) -> list[float]:
    """-0.05 per tool call: shorter episodes are better."""
    return [-0.05 * env.calls for env in environments]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(TINY_MODEL), help="a local causal-LM folder with its tokenizer")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--runs-dir", help="agentrl's runs directory (default $AGENTRL_RUNS_DIR or runs/)")
    parser.add_argument("--output-dir", default=None, help="TRL's output folder (default: a temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    tasks = [("small", 20), ("large", 80), ("medium", 40), ("huge", 90)]
    dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
                                  "task_id": task_id, "amount": amount} for task_id, amount in tasks])
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    config = GRPOConfig(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="trl-grpo-"),
        max_steps=args.steps,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=96,
        max_tool_calling_iterations=6,
        learning_rate=1e-3,
        beta=0.0,
        logging_steps=1,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    agentrl = AgentrlCallback(runs_dir=args.runs_dir, name="trl-grpo-script")  # agentrl (2 of 3)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=agentrl.track([refund_paid, tool_cost]),  # agentrl (3 of 3)
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        environment_factory=RefundEnv,
        callbacks=[agentrl],
    )
    trainer.train()


if __name__ == "__main__":
    main()
