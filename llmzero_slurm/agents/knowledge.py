"""What the agents are told about GRPO metrics and hyperparameters.

LLMs often misread RL training logs (PPO ratio clipping vs. response truncation is the classic
confusion), so both agents get short grounding notes. The hyperparameter notes are generated
from the shared vocabulary in `hparams.PARAMS`, so they can never drift from what validation
accepts.
"""
from __future__ import annotations

from ..backends.base import TrainerBackend
from ..hparams import BATCH, CAPACITY, MEMORY, MODEL, PARAMS, REGULARISATION, SCHEDULE, Param

METRICS: dict[str, str] = {
    "validation score": "Mean accuracy on the held-out validation set, logged every test_freq "
                        "steps. The search optimises this and nothing else.",
    "critic/rewards/mean": "Mean reward of this step's sampled responses: the main sign of "
                           "progress on the training data. It normally rises.",
    "critic/score/mean": "Mean task score before any KL penalty is subtracted; equals the "
                         "reward when the KL penalty is not in the reward.",
    "actor/entropy": "Average token entropy of the policy (how much it still explores). "
                     "Falling while rewards rise is normal; falling while rewards stall means "
                     "the policy is narrowing without learning anything.",
    "actor/kl_loss": "Divergence of the policy from the reference (the base model with the "
                     "adapter switched off). Small and slowly rising is fine; a sudden jump "
                     "followed by falling rewards marks a collapse.",
    "actor/ppo_kl": "Divergence between the policy before and after this step's updates. A "
                    "spike followed by a reward drop means the updates were too large.",
    "actor/pg_loss": "Policy-gradient loss. With group-normalised advantages it hovers near "
                     "zero; its trend says little on its own.",
    "actor/pg_clipfrac": "Share of tokens whose probability ratio hit the upper PPO bound "
                         "(clip_ratio_high). Above about 0.3 most updates are being cut. This "
                         "has nothing to do with response length.",
    "actor/pg_clipfrac_lower": "Share of tokens whose ratio hit the lower PPO bound "
                               "(clip_ratio_low). Also unrelated to response length.",
    "actor/grad_norm": "Global gradient norm before clipping. Spikes mean instability; values "
                       "near zero mean the model has stopped receiving a learning signal "
                       "(e.g. every sample in a group scores the same).",
    "response_length/mean": "Average response length in tokens, capped by max_response_length. "
                            "Read it together with the rewards.",
    "response_length/clip_ratio": "Share of responses cut off at max_response_length "
                                  "(truncation). Not the PPO clip. High values mean answers "
                                  "are being lost.",
    "timing_s/step": "Seconds per training step; a jump can mean memory pressure.",
    "actor/perf/max_memory_reserved_gb": "Peak accelerator memory reserved (GB); close to the "
                                         "device size means an out-of-memory risk.",
    "perf/max_rss_gb": "Peak host memory of the trainer process (GB), the CPU trainer's "
                       "memory gauge.",
}

_CATEGORY_NOTES = {
    REGULARISATION: "Regularisation and exploration (free to move either way between phases)",
    CAPACITY: "Capacity (along one strategy these normally only grow: shrinking them throws "
              "away what earlier phases built)",
    SCHEDULE: "Schedule",
    BATCH: "Batch shape",
    MEMORY: "Rollout engine memory",
    MODEL: "LoRA (fixed for a whole strategy: a resumed phase loads its parent's adapter)",
}


def _range(param: Param, backend: str) -> str:
    if param.choices:
        return "one of " + ", ".join(map(str, param.choices))
    if param.type is bool:
        return "true/false"
    low_bound, high_bound = param.bounds(backend)
    if low_bound is not None and high_bound is not None:
        low, high = (int(low_bound), int(high_bound)) if param.type is int else (
            f"{low_bound:g}", f"{high_bound:g}")
        return f"{param.type.__name__} in [{low}, {high}]"
    return param.type.__name__


def metric_guide() -> str:
    return "\n".join(f"- {name}: {text}" for name, text in METRICS.items())


def hparam_guide(backend: TrainerBackend, exclude: tuple[str, ...] = ()) -> str:
    """The vocabulary an answer may use for this trainer backend, grouped by category."""
    sections = []
    for category, title in _CATEGORY_NOTES.items():
        rows = [f"- {p.name} ({_range(p, backend.name)}): {p.description}" for p in PARAMS.values()
                if p.category == category and backend.reads(p.name) and p.name not in exclude]
        if rows:
            sections.append(f"{title}:\n" + "\n".join(rows))
    return "\n\n".join(sections)
