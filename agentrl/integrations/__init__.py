"""Integrations with other training code: `trl` (a TrainerCallback any GRPO script can add)."""
