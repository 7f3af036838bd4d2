"""A run's config and summary as a script sees them: dicts that keep run.json up to date.

`agentrl.init` -> `Run.config`, `Run.summary` -> **runinfo** -> run.json -> the store's `runs`
(`config`, `summary`) and `agentrl.Api().runs()`. `run.config.update({...})` and
`run.config["lr"] = x` rewrite run.json at once (a run's settings change rarely); the summary
takes the latest value of every metric logged (as wandb's does) and whatever the script sets,
written when it sets it and when the run ends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


class SavedDict(dict):
    """A dict that calls `save(self)` after every change through its own methods."""

    def __init__(self, values: Mapping | None, save: Callable[[dict], None]):
        super().__init__(values or {})
        self._save = save

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._save(self)

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._save(self)

    def update(self, values: Any = None, /, allow_val_change: bool = True, **more) -> None:  # noqa: D417 - wandb's keyword
        """Add or change entries (`allow_val_change` is wandb's keyword, accepted and ignored)."""
        if values is not None:
            values = values if isinstance(values, Mapping) else plain(values)
            super().update(values)
        super().update(more)
        self._save(self)

    def setdefaults(self, values: Mapping) -> None:
        """wandb's `config.setdefaults`: add the entries not set yet."""
        for key, value in values.items():
            super().setdefault(key, value)
        self._save(self)

    def __getattr__(self, name: str):
        # run.config.lr, as wandb's config reads
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def plain(config: Any) -> dict[str, Any]:
    """`config` as a JSON object; see `agentrl.record.api.plain_config`."""
    from agentrl.record.api import plain_config

    return plain_config(config)
