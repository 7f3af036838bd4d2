"""Tiny offline language models for a task: a tokenizer and a small Qwen-style causal LM warm-started
by behaviour cloning on the task's demonstrations (the imitation rung before RL).

Before the LM run process (launch -> **run process**): a run whose `lm.model` names no model
trains a built model, so tests and the offline demo need no downloads. `build_task_model` works
for any task that offers `demonstrations` (complete conversations: the prompt with what `reset`
appended, then assistant tool calls, tool results and a closing answer); the refund model
(`agentrl.tasks.refund.tiny_model`) shares the tokenizer and model recipe below but clones soft
targets. `python -m agentrl build-tiny-model --task coding` (or your task) builds one.

The recipe (measured on the refund task, NOTES-TRL.md): a byte-level BPE trained on the rendered
transcripts with its pre-tokenizer not splitting words (`use_regex=False`), so every recurring
piece between two chat markers (a system prompt with its tool schemas, a tool call with its
arguments, a file's content) becomes one or a few tokens and a step of GRPO stays well under a
second per rollout on one core; any other text still encodes, byte by byte where it must. The
model is a `qwen3` config (transformers' AutoTokenizer would swap in its own tokenizer for a
`qwen2` folder) with TRL's qwen2_5 chat template, which TRL recognises for tool calling.
Torch, tokenizers and transformers are imported inside the functions.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # pad, turn start, turn end (eos)
MARKER_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]  # kept in decoded text
MODEL_SHAPE = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "max_position_embeddings": 1024, "tie_word_embeddings": True,
}
BC_BATCH = 32
BC_LR = 3e-3


def chat_template() -> str:
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def wrap(tokenizer_object):
    """A `PreTrainedTokenizerFast` with TRL's qwen2_5 chat template, so TRL parses its tool calls."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        padding_side="left", truncation_side="left", model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )
    tokenizer.chat_template = chat_template()
    return tokenizer


def byte_level_bpe(corpus: list[str] | None, vocab_size: int, extra_pieces: Sequence[str] = ()):
    """A byte-level BPE trained on `corpus` (None: bytes only), plus `extra_pieces` (texts that
    should become tokens even when no transcript shows them, such as every tool result)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

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
    pieces += list(extra_pieces)
    tokenizer.train_from_iterator(pieces, trainer=trainer)
    tokenizer.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKER_TOKENS])
    return tokenizer


def new_model(tokenizer):
    """A small Qwen3 causal LM for `tokenizer` (hidden 64, 2 layers, tied embeddings)."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer), **MODEL_SHAPE,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        use_cache=True, dtype="float32",
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    return model


def text_fingerprint(task, tools: list | None = None) -> str:
    """A hash of the texts a task's model reads: its prompts, tool schemas and decision points.
    Stored in build.json; when it no longer matches, the built model is stale."""
    from transformers.utils import get_json_schema

    from agentrl.tasks.contract import tool_methods

    tools = tools if tools is not None else tool_methods(task.environment_factory())
    texts = {"template": chat_template(), "tools": [get_json_schema(t) for t in tools],
             "prompts": [row["prompt"] for row in task.train_dataset()]}
    return hashlib.sha256(json.dumps(texts, sort_keys=True, default=str).encode()).hexdigest()


def build_task_model(task, out_dir: str | Path, demonstrations: Sequence[Sequence[dict]], seed: int = 0, bc_steps: int = 300,
                     vocab_size: int = 2048, extra_pieces: Sequence[str] = (), log: Callable[[str], None] = print) -> Path:
    """Tokenizer and model for `task`, cloned on `demonstrations` (loss on assistant turns only),
    saved to `out_dir` with a build.json; deterministic for a seed."""
    import torch

    from agentrl.tasks.contract import tool_methods
    from agentrl.tasks.episodes import token_stream

    started = time.monotonic()
    torch.manual_seed(seed)
    tools = tool_methods(task.environment_factory())
    scratch = wrap(byte_level_bpe(None, 0))  # bytes only: enough to render the template as text
    corpus = [scratch.apply_chat_template(list(d), tools=tools, tokenize=False) for d in demonstrations]
    tokenizer = wrap(byte_level_bpe(corpus, vocab_size, extra_pieces))
    examples = []
    for demonstration in demonstrations:
        stream = token_stream(tokenizer, list(demonstration), tools)
        mask = [0] * len(stream.ids)
        for start, end in stream.generated:  # each turn's <|im_end|> is learned too
            mask[start:end] = [1] * (end - start)
        examples.append({"ids": stream.ids, "mask": mask})
    longest = max(len(e["ids"]) for e in examples)
    if longest > MODEL_SHAPE["max_position_embeddings"]:
        raise ValueError(f"a demonstration is {longest} tokens, more than the model's {MODEL_SHAPE['max_position_embeddings']}")
    log(f"tokenizer: {len(tokenizer)} tokens; {len(examples)} transcripts, {longest} tokens at most "
        f"({time.monotonic() - started:.1f}s)")
    model = new_model(tokenizer)
    if bc_steps:
        clone_into(model, tokenizer, examples, bc_steps, seed, log)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "build.json").write_text(json.dumps({
        "task": task.name, "seed": seed, "bc_steps": bc_steps, "demonstrations": len(examples), "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()), "text_fingerprint": text_fingerprint(task, tools),
    }, indent=2) + "\n")
    log(f"saved {out_dir} ({time.monotonic() - started:.1f}s)")
    return out_dir


def clone_into(model, tokenizer, examples: list[dict[str, Any]], steps: int, seed: int, log: Callable[[str], None],
               soft: Callable | None = None) -> None:
    """Behaviour cloning: cross-entropy on the masked (assistant) tokens, AdamW with a short warm-up
    and a linear decay. `soft(logp, batch) -> (loss_sum, count)` adds soft-target terms (the refund
    model's clone distributions)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    width = max(len(e["ids"]) for e in examples)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    targets = torch.full((len(examples), width), -100, dtype=torch.long)  # hard next-token targets
    for row, example in enumerate(examples):
        n = len(example["ids"])
        ids[row, :n] = torch.tensor(example["ids"])
        attention[row, :n] = 1
        for position, flag in enumerate(example["mask"]):
            if flag:
                targets[row, position] = example["ids"][position]
        for position in example.get("soft_positions", ()):
            targets[row, position] = -100  # learned from the soft target instead
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
        soft_loss, soft_count = soft(logp, batch) if soft is not None else (0.0, 0)
        loss = (hard_loss + soft_loss) / (hard_mask.sum() + soft_count)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 200 == 0 or step == steps - 1:
            log(f"clone step {step}: loss {loss.item():.4f} ({time.monotonic() - started:.1f}s)")
    model.eval()
