"""The language-model engine: TRL's GRPOTrainer with a LoRA adapter, the veto inside it, the
memory budget (SPEC section 11), and the run process that records it."""
