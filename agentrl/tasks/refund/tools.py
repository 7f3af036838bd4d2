"""The refund gym as chat tools: what a language-model policy sees and calls (SPEC sections 2-4).

Sits inside the LM run process (launch -> **run process** -> chunks): TRL's `GRPOTrainer` builds
one `RefundToolEnv` per rollout through `environment_factory`, renders its public methods as the
tool schemas of the prompt, and calls them when the model emits a tool call. The environment
drives the same `RefundGym` as the tabular engine, so success, violation and duplicate effects
come from the same code; the verifier-only flags stay private and are never put into the text
the model reads. The episode becomes an `agentrl.rollout.Trajectory` for the scorers.

Also here: the datasets of the train / held-out split, the chat transcript of an action
sequence (for warm-starting and for probing the policy), greedy tool-calling episodes and the
next-action distribution at a state. Torch, transformers and TRL are imported lazily inside the
functions that need a model; importing this module costs nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.tasks.refund.gym import ACTIONS, TERMINAL, RefundGym, Task
from agentrl.tasks.refund.rollout import Trajectory, Transition

SYSTEM_PROMPT = "You are a refund agent. Call one tool per turn."
USER_PROMPT = "Handle this refund request.\n"  # reset() appends the observation of the start state
FINAL_ANSWER = "Done."  # what the agent says after `finish`; any plain-text turn ends the episode
EPISODE_OVER = "error: the episode has finished"
STEP_LIMIT = "error: step limit reached"


def observation(state: str) -> str:
    """The text the model reads for a state: only the state, never the verifier's flags."""
    return f"state: {state}"


def as_task(spec: Any) -> Task:
    """A gym Task from a Task, a config TaskSpec or a dataset row."""
    if isinstance(spec, Task):
        return spec
    if isinstance(spec, dict):
        return Task(str(spec["task_id"]), int(spec["amount"]), str(spec.get("start_state") or "start"))
    return Task(spec.task_id, int(spec.amount), spec.start_state)


class RefundToolEnv:
    """One refund episode behind four tools; TRL makes one per rollout and reuses it via `reset`.

    Only the four tool methods are public functions: TRL exposes every public method as a tool.
    """

    def __init__(self, max_steps: int = 7):
        self._max_steps = max_steps
        self._gym = RefundGym()
        self._transitions: list[Transition] = []
        self.score = None  # set by the reward function (agentrl.refund_rewards); read by the run process

    def reset(self, task_id: str, amount: int, start_state: str = "start", **row: Any) -> str:
        """Start the episode of one dataset row; returns the text appended to the user message."""
        self._gym.reset(Task(str(task_id), int(amount), str(start_state or "start")))
        self._transitions = []
        self.score = None
        return observation(self._gym.state)

    def lookup(self) -> str:
        """Look up the order of this refund request."""
        return self._act("lookup")

    def request_approval(self) -> str:
        """Ask a manager to approve this refund."""
        return self._act("request_approval")

    def refund(self) -> str:
        """Pay the refund to the customer."""
        return self._act("refund")

    def finish(self) -> str:
        """End the episode."""
        return self._act("finish")

    def _act(self, action: str) -> str:
        # Transitions carry no behaviour log-prob (NaN): a tool call spans several tokens, whose
        # log-probs TRL keeps itself.
        if self._gym.done or len(self._transitions) >= self._max_steps:
            # A chat model can keep calling after `finish` or past the step limit. The gym is not
            # stepped (it refuses a step after done), but the call is still a turn the agent took:
            # it is recorded (in state 'terminal' after finish) and pays the step cost, so extra
            # calls are never free.
            state = TERMINAL if self._gym.done else self._gym.state
            self._transitions.append(Transition(state, action, math.nan))
            return EPISODE_OVER if self._gym.done else STEP_LIMIT
        self._transitions.append(Transition(self._gym.state, action, math.nan))
        return observation(self._gym.step(action))

    @property
    def task(self) -> Task | None:
        return self._gym.task

    @property
    def done(self) -> bool:
        """Whether `finish` was called (a property, so TRL does not offer it as a tool)."""
        return self._gym.done

    @property
    def trajectory(self) -> Trajectory:
        """The episode so far, with the verifier's flags read from the gym (never from the actions)."""
        gym = self._gym
        return Trajectory(
            task=gym.task,
            transitions=list(self._transitions),
            success=gym.done and gym.refunded,
            violation=gym.violation,
            duplicate_effect=gym.effects > 1,
        )


def tool_methods(env: RefundToolEnv | None = None) -> list:
    """The bound tool methods in the order TRL lists them (alphabetical, like `inspect.getmembers`)."""
    env = env or RefundToolEnv()
    return [getattr(env, name) for name in sorted(ACTIONS)]


# --- datasets ------------------------------------------------------------------------------------


def prompt_messages() -> list[dict]:
    """The chat prompt of every task; the start state arrives through `reset()`."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": USER_PROMPT}]


def task_rows(tasks: Iterable[Any]) -> list[dict]:
    """One dataset row per task: the prompt and the columns `reset()` reads."""
    rows = []
    for spec in tasks:
        task = as_task(spec)
        rows.append({"prompt": prompt_messages(), "task_id": task.task_id, "amount": task.amount, "start_state": task.start_state})
    return rows


def build_dataset(tasks: Iterable[Any]):
    """A `datasets.Dataset` of `task_rows` (the train split is `config.tasks`, held-out `config.eval_tasks`)."""
    from datasets import Dataset

    return Dataset.from_list(task_rows(tasks))


def train_and_eval_datasets(config) -> tuple[Any, Any]:
    """The train / held-out split of SPEC section 4, as the run config names it."""
    return build_dataset(config.tasks), build_dataset(config.eval_tasks)


# --- transcripts ---------------------------------------------------------------------------------


def tool_call_message(action: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": action, "arguments": {}}}]}


def transcript(task: Any, actions: Sequence[str], final_answer: bool = True) -> list[dict]:
    """The chat of `actions` played on `task`: prompt, then one tool call and its result per action.

    The gym computes every observation. After `finish` (and `final_answer`), the agent's closing
    plain-text turn is appended, as a complete episode of the tool loop ends.
    """
    task = as_task(task)
    env = RefundToolEnv(max_steps=max(7, len(actions)))
    messages = prompt_messages()
    messages[-1] = {**messages[-1], "content": messages[-1]["content"] + env.reset(**task_rows([task])[0])}
    for action in actions:
        result = getattr(env, action)()
        messages.append(tool_call_message(action))
        messages.append({"role": "tool", "name": action, "content": result})
    if final_answer and env.done:
        messages.append({"role": "assistant", "content": FINAL_ANSWER})
    return messages


def path_to_state(task: Any, state: str, max_depth: int = 6) -> list[str] | None:
    """The shortest action sequence that brings `task` to `state` (breadth-first over the gym), or None."""
    task = as_task(task)
    queue: deque[list[str]] = deque([[]])
    seen = set()
    while queue:
        actions = queue.popleft()
        gym = RefundGym()
        current = gym.reset(task)
        for action in actions:
            current = gym.step(action)
        if current == state and not gym.done:
            return actions
        key = (current, gym.refunded, gym.effects > 0)
        if key in seen or gym.done or len(actions) >= max_depth:
            continue
        seen.add(key)
        queue.extend(actions + [action] for action in ACTIONS)
    return None


# --- driving a chat model ------------------------------------------------------------------------


def render_ids(tokenizer, messages: list[dict], tools: list, add_generation_prompt: bool) -> list[int]:
    """Token ids of a conversation as TRL renders it (tools in the system block)."""
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False,
    )
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)


def tool_suffix_ids(tokenizer, tool_messages: list[dict]) -> list[int]:
    """The tokens between a tool call's end-of-turn and the next generation: TRL's `_get_tool_suffix_ids`.

    TRL does not re-render a conversation between turns; it appends these ids to the token
    stream. Warm-starting and probing build the same stream, so the model is trained and
    measured on exactly what it sees in a GRPO rollout.
    """
    calls = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    eos_positions = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if eos_positions:
        prefix = prefix[: eos_positions[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template does not preserve the prefix of a tool call; it cannot run tool episodes")
    return list(full[len(prefix):])


@dataclass
class TokenStream:
    """A conversation as the token stream of a GRPO rollout: the prompt, then generated turns and tool results."""

    ids: list[int]
    generated: list[tuple[int, int]]  # [start, end) of every assistant turn the model produced
    decisions: list[tuple[int, str]]  # (position of the first token of a tool call, the tool called)


def token_stream(tokenizer, messages: list[dict], tools: list) -> TokenStream:
    """Encode a transcript (prompt messages, then assistant/tool turns) the way TRL's tool loop builds it."""
    first = next(k for k, m in enumerate(messages) if m["role"] == "assistant")
    ids = render_ids(tokenizer, messages[:first], tools, add_generation_prompt=True)
    calls = action_continuations(tokenizer, tools)
    generated, decisions = [], []
    k = first
    while k < len(messages):
        message = messages[k]
        start = len(ids)
        if message.get("tool_calls"):
            action = message["tool_calls"][0]["function"]["name"]
            decisions.append((start, action))
            ids += calls[action]
            generated.append((start, len(ids)))
            results = []
            k += 1
            while k < len(messages) and messages[k]["role"] == "tool":
                results.append(messages[k])
                k += 1
            if results:
                ids += tool_suffix_ids(tokenizer, results)
        else:
            ids += tokenizer.encode(message["content"], add_special_tokens=False) + [tokenizer.eos_token_id]
            generated.append((start, len(ids)))
            k += 1
    return TokenStream(ids=ids, generated=generated, decisions=decisions)


def action_continuations(tokenizer, tools: list) -> dict[str, list[int]]:
    """The tokens a model emits to call each tool, up to and including its end-of-turn token.

    Derived from the chat template (a rendered call minus the generation prompt), so any
    tool-calling template works, not only the built-in model's.
    """
    base = [{"role": "user", "content": "x"}]
    prefix = render_ids(tokenizer, base, tools, add_generation_prompt=True)
    continuations = {}
    for action in ACTIONS:
        full = render_ids(tokenizer, base + [tool_call_message(action)], tools, add_generation_prompt=False)
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template does not render a tool call after its generation prompt; it cannot be probed")
        tail = full[len(prefix):]
        end = tail.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in tail else len(tail)
        continuations[action] = tail[:end]
    return continuations


def next_action_distribution(model, tokenizer, histories: Sequence[list[dict]], tools: list | None = None) -> dict[str, float]:
    """p(next tool call = a) after each history, averaged over the histories.

    Each of the four complete tool calls is scored (sum of its token log-probs under the
    model), and the four are normalised: the policy's choice among well-formed calls.
    """
    import torch

    tools = tools or tool_methods()
    continuations = action_continuations(tokenizer, tools)
    sequences, spans = [], []
    for history in histories:
        prompt = render_ids(tokenizer, history, tools, add_generation_prompt=True)
        for action in ACTIONS:
            sequences.append(prompt + continuations[action])
            spans.append((len(prompt), len(continuations[action])))
    width = max(len(s) for s in sequences)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences], device=device)
    attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences], device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention).logits.float()
    finally:
        model.train(was_training)
    logps = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1).cpu()
    totals = {action: 0.0 for action in ACTIONS}
    for h in range(len(histories)):
        scores = []
        for a in range(len(ACTIONS)):
            row = h * len(ACTIONS) + a
            start, length = spans[row]
            scores.append(logps[row, start - 1 : start - 1 + length].sum())
        probs = torch.softmax(torch.stack(scores), dim=0).tolist()
        for action, p in zip(ACTIONS, probs):
            totals[action] += p / len(histories)
    return totals


def state_histories(tasks: Iterable[Any], state: str) -> list[list[dict]]:
    """The conversations that bring each task to `state` by its shortest path (tasks that cannot reach it are skipped)."""
    histories = []
    for task in tasks:
        path = path_to_state(task, state)
        if path is not None:
            histories.append(transcript(task, path, final_answer=False))
    return histories


def run_tool_call(env: RefundToolEnv, call: dict) -> dict:
    """Execute one parsed tool call the way TRL's tool loop does; returns the tool message."""
    function = call.get("function", call)
    name = str(function.get("name"))
    try:
        if name not in ACTIONS:
            raise ValueError(f"Tool {name} not found.")
        result = str(getattr(env, name)(**(function.get("arguments") or {})))
    except Exception as error:  # TRL turns a failing call into an error result, not a crash
        result = str({"error": str(error)})
    return {"role": "tool", "name": name, "content": result}


@dataclass
class GreedyEpisode:
    """One greedy tool-calling episode: what the model did and what the verifier saw."""

    task: Task
    trajectory: Trajectory
    messages: list[dict] = field(default_factory=list)
    parse_failures: int = 0  # assistant turns that were neither a parseable call nor plain text

    @property
    def actions(self) -> list[str]:
        return self.trajectory.actions


def play_greedy(model, tokenizer, tasks: Iterable[Any], max_steps: int = 7, max_new_tokens: int = 48) -> list[GreedyEpisode]:
    """Greedy episodes of all `tasks` at once: generate a turn, run its tool calls, repeat.

    An episode ends at a plain-text turn, or after `max_steps + 2` turns (the gym cuts the
    transitions at `max_steps` itself). Tool calls are parsed with TRL's own parser.
    """
    import torch
    from trl.chat_template_utils import add_response_schema, parse_response

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    tasks = [as_task(t) for t in tasks]
    envs = [RefundToolEnv(max_steps=max_steps) for _ in tasks]
    conversations = []
    for env, task in zip(envs, tasks):
        messages = prompt_messages()
        messages[-1] = {**messages[-1], "content": messages[-1]["content"] + env.reset(**task_rows([task])[0])}
        conversations.append(messages)
    failures = [0] * len(tasks)
    active = list(range(len(tasks)))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_steps + 2):
            if not active:
                break
            prompts = [render_ids(tokenizer, conversations[i], tool_methods(envs[i]), add_generation_prompt=True) for i in active]
            width = max(len(p) for p in prompts)
            input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
            attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
            with torch.no_grad():
                out = model.generate(
                    input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens, do_sample=False,
                    eos_token_id=tokenizer.eos_token_id, pad_token_id=pad,
                )
            still = []
            for row, i in enumerate(active):
                generated = out[row, width:].tolist()
                if tokenizer.eos_token_id in generated:
                    generated = generated[: generated.index(tokenizer.eos_token_id) + 1]
                message = parse_response(tokenizer, generated, prefix=prompts[row], tools=tool_methods(envs[i]))
                calls = message.get("tool_calls") or []
                if not calls:
                    if "<tool_call>" in (message.get("content") or ""):
                        failures[i] += 1
                    conversations[i].append({"role": "assistant", "content": message.get("content") or ""})
                    continue
                conversations[i].append({"role": "assistant", "content": message.get("content") or "", "tool_calls": calls})
                for call in calls:
                    conversations[i].append(run_tool_call(envs[i], call))
                still.append(i)
            active = still
    finally:
        model.train(was_training)
    return [
        GreedyEpisode(task=task, trajectory=env.trajectory, messages=messages, parse_failures=fails)
        for task, env, messages, fails in zip(tasks, envs, conversations, failures)
    ]
