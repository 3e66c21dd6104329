"""The embedded CPU GRPO trainer: real GRPO + LoRA on a tiny character-level Llama.

Only `defaults` and `probe` are torch-free; everything else here needs the `cpu` extra (torch,
transformers, peft) and runs inside jobs, never on the login node.
"""
