"""llmzero-slurm: LLM-agent search over multi-stage GRPO training strategies, run as Slurm jobs."""

__version__ = "0.1.0"
