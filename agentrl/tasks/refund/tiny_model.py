"""The built-in tiny language model of the LM engine: built offline, warm-started by imitation.

Sits before the LM run process (launch -> **run process**): a run of kind 'trl' with no model
configured loads `default_model_dir()`, a build committed to the repository, so tests and the
offline demo need no downloads. `python -m agentrl build-tiny-model [--out DIR]` rebuilds it.

What `build_tiny_model` does, deterministically for a seed:
1. renders refund episodes as chat transcripts with TRL's qwen2_5 chat template and the exact
   tool schemas of `RefundToolEnv`, and trains a byte-level BPE tokenizer on that text (with
   `<|im_start|>`, `<|im_end|>` as end-of-sequence, a pad token and the tool-call markers).
   Its pre-tokenizer does not split words (`use_regex=False`): BPE then merges every recurring
   piece between two markers into one token, so the whole system prompt with its tool schemas
   is 17 tokens, a tool call 4 (`<tool_call>`, the call, `</tool_call>`, `<|im_end|>`) and an
   episode about 60. That is what makes GRPO steps take well under a second on one CPU core;
   any text still encodes, byte by byte where it must;
2. creates a small Qwen-style causal LM (hidden 64, 2 layers, 4 query / 2 key-value heads of
   16, tied embeddings, about 120k parameters). It is a `qwen3` config (Qwen2 plus per-head
   q/k norms) because transformers' AutoTokenizer swaps in its own Qwen2Tokenizer, with the
   regex pre-tokenizer, for any `qwen2` model folder, which would re-tokenise the model's text;
3. warm-starts it by behaviour cloning, the first rung of the imitation-then-RL ladder: loss on
   assistant turns only. The transcripts are episodes the SPEC's cloned policy plays
   (`clone_expert(EXPERT_TASKS)`, SPEC 5), and at each tool choice the target is that policy's
   whole action distribution at the gym state, not only the action played. So the LM starts
   where the tabular comparison starts (SPEC 8): at `known_high` about 0.914 request_approval
   and 0.029 refund, uniform at `recover` (the expert never went there), and well-formed tool
   calls everywhere. Not deterministic, so GRPO has something to move.

Torch, tokenizers and transformers are imported inside the functions: importing agentrl never
pays for them.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

from agentrl.tasks.refund.gym import ACTIONS, STATES, TERMINAL, RefundGym, Task
from agentrl.tasks.tiny_lm import byte_level_bpe, chat_template, clone_into, new_model, wrap
from agentrl.engines.tabular.imitation import clone_expert
from agentrl.tasks.refund.tools import (
    EPISODE_OVER,
    STEP_LIMIT,
    observation,
    token_stream,
    tool_methods,
    transcript,
)
from agentrl.tasks.refund.tasksets import EXPERT_TASKS
from agentrl.paths import ASSETS_DIR

MODEL_DIR = ASSETS_DIR / "tiny-refund-lm"
VOCAB_SIZE = 1024  # an upper bound: BPE runs out of merges at about 680
BC_STEPS = 300
EPISODES = 480  # sampled transcripts the cloning trains on (and the tokenizer learns from)
MAX_STEPS = 7


def text_fingerprint() -> str:
    """A hash of every text the model was trained to read and write: prompts, tool schemas, observations.

    Stored in build.json; when it no longer matches, the committed model is stale (rebuild it).
    """
    import hashlib

    from transformers.utils import get_json_schema

    from agentrl.tasks.refund.tools import FINAL_ANSWER, SYSTEM_PROMPT, USER_PROMPT

    texts = {
        "system": SYSTEM_PROMPT, "user": USER_PROMPT, "final": FINAL_ANSWER, "template": chat_template(),
        "tools": [get_json_schema(tool) for tool in tool_methods()],
        "observations": [observation(s) for s in STATES + (TERMINAL,)] + [EPISODE_OVER, STEP_LIMIT],
    }
    return hashlib.sha256(json.dumps(texts, sort_keys=True).encode()).hexdigest()


def default_model_dir() -> Path:
    """The committed build of the tiny model (a local directory; nothing is downloaded)."""
    return MODEL_DIR


def _byte_level_bpe(corpus: list[str] | None, vocab_size: int):
    """The shared recipe (`agentrl.tasks.tiny_lm`), with every tool result the refund environment can
    return made one token too, seen or not."""
    observations = [observation(s) for s in STATES + (TERMINAL,)] + [EPISODE_OVER, STEP_LIMIT]
    return byte_level_bpe(corpus, vocab_size, [f"\n{text}\n" for text in observations])


def sample_episodes(n: int, seed: int) -> list[tuple[Task, list[str]]]:
    """Episodes the cloned policy plays, spread over low/high amounts and start/recover states."""
    clone = clone_expert(EXPERT_TASKS)
    rng = random.Random(seed)
    variants = [Task(t.task_id, t.amount, start) for t in EXPERT_TASKS for start in ("start", "recover")]
    episodes = []
    for i in range(n):
        task = variants[i % len(variants)]
        gym = RefundGym()
        state = gym.reset(task)
        actions = []
        for _ in range(MAX_STEPS):
            action, _ = clone.sample(state, rng)
            actions.append(action)
            state = gym.step(action)
            if gym.done:
                break
        episodes.append((task, actions))
    return episodes


def build_tokenizer(episodes: list[tuple[Task, list[str]]], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE trained on the rendered transcripts of `episodes`, wrapped for transformers."""
    tools = tool_methods()
    scratch = wrap(_byte_level_bpe(None, 0))  # bytes only: enough to render the template as text
    corpus = [
        scratch.apply_chat_template(transcript(task, actions), tools=tools, tokenize=False)
        for task, actions in episodes
    ]
    tokenizer = wrap(_byte_level_bpe(corpus, vocab_size))
    return tokenizer


def decision_offset(tokenizer) -> int:
    """Index, within a generated tool call, of the first token that differs between the four tools."""
    from agentrl.tasks.refund.tools import action_continuations

    calls = list(action_continuations(tokenizer, tool_methods()).values())
    offset = 0
    while all(len(c) > offset for c in calls) and len({c[offset] for c in calls}) == 1:
        offset += 1
    if len({c[offset] for c in calls}) != len(calls):
        raise ValueError("the tool names do not start with distinct tokens; the tokenizer cannot carry a soft action target")
    return offset


def encode_episode(tokenizer, task: Task, actions: list[str], offset: int, clone) -> dict:
    """Token ids, the assistant-turn loss mask and the soft action targets of one transcript."""
    stream = token_stream(tokenizer, transcript(task, actions), tool_methods())
    mask = [0] * len(stream.ids)
    for start, end in stream.generated:  # the turn's <|im_end|> is learned too
        for position in range(start, end):
            mask[position] = 1
    soft: list[tuple[int, list[float]]] = []  # (position of the action token, target distribution)
    gym = RefundGym()
    state = gym.reset(task)
    for start, action in stream.decisions:
        soft.append((start + offset, clone.probabilities(state)))
        state = gym.step(action)
    return {"ids": stream.ids, "mask": mask, "soft": soft, "soft_positions": [position for position, _ in soft]}


def build_tiny_model(
    out_dir: str | Path, seed: int = 0, bc_steps: int = BC_STEPS, episodes: int = EPISODES, log: Callable[[str], None] = print,
) -> Path:
    """Build the tokenizer and the model, warm-start it by cloning, save everything to `out_dir`."""
    import torch

    started = time.monotonic()
    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    sampled = sample_episodes(episodes, seed)
    tokenizer = build_tokenizer(sampled)
    offset = decision_offset(tokenizer)
    from agentrl.tasks.refund.tools import action_continuations

    action_token = {a: c[offset] for a, c in action_continuations(tokenizer, tool_methods()).items()}
    clone = clone_expert(EXPERT_TASKS)
    examples = [encode_episode(tokenizer, task, actions, offset, clone) for task, actions in sampled]
    log(f"tokenizer: {len(tokenizer)} tokens; {len(examples)} transcripts, "
        f"{max(len(e['ids']) for e in examples)} tokens at most ({time.monotonic() - started:.1f}s)")

    model = new_model(tokenizer)
    if bc_steps:
        _clone_into(model, tokenizer, examples, action_token, bc_steps, seed, log)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "build.json").write_text(json.dumps({
        "seed": seed, "bc_steps": bc_steps, "episodes": episodes, "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "cloned_from": "agentrl.imitation.clone_expert(EXPERT_TASKS)", "text_fingerprint": text_fingerprint(),
    }, indent=2) + "\n")
    log(f"saved {out_dir} ({time.monotonic() - started:.1f}s)")
    return out_dir


def _clone_into(model, tokenizer, examples: list[dict], action_token: dict[str, int], steps: int, seed: int, log) -> None:
    """Behaviour cloning: cross-entropy on assistant tokens; at each tool choice, against the clone's distribution."""
    import torch

    soft_rows = [row for row, example in enumerate(examples) for _ in example["soft"]]
    soft_cols_t = torch.tensor([position for example in examples for position, _ in example["soft"]])
    soft_dists_t = torch.tensor([dist for example in examples for _, dist in example["soft"]])
    soft_rows_t = torch.tensor(soft_rows)
    action_ids = torch.tensor([action_token[a] for a in ACTIONS])

    def soft(logp, batch):
        # Soft targets of the examples in this batch: the clone's distribution over the four action tokens.
        in_batch = torch.isin(soft_rows_t, batch)
        where = {int(r): i for i, r in enumerate(batch)}
        rows = torch.tensor([where[int(r)] for r in soft_rows_t[in_batch]], dtype=torch.long)
        cols = soft_cols_t[in_batch] - 1
        soft_logp = logp[rows, cols][:, action_ids]
        return -(soft_dists_t[in_batch] * soft_logp).sum(), len(rows)

    clone_into(model, tokenizer, examples, steps, seed, log, soft=soft)
