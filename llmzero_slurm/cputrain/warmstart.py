"""The base model: a supervised warm start calibrated on accuracy, cached by what made it.

GRPO needs a policy that sometimes gets the answer right, and the search needs room above it.
A fixed number of supervised steps does not give that: the tiny model's accuracy climbs in a
sharp transition (about 0.1 to 0.9 within 200 steps) whose onset moves by a hundred steps or
more between CPUs and math-library code paths, so one step count gives 0.06 on one machine and
0.27 on another. Instead the warm start trains until its greedy accuracy on a probe (a held-out
slice of the training split; never the validation or test split) reaches a target band:

- every `EVAL_EVERY` steps it measures the probe; once the probe reaches the band's low end it
  stops there, or, when that overshoots the band, it replays the last interval one step at a
  time from a snapshot (same batches, same numerics) and stops at the first step that reaches it;
- the result is deterministic for given data on one numeric path, lands in the band on every
  path, and is cached with the accuracy and step it reached (`warm_start.json`).

Other modes for a user's own data: a fixed number of steps, or none (the random model).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from ..errors import DataError, LockTimeout
from ..paths import CACHE_ENV
from ..store.locks import FlockLock
from ..tasks.dataset import Example
from ..tasks.reward_file import RewardFn
from . import policy
from .checkpoint import take_umask
from .defaults import WARM_START_BAND, WARM_START_MAX_STEPS
from .model import ARCHITECTURE, base_name, random_model, weighed_id
from .probe import PROBE_SIZE, accuracy, check_written, split_probe
from .tokenizer import CharTokenizer

BATCH_SIZE, LR, SEED = 64, 3e-3, 0
EVAL_EVERY = 10            # coarse probe interval, steps
RECORD = "warm_start.json"
WEIGHTS = "model.safetensors"     # what save_pretrained writes the base's weights to


class WarmStartStopped(Exception):
    """The warm start was asked to stop (SIGTERM) before it finished: nothing is cached, so
    the next phase on this data trains the base again rather than take a cut one."""

    def __init__(self, step: int):
        super().__init__(f"warm start: stopped at step {step}; the base is not cached")


@dataclass(frozen=True)
class WarmStart:
    """How the base is made. `steps` set: exactly that many steps (0 = no warm start, the
    randomly initialised model); otherwise train until the probe accuracy is in `band`,
    giving up after `max_steps`."""

    band: tuple[float, float] = WARM_START_BAND
    max_steps: int = WARM_START_MAX_STEPS
    steps: int | None = None
    # A user's reward function (reward_file.fingerprint): it decides when a band is reached.
    # A built-in task's reward is fixed with its data, which the base's name holds already.
    reward: str | None = None

    def __post_init__(self) -> None:
        low, high = self.band
        if not 0.0 < low < high <= 1.0:
            raise DataError("--warm-start-band", f"needs 0 < low < high <= 1 (got {low}:{high})")
        if self.max_steps < 1:
            raise DataError("--warm-start-max-steps", f"must be positive (got {self.max_steps})")
        if self.steps is not None and self.steps < 0:
            raise DataError("--warm-start-steps", f"must be 0 or positive (got {self.steps})")

    def describe(self) -> str:
        if self.steps == 0:
            return "no warm start"
        if self.steps is not None:
            return f"{self.steps} supervised steps"
        return (f"supervised steps until held-out training accuracy is in "
                f"[{self.band[0]:.2f}, {self.band[1]:.2f}] (at most {self.max_steps})")

    def key(self) -> dict:
        """What decides the result (and so the cache entry)."""
        if self.steps is not None:
            return {"steps": self.steps, "batch": BATCH_SIZE, "lr": LR, "seed": SEED}
        key = {"band": list(self.band), "max_steps": self.max_steps, "batch": BATCH_SIZE,
               "lr": LR, "seed": SEED, "every": EVAL_EVERY, "probe": PROBE_SIZE}
        return key if self.reward is None else {**key, "reward": self.reward}


@dataclass
class BaseRecord:
    """What the warm start reached, stored beside the cached base."""

    name: str
    mode: str
    steps: int
    probe_accuracy: float | None
    probe_rows: int
    band: tuple[float, float] | None
    curve: list[tuple[int, float]]
    seconds: float
    numerics: dict[str, str]


def numeric_path() -> dict[str, str]:
    """The settings that choose floating-point code paths, recorded with a base."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "MKL_CBWR": os.environ.get("MKL_CBWR", ""),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", ""),
            "threads": str(torch.get_num_threads())}


def base_id(tok: CharTokenizer, examples: Sequence[Example], plan: WarmStart) -> str:
    """A name for the base model that changes whenever anything that shaped it changes."""
    digest = hashlib.sha256(json.dumps([ARCHITECTURE, plan.key(), tok.fingerprint()]).encode())
    for ex in examples:
        digest.update(json.dumps([ex.messages, ex.ground_truth], default=str).encode())
    return f"llmzero-tiny-llama-{digest.hexdigest()[:16]}"


def base_folder(cache_dir: Path, base: str) -> Path:
    """Where the cache keeps the base of id or name `base`."""
    return Path(cache_dir) / "base" / base_name(base)


def load_base(tok: CharTokenizer, examples: Sequence[Example], reward: RewardFn,
              reward_path: Path, plan: WarmStart, cache_dir: Path,
              log: Callable[[str], None] = print, should_stop: Callable[[], bool] = lambda: False,
              ) -> tuple[LlamaForCausalLM, str, BaseRecord]:
    """The warm-started base for this training data, training and caching it on first use;
    with its id (model.weighed_id), which adapters trained on it carry. WarmStartStopped
    once `should_stop` says so, between two steps of its training."""
    name = base_id(tok, examples, plan)
    folder = base_folder(cache_dir, name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # flock, never a soft lock: a job killed while it trains the base (a time limit, the OOM
    # killer) leaves no marker that every later phase would wait on.
    path = folder.with_name(folder.name + ".lock")
    lock = partial(FlockLock, path, without_flock=(
        f"set trainer.cache_dir (or ${CACHE_ENV}) to a folder on a filesystem that has it"))
    with ExitStack() as held:
        try:
            held.enter_context(lock(timeout=0).hold())
        except LockTimeout:   # another run's phase, whose log alone would say why this one waits
            log(f"warm start: waiting for another job, which trains or reads base {name} "
                f"(holding {path}); this phase goes on once it is done")
            held.enter_context(lock(timeout=-1).hold())
        if not (folder / RECORD).exists():
            log(f"warm start: training base {name}: {plan.describe()}")
            # Training reseeds torch's global generator, which the caller's LoRA initialisation
            # then draws from: without the fork, a phase that built the base would start from
            # other weights than one that found it cached (a rerun by hand, say).
            with torch.random.fork_rng(devices=[]):
                model, record = train_base(tok, examples, reward, reward_path, plan, name, log,
                                           should_stop)
            tmp = folder.with_name(f".{name}.{os.getpid()}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            model.save_pretrained(tmp)
            (tmp / RECORD).write_text(json.dumps(asdict(record), indent=2) + "\n", encoding="utf-8")
            take_umask(tmp)
            shutil.rmtree(folder, ignore_errors=True)   # a folder without its record is partial
            os.replace(tmp, folder)
    record = BaseRecord(**json.loads((folder / RECORD).read_text(encoding="utf-8")))
    model = LlamaForCausalLM.from_pretrained(folder)
    for p in model.parameters():
        p.requires_grad_(False)
    return model, weighed_id(name, folder / WEIGHTS), record


class _Probe:
    """Greedy accuracy on held-out training rows, scored by the task's own reward."""

    def __init__(self, tok: CharTokenizer, rows: Sequence[Example], reward: RewardFn,
                 reward_path: Path):
        self.tok, self.rows, self.reward, self.reward_path = tok, rows, reward, reward_path
        self.prompts = [tok.prompt_ids(ex.messages) for ex in rows]
        self.max_new = max(len(tok.encode(ex.answer)) for ex in rows) + 1

    @torch.no_grad()
    def accuracy(self, model: LlamaForCausalLM) -> float:
        model.eval()
        batch = policy.sample(model, self.tok, self.prompts, self.max_new, 1.0, None,
                              torch.device("cpu"))
        model.train()
        return accuracy(self.reward, self.reward_path, self.rows,
                        [self.tok.decode(r) for r in batch.response.tolist()])


class _Trainer:
    """Teacher-forced training on prompt -> answer + EOS; only answer tokens carry loss."""

    def __init__(self, tok: CharTokenizer, rows: Sequence[Example],
                 should_stop: Callable[[], bool]):
        self.tok, self.should_stop = tok, should_stop
        self.model = random_model(tok, SEED)
        self.gen = torch.Generator().manual_seed(SEED)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=LR)
        self.pairs = [(tok.prompt_ids(ex.messages), tok.encode(ex.answer) + [tok.eos_id])
                      for ex in rows]
        self.step = 0
        self.model.train()

    def train_step(self) -> None:
        if self.should_stop():
            raise WarmStartStopped(self.step)
        pick = torch.randint(len(self.pairs), (BATCH_SIZE,), generator=self.gen).tolist()
        ids, labels = _teacher_batch([self.pairs[i] for i in pick], self.tok.pad_id)
        logits = self.model(input_ids=ids, attention_mask=(ids != self.tok.pad_id).long()).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[:, 1:].reshape(-1), ignore_index=-100)
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        self.step += 1

    def snapshot(self) -> dict:
        return {"model": copy.deepcopy(self.model.state_dict()),
                "optim": copy.deepcopy(self.optim.state_dict()),
                "gen": self.gen.get_state(), "step": self.step}

    def restore(self, snap: dict) -> None:
        self.model.load_state_dict(snap["model"])
        self.optim.load_state_dict(snap["optim"])
        self.gen.set_state(snap["gen"])
        self.step = snap["step"]


def train_base(tok: CharTokenizer, examples: Sequence[Example], reward: RewardFn,
               reward_path: Path, plan: WarmStart, name: str,
               log: Callable[[str], None] = print, should_stop: Callable[[], bool] = lambda: False,
               ) -> tuple[LlamaForCausalLM, BaseRecord]:
    started = time.perf_counter()
    if plan.steps is not None:
        trainer = _Trainer(tok, examples, should_stop)
        for _ in range(plan.steps):
            trainer.train_step()
        return trainer.model, BaseRecord(name, "steps" if plan.steps else "none", plan.steps,
                                         None, 0, None, [], time.perf_counter() - started,
                                         numeric_path())
    rows, probe_rows = split_probe(examples)
    low, high = plan.band
    check_written(reward, reward_path, probe_rows, low)
    probe = _Probe(tok, probe_rows, reward, reward_path)
    trainer = _Trainer(tok, rows, should_stop)
    curve = [(0, probe.accuracy(trainer.model))]
    before = trainer.snapshot()
    while curve[-1][1] < low:
        if trainer.step >= plan.max_steps:
            raise DataError("warm start", f"held-out training accuracy reached only "
                            f"{max(a for _, a in curve):.3f} in {plan.max_steps} supervised "
                            f"steps, below the target band's low end {low:.2f}: raise "
                            "task.warm_start.max_steps (--warm-start-max-steps), lower "
                            "task.warm_start.band (--warm-start-band), or set "
                            "task.warm_start.steps (--warm-start-steps; 0 for none)")
        before = trainer.snapshot()
        for _ in range(min(EVAL_EVERY, plan.max_steps - trainer.step)):
            trainer.train_step()
        curve.append((trainer.step, probe.accuracy(trainer.model)))
        if trainer.step % 100 == 0:
            log(f"warm start: step {trainer.step}, held-out accuracy {curve[-1][1]:.3f}")
    if curve[-1][1] > high and trainer.step - before["step"] > 1:
        # Overshot inside one interval: replay it a step at a time and stop at the crossing.
        curve.pop()
        trainer.restore(before)
        while True:
            trainer.train_step()
            curve.append((trainer.step, probe.accuracy(trainer.model)))
            if curve[-1][1] >= low:
                break
    step, accuracy = curve[-1]
    log(f"warm start: held-out accuracy {accuracy:.3f} after {step} steps "
        f"({'in' if accuracy <= high else 'ABOVE'} the band [{low:.2f}, {high:.2f}])")
    return trainer.model, BaseRecord(name, "band", step, accuracy, len(probe_rows), plan.band,
                                     curve, time.perf_counter() - started, numeric_path())


def _teacher_batch(pairs: list[tuple[list[int], list[int]]],
                   pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(a) for p, a in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    for row, (p, a) in enumerate(pairs):
        ids[row, :len(p) + len(a)] = torch.tensor(p + a)
        labels[row, len(p):len(p) + len(a)] = torch.tensor(a)
    return ids, labels
