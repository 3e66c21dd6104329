"""llmzero-slurm: LLM-agent search over multi-stage GRPO training strategies, run as Slurm jobs."""

# The one place the version is written: setup.cfg reads it (version = attr: ...), meta.json
# records it as the release that created a run, and the CPU trainer in its trainer_state.pt.
__version__ = "0.4.0"
