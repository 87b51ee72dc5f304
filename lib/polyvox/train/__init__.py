"""Training: GRPO with LoRA on TRL (:mod:`.grpo`), small causal LMs from scratch (:mod:`.pretrain`)."""
