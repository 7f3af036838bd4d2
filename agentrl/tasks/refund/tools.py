"""The refund gym as chat tools: what a language-model policy sees and calls (SPEC sections 2-4).

Sits inside the LM run process (launch -> **run process** -> chunks): TRL's `GRPOTrainer` builds
one `RefundToolEnv` per rollout through `environment_factory`, renders its public methods as the
tool schemas of the prompt, and calls them when the model emits a tool call. The environment
drives the same `RefundGym` as the tabular engine, so success, violation and duplicate effects
come from the same code; the verifier-only flags stay private and are never put into the text
the model reads. The episode becomes an `agentrl.rollout.Trajectory` for the scorers; the refund
task on the Task contract (`agentrl.tasks.refund.task`) reads it.

Also here: the dataset rows of the train / held-out split, the chat transcript of an action
sequence (for warm-starting and for probing the policy), and the refund views of the generic
episode helpers (`agentrl.tasks.episodes`): greedy episodes and the next-action distribution at a
state. Torch, transformers and TRL are imported lazily inside the functions that need a model;
importing this module costs nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.tasks.episodes import (  # noqa: F401 - render_ids, token_stream: the refund model's builder and tests use them here
    TokenStream,
    call_continuations,
    call_message,
    next_call_distribution,
    render_ids,
    token_stream,
    tool_suffix_ids,
)
from agentrl.tasks.episodes import play_greedy as generic_play_greedy
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

    def reset(self, task_id: str, amount: int, start_state: str = "start", **row: Any) -> str:
        """Start the episode of one dataset row; returns the text appended to the user message."""
        self._gym.reset(Task(str(task_id), int(amount), str(start_state or "start")))
        self._transitions = []
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


# --- transcripts ---------------------------------------------------------------------------------


def tool_call_message(action: str) -> dict:
    return call_message(action)


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


def action_calls() -> dict[str, dict]:
    """The four tool calls, in `ACTIONS` order (none takes arguments)."""
    return {action: {"name": action, "arguments": {}} for action in ACTIONS}


def action_continuations(tokenizer, tools: list) -> dict[str, list[int]]:
    """The tokens a model emits to call each tool, up to and including its end-of-turn token."""
    return call_continuations(tokenizer, tools, action_calls())


def next_action_distribution(model, tokenizer, histories: Sequence[list[dict]], tools: list | None = None) -> dict[str, float]:
    """p(next tool call = a) after each history, averaged over the histories: each of the four
    complete tool calls is scored under the model, and the four are normalised."""
    return next_call_distribution(model, tokenizer, histories, tools or tool_methods(), action_calls())


def state_histories(tasks: Iterable[Any], state: str) -> list[list[dict]]:
    """The conversations that bring each task to `state` by its shortest path (tasks that cannot reach it are skipped)."""
    histories = []
    for task in tasks:
        path = path_to_state(task, state)
        if path is not None:
            histories.append(transcript(task, path, final_answer=False))
    return histories


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
    """Greedy episodes of all `tasks` at once (`agentrl.tasks.episodes.play_greedy` on the refund tools)."""
    from agentrl.tasks.contract import Task as TaskContract

    tasks = [as_task(t) for t in tasks]
    task = TaskContract(name="refund", environment_factory=lambda: RefundToolEnv(max_steps=max_steps), reward_funcs=[],
                        train_dataset=[])
    episodes = generic_play_greedy(model, tokenizer, task, task_rows(tasks), max_turns=max_steps + 1, max_new_tokens=max_new_tokens)
    return [GreedyEpisode(task=t, trajectory=e.environment.trajectory, messages=e.messages, parse_failures=e.parse_failures)
            for t, e in zip(tasks, episodes)]
