"""One GRPO phase on the tiny model: rollouts, rewards, clipped updates, validation, checkpoints.

The loop mirrors verl's ray trainer closely enough that every metric means the same thing:
validate at the phase start, then per step sample `rollout_n` responses per prompt, score
them, compute reference log-probs with the adapter switched off, normalise rewards within
each prompt group, and take one optimiser step per mini-batch.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from statistics import fmean as _mean
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..errors import DataError
from ..metrics import best_val, val_score
from ..metrics_reader import read_metrics
from ..store.atomic import write_json
from ..store.node_dir import NodeDir
from ..tasks.dataset import Example
from ..tasks.reward_file import Judgement, RewardFn, judge
from . import checkpoint, grpo, policy
from .data_stream import DataStream
from .memory import memory_metrics
from .metrics_log import MetricsLog
from .model import with_lora
from .tokenizer import CharTokenizer
from .warmstart import WarmStart, load_base


@dataclass
class Phase:
    """Everything one phase needs; `hparams` is complete and already validated."""

    train: Sequence[Example]
    val: Sequence[Example]
    test: Sequence[Example]
    reward: RewardFn
    reward_path: Path
    hparams: dict[str, Any]
    output_dir: Path
    cache_dir: Path
    device: torch.device
    warm_start: WarmStart = field(default_factory=WarmStart)
    init_adapter: Path | None = None
    step_offset: int = 0


class GRPOTrainer:
    def __init__(self, phase: Phase, log: Callable[[str], None] = print,
                 should_stop: Callable[[], bool] = lambda: False):
        """Builds the base first when no cache has it: WarmStartStopped once `should_stop`
        says so while it trains."""
        self.phase, self.hp, self.log = phase, phase.hparams, log
        self.tok = CharTokenizer()
        if len(phase.train) < self.hp["train_batch_size"]:
            # verl's dataloader drops the ragged tail: it would have no batch to train on.
            raise DataError("the train split", f"has {len(phase.train)} rows, fewer than "
                            f"train_batch_size {self.hp['train_batch_size']}: lower it, or "
                            "give the task more training rows")
        for split, examples in (("train", phase.train), ("val", phase.val), ("test", phase.test)):
            self._check_prompt_lengths(split, examples)
        self.files = NodeDir(phase.output_dir)
        self.ckpt_dir = self.files.ckpt
        checkpoint.remove_partial(self.ckpt_dir)
        checkpoint.remove_partial(phase.output_dir, self.files.best_adapter.name)
        resume = checkpoint.latest(self.ckpt_dir)
        # Read before any model is built on a device that cannot resume it.
        state = checkpoint.load_state(resume[1], phase.device.type) if resume else {}
        base, base_id, self.base = load_base(self.tok, phase.train, phase.reward,
                                             phase.reward_path, phase.warm_start,
                                             phase.cache_dir, log, should_stop)
        adapter = resume[1] if resume else phase.init_adapter
        self.model = with_lora(base.to(phase.device),  # type: ignore[arg-type]  # transformers' .to() stub
                               base_id, self.hp["lora_rank"],
                               self.hp["lora_alpha"], self.hp["target_modules"], adapter)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optim = torch.optim.AdamW(self.params, lr=self.hp["lr"],
                                       weight_decay=self.hp["weight_decay"])
        self.sampler = torch.Generator(device=phase.device).manual_seed(self.hp["seed"])
        self.total_steps = self.hp["total_training_steps"] or max(
            1, len(phase.train) // self.hp["train_batch_size"]) * self.hp["total_epochs"]
        self.local_step = 0
        self.data = DataStream.at_step(len(phase.train), self.hp["train_batch_size"],
                                       self.hp["seed"], phase.step_offset)
        self.metrics = MetricsLog(self.files.metrics_file)
        if resume:
            self._restore(state, resume[1] / checkpoint.STATE_FILE)
            log(f"resumed own checkpoint {resume[1].name} (phase step {self.local_step})")
        self._forget_after(self.global_step if resume else phase.step_offset - 1)
        self.best_score = self._best_so_far()

    @property
    def global_step(self) -> int:
        return self.phase.step_offset + self.local_step

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Train to the last step; return False when stopped early by `should_stop`."""
        try:
            if self.local_step == 0:
                self.metrics.write(self.global_step, self.evaluate())
            while self.local_step < self.total_steps:
                if should_stop():
                    saved = checkpoint.latest(self.ckpt_dir)
                    if self.local_step and (saved is None or saved[0] != self.global_step):
                        self.save()   # so a requeued or evolved run loses no finished step
                    return False
                data = self.train_step()
                self.local_step += 1
                last = self.local_step == self.total_steps
                if last or self.local_step % self.hp["test_freq"] == 0:
                    data.update(self.evaluate())
                    self._keep_if_best(data)
                    self.log(f"step {self.global_step}: " + ", ".join(
                        f"{k}={v:.3f}" for k, v in data.items() if "-core/" in k))
                self.metrics.write(self.global_step, data)
                if last or self.local_step % self.hp["save_freq"] == 0:
                    self.save()
            return True
        finally:
            self.metrics.close()

    # -- one step ---------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        hp, started = self.hp, time.perf_counter()
        examples = self._next_batch()
        n = hp["rollout_n"]
        prompts = [self.tok.prompt_ids(ex.messages) for ex in examples for _ in range(n)]
        batch = policy.sample(self.model, self.tok, prompts, hp["max_response_length"],
                              hp["temperature"], self.sampler, self.phase.device)
        scores = self._scores([ex for ex in examples for _ in range(n)], batch)
        ref_logp = self._reference_logp(batch)
        mask = batch.response_mask.float()
        rewards = scores
        if hp["use_kl_in_reward"]:
            kl = grpo.kl_penalty(batch.old_logp, ref_logp, "kl") * mask
            rewards = scores - hp["kl_in_reward_coef"] * kl.sum(-1)
        adv = grpo.group_advantages(rewards, n, hp["norm_adv_by_std_in_grpo"])
        stats = self._update(batch, ref_logp, adv)
        lengths = batch.lengths.float()
        stats.update({
            "critic/score/mean": scores.mean().item(),
            "critic/rewards/mean": rewards.mean().item(),
            "critic/advantages/mean": adv.mean().item(),
            "response_length/mean": lengths.mean().item(),
            "response_length/clip_ratio":
                (lengths >= hp["max_response_length"]).float().mean().item(),
            "actor/lr": self.optim.param_groups[0]["lr"],
            "training/global_step": float(self.global_step + 1),
            "training/epoch": float(self.data.epoch),
            "timing_s/step": time.perf_counter() - started,
            **memory_metrics(self.phase.device),
        })
        return stats

    def _update(self, batch: policy.Batch, ref_logp: torch.Tensor,
                adv: torch.Tensor) -> dict[str, float]:
        """One optimiser step per mini-batch of prompts, accumulating over micro-batches."""
        hp = self.hp
        mini = hp["ppo_mini_batch_size"] * hp["rollout_n"]
        sums: dict[str, float] = {}
        updates = 0
        for start in range(0, len(adv), mini):
            self.optim.zero_grad(set_to_none=True)
            idx_mini = torch.arange(start, min(start + mini, len(adv)), device=adv.device)
            for micro in idx_mini.split(hp["ppo_micro_batch_size_per_gpu"]):
                part = batch.select(micro)
                mask = part.response_mask.float()
                logp, entropy = policy.response_logp(self.model, part, hp["temperature"], True)
                pg_loss, stats = grpo.policy_loss(logp, part.old_logp, adv[micro], mask,
                                                  hp["clip_ratio_low"], hp["clip_ratio_high"])
                kl = grpo.masked_mean(grpo.kl_penalty(logp, ref_logp[micro],
                                                      hp["kl_loss_type"]), mask)
                assert entropy is not None   # asked for with True above
                ent = grpo.masked_mean(entropy, mask)
                loss = pg_loss - hp["entropy_coeff"] * ent
                if hp["use_kl_loss"]:
                    loss = loss + hp["kl_loss_coef"] * kl
                (loss * len(micro) / len(idx_mini)).backward()
                stats.update({"actor/pg_loss": pg_loss.item(), "actor/kl_loss": kl.item(),
                              "actor/entropy": ent.item()})
                for key, value in stats.items():
                    sums[key] = sums.get(key, 0.0) + value * len(micro) / len(idx_mini)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, hp["grad_clip"]).item()
            if math.isfinite(grad_norm):   # verl skips the update on a non-finite norm
                self.optim.step()
            sums["actor/grad_norm"] = sums.get("actor/grad_norm", 0.0) + grad_norm
            updates += 1
        return {k: v / updates for k, v in sums.items()}

    @torch.no_grad()
    def _reference_logp(self, batch: policy.Batch) -> torch.Tensor:
        """Log-probs under the base model: the policy with its adapter switched off."""
        parts = []
        with self.model.disable_adapter():
            for idx in torch.arange(len(batch.prompt), device=batch.prompt.device).split(
                    self.hp["log_prob_micro_batch_size_per_gpu"]):
                parts.append(policy.response_logp(self.model, batch.select(idx),
                                                  self.hp["temperature"])[0])
        return torch.cat(parts)

    def _judge(self, examples: Sequence[Example], batch: policy.Batch) -> list[Judgement]:
        texts = [self.tok.decode(r) for r in batch.response.tolist()]
        return [judge(self.phase.reward, self.phase.reward_path, ex.data_source, text,
                      ex.ground_truth, ex.extra_info) for ex, text in zip(examples, texts)]

    def _scores(self, examples: Sequence[Example], batch: policy.Batch) -> torch.Tensor:
        return torch.tensor([j.score for j in self._judge(examples, batch)],
                            device=self.phase.device)

    # -- validation -------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy per data source as the core metric `acc` (a dict reward's 'acc', else
        the reward); a reward that reports its accuracy apart also keeps its score as the aux
        metric `reward`, as verl's validation does. val-... is what agents see, test-... never
        reaches them."""
        out: dict[str, float] = {}
        for split, examples in (("val", self.phase.val), ("test", self.phase.test)):
            judged: dict[str, list[Judgement]] = {}
            for start in range(0, len(examples), 512):
                chunk = examples[start:start + 512]
                batch = policy.sample(self.model, self.tok,
                                      [self.tok.prompt_ids(ex.messages) for ex in chunk],
                                      self.hp["max_response_length"], 1.0, None,
                                      self.phase.device)
                for ex, result in zip(chunk, self._judge(chunk, batch)):
                    judged.setdefault(ex.data_source, []).append(result)
            for source, results in judged.items():
                out[f"{split}-core/{source}/acc/mean@1"] = _mean(r.accuracy for r in results)
                if any(r.acc is not None for r in results):   # a separate training reward
                    out[f"{split}-aux/{source}/reward/mean@1"] = _mean(r.score for r in results)
        return out

    # -- data order and state ---------------------------------------------------------------

    def _next_batch(self) -> list[Example]:
        return [self.phase.train[i] for i in self.data.next_batch()]

    def save(self) -> None:
        state = {"local_step": self.local_step, "global_step": self.global_step,
                 "epoch": self.data.epoch, "position": self.data.position,
                 "optimizer": self.optim.state_dict(), "sampler": self.sampler.get_state(),
                 "hparams": self.hp}
        checkpoint.save(self.ckpt_dir, self.global_step, self.model, state, self.phase.device.type)

    def _keep_if_best(self, data: dict[str, float]) -> None:
        """Keep the adapter of a validation step that beats every earlier one of this phase
        (the step the search reports as the phase's best)."""
        score = val_score(data)
        if score is None or not math.isfinite(score) or score <= self.best_score:
            return
        self.best_score = score
        record = {"step": self.global_step, "val_score": score}
        checkpoint.save_adapter(self.files.best_adapter, self.model, lambda tmp: write_json(
            tmp / self.files.best_adapter_record.name, record))

    def _forget_after(self, step: int) -> None:
        """Go back to `step`: the steps after it are trained again, so their metrics go, and so
        does a best adapter of one of them, or it would keep weights whose score no metric
        holds (best at 15, checkpoint at 10, killed at 17) until a rerun step beat it."""
        self.metrics.truncate_after(step)
        if (best := self.files.best_adapter_step()) is not None and best[0] > step:
            checkpoint.remove_adapter(self.files.best_adapter)

    def _best_so_far(self) -> float:
        """The best validation score of the metrics this phase keeps (a requeued job goes on
        against its own earlier steps; a fresh start against nothing)."""
        best = best_val(read_metrics(self.files.metrics_file).after(self.phase.step_offset)
                        .without_test())
        return best[1] if best else -math.inf

    def _restore(self, state: dict[str, Any], path: Path) -> None:
        """Go on from a saved state; one another release wrote in a form this one cannot
        resume is named, with that release (its "llmzero_version"), not a bare KeyError."""
        try:
            self.local_step = state["local_step"]
            self.data = DataStream(self.data.size, self.data.batch_size, self.data.seed,
                                   state["epoch"], state["position"])
            self.optim.load_state_dict(state["optimizer"])
            self.sampler.set_state(state["sampler"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise checkpoint.unresumable(state, path, exc) from None

    def _check_prompt_lengths(self, split: str, examples: Sequence[Example]) -> None:
        limit = self.hp["max_prompt_length"]
        for i, ex in enumerate(examples):
            if (tokens := len(self.tok.prompt_ids(ex.messages))) > limit:
                raise DataError(split, f"row {i}: prompt of {tokens} tokens exceeds "
                                f"max_prompt_length={limit}")
