"""The verl 0.9.1 backend: one phase's configuration as Hydra overrides of verl's `ppo_trainer`.

Everything verl-specific that a phase needs is decided in this package, as a plain list of
`key=value` strings that `python3 -m verl.trainer.main_ppo` accepts verbatim. The list is
built from three sources, in this order:

1. fixed choices that make a run a GRPO phase of this system (estimator, file logger,
   per-phase checkpoint directory with `resume_mode=auto`, data files, reward function);
2. the shared hyperparameter vocabulary (`llmzero_slurm.hparams`), each name mapped to the
   verl key(s) that really read it;
3. raw extra overrides from the experiment config, `trainer.overrides` (a list of strings),
   for anything the vocabulary does not cover, e.g. `actor_rollout_ref.model.use_shm=true`.

verl 0.9.1 has keys that compose without error yet do nothing; those traps, raw overrides
of keys this package manages, and raw overrides that break resuming from a phase's checkpoints
are refused with the reason before any script is written.

The `trainer:` section of experiment.yaml for `backend: verl` takes:

    python: python3                # the interpreter with verl on the GPU nodes
    rollout_engine: vllm           # actor_rollout_ref.rollout.name (vllm | sglang)
    overrides: []                  # raw Hydra overrides appended last (checked, see above)
    extra_loggers: []              # e.g. [wandb] (its jobs keep WANDB_API_KEY); 'console'
                                   # and 'file' are always on
    test_data_sources: []          # data_source values of task.test_files (read from the
                                   # parquet when omitted) whose val-core/ metrics are test scores

One job per module: `grammar` (Hydra's override syntax), `keys` (which verl key reads which
hyperparameter, and what is set per phase), `traps` (keys that compose but do nothing or
break resuming), `settings` (the `trainer:` section), `overrides` (a phase's complete list),
`data` (data sources of parquet files), `schema` (composing the list against verl's own
config), `backend` (the TrainerBackend) and `metrics_copy` (a stand-alone script run beside
verl in the job).
"""
from __future__ import annotations

from .backend import VerlBackend

__all__ = ["VerlBackend"]
