"""Tasks: what an agent is trained to do, behind one contract (`Task`) and one loader (`load_task`).

Launch -> config (`task`) -> **tasks** -> engine. `contract` defines the Task object in TRL's own
shapes (an environment class whose methods are the tools, reward functions, datasets) plus the
guard's `verify` and the review hooks; `loader` imports and checks a task from `module:attr` or
`path/to/file.py:attr`. `refund/` and `coding/` are the built-in tasks, on the same contract.
"""

from agentrl.tasks.contract import DecisionPoint, Task, Verdict
from agentrl.tasks.loader import BUILTIN_TASKS, TaskError, load_task

__all__ = ["BUILTIN_TASKS", "DecisionPoint", "Task", "TaskError", "Verdict", "load_task"]
