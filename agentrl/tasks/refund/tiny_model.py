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
import re
import time
from collections.abc import Callable
from pathlib import Path

from agentrl.tasks.refund.gym import ACTIONS, STATES, TERMINAL, RefundGym, Task
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
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # pad, turn start, turn end (eos)
MARKER_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]  # kept in decoded text
VOCAB_SIZE = 1024  # an upper bound: BPE runs out of merges at about 680
MODEL_SHAPE = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "max_position_embeddings": 1024, "tie_word_embeddings": True,
}
BC_STEPS = 300
BC_BATCH = 32
BC_LR = 3e-3
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
        "system": SYSTEM_PROMPT, "user": USER_PROMPT, "final": FINAL_ANSWER, "template": _chat_template(),
        "tools": [get_json_schema(tool) for tool in tool_methods()],
        "observations": [observation(s) for s in STATES + (TERMINAL,)] + [EPISODE_OVER, STEP_LIMIT],
    }
    return hashlib.sha256(json.dumps(texts, sort_keys=True).encode()).hexdigest()


def default_model_dir() -> Path:
    """The committed build of the tiny model (a local directory; nothing is downloaded)."""
    return MODEL_DIR


def _chat_template() -> str:
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def _wrap(tokenizer_object):
    """A `PreTrainedTokenizerFast` with TRL's qwen2_5 chat template, so TRL parses its tool calls."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        padding_side="left", truncation_side="left", model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )
    tokenizer.chat_template = _chat_template()
    return tokenizer


def _byte_level_bpe(corpus: list[str] | None, vocab_size: int):
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size if corpus else 0, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    # Train on the pieces the encoder will see: text is cut at every special and marker token
    # before BPE runs, so merges never span a turn boundary.
    cut = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS + MARKER_TOKENS))
    pieces = [piece for text in corpus or [""] for piece in cut.split(text) if piece]
    # Every tool result the environment can return becomes one token too, seen or not.
    pieces += [f"\n{text}\n" for text in [observation(s) for s in STATES + (TERMINAL,)] + [EPISODE_OVER, STEP_LIMIT]]
    tokenizer.train_from_iterator(pieces, trainer=trainer)
    tokenizer.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKER_TOKENS])
    return tokenizer


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
    scratch = _wrap(_byte_level_bpe(None, 0))  # bytes only: enough to render the template as text
    corpus = [
        scratch.apply_chat_template(transcript(task, actions), tools=tools, tokenize=False)
        for task, actions in episodes
    ]
    tokenizer = _wrap(_byte_level_bpe(corpus, vocab_size))
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
    return {"ids": stream.ids, "mask": mask, "soft": soft}


def build_tiny_model(
    out_dir: str | Path, seed: int = 0, bc_steps: int = BC_STEPS, episodes: int = EPISODES, log: Callable[[str], None] = print,
) -> Path:
    """Build the tokenizer and the model, warm-start it by cloning, save everything to `out_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

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

    config = Qwen3Config(
        vocab_size=len(tokenizer), **MODEL_SHAPE,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        use_cache=True, dtype="float32",
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
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

    generator = torch.Generator().manual_seed(seed)
    width = max(len(e["ids"]) for e in examples)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    targets = torch.full((len(examples), width), -100, dtype=torch.long)  # hard next-token targets
    soft_rows, soft_cols, soft_dists = [], [], []
    action_ids = torch.tensor([action_token[a] for a in ACTIONS])
    for row, example in enumerate(examples):
        n = len(example["ids"])
        ids[row, :n] = torch.tensor(example["ids"])
        attention[row, :n] = 1
        for position, flag in enumerate(example["mask"]):
            if flag:
                targets[row, position] = example["ids"][position]
        for position, dist in example["soft"]:
            targets[row, position] = -100  # learned from the soft target instead
            soft_rows.append(row)
            soft_cols.append(position)
            soft_dists.append(dist)
    soft_rows_t, soft_cols_t = torch.tensor(soft_rows), torch.tensor(soft_cols)
    soft_dists_t = torch.tensor(soft_dists)
    optimizer = torch.optim.AdamW(model.parameters(), lr=BC_LR, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.05, 1 - s / steps))
    model.train()
    started = time.monotonic()
    for step in range(steps):
        batch = torch.randperm(len(examples), generator=generator)[:BC_BATCH]
        logits = model(input_ids=ids[batch], attention_mask=attention[batch]).logits
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # position t predicts token t+1
        hard = targets[batch][:, 1:]
        hard_mask = hard != -100
        hard_loss = -(logp.gather(-1, hard.clamp(min=0).unsqueeze(-1)).squeeze(-1) * hard_mask).sum()
        # Soft targets of the examples in this batch: the clone's distribution over the four action tokens.
        in_batch = torch.isin(soft_rows_t, batch)
        where = {int(r): i for i, r in enumerate(batch)}
        rows = torch.tensor([where[int(r)] for r in soft_rows_t[in_batch]], dtype=torch.long)
        cols = soft_cols_t[in_batch] - 1
        soft_logp = logp[rows, cols][:, action_ids]
        soft_loss = -(soft_dists_t[in_batch] * soft_logp).sum()
        loss = (hard_loss + soft_loss) / (hard_mask.sum() + len(rows))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 200 == 0 or step == steps - 1:
            log(f"clone step {step}: loss {loss.item():.4f} ({time.monotonic() - started:.1f}s)")
    model.eval()
