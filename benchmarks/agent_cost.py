#!/usr/bin/env python3
"""What the LLM agents cost per call and per 16-iteration search, with the default settings.

Builds the real proposer and stopper prompts (templates, grounding notes, metric summaries,
the plot images at their sent size) for a verl-shaped phase, then prices them with the
AgentConfig defaults. Text tokens are estimated at 3 characters per token unless
--count-with-api asks Anthropic's token-counting endpoint (needs the API key; sends no
generation request). Image tokens follow Anthropic's rule of thumb: width * height / 750.

The search: 16 proposer calls, and one stopper call every 15 minutes over the paper's average
phase length (Tables 18-21: 58 phases, wall hours listed below). The cached system block is
written once per proposer call (calls are hours apart) and once for the stopper, whose calls
every 15 minutes keep a 1-hour cache warm; a block under 1024 tokens is not cacheable.

    python benchmarks/agent_cost.py [--iterations 16] [--count-with-api]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
from pathlib import Path

from PIL import Image

from llmzero_slurm.agents.llm import AnthropicBackend, Prompt
from llmzero_slurm.agents.proposer import Proposer, ProposerInput
from llmzero_slurm.agents.stopper import Stopper, StopperInput
from llmzero_slurm.agents.usage import write_price
from llmzero_slurm.backends import get_backend
from llmzero_slurm.config import AgentConfig
from llmzero_slurm.metrics import KEY_METRICS
from llmzero_slurm.metrics_reader import read_metrics
from llmzero_slurm.search.tree import Kind, Node, Results

# Wall-clock hours of every LLMZero phase in the paper's Tables 18-21 (SSMR, ChemCoT,
# PaperSearchQA, WildSci).
PHASE_WALL_HOURS = (
    4.5, 2.5, 2.5, 7.0, 13.2, 7.3, 12.8, 5.8, 2.5, 6.7,
    7.3, 4.6, 2.6, 4.4, 2.6, 2.8, 7.6, 5.6, 6.6, 7.2, 13.9, 15.5, 40.1, 8.1, 2.6, 25.2,
    19.1, 15.7, 18.8, 4.0, 3.5, 22.3, 40.0, 5.5, 6.0, 10.0, 6.3, 40.0, 4.0, 3.5, 4.0, 4.8,
    7.3, 10.3, 16.8, 9.3, 14.6, 14.5, 30.0, 17.5, 7.8, 7.0, 14.1, 40.0, 4.0, 9.8, 13.8, 13.6,
)
# A verl phase logs every key metric except the CPU trainer's memory gauge.
VERL_METRICS = tuple(m for m in KEY_METRICS if m != "perf/max_rss_gb")
STOPPER_INTERVAL_S = 900
CHARS_PER_TOKEN = 3.0   # conservative for text dense with numbers and metric names
MIN_CACHEABLE_TOKENS = 1024
# Answer lengths we ask for: the proposer reasons in four short steps then writes JSON; the
# stopper writes two lines.
OUTPUT_TOKENS = {"proposer": 900, "stopper": 90}
HPARAMS = {"lr": 1e-6, "kl_loss_coef": 0.001, "use_kl_loss": True, "temperature": 1.0,
           "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "train_batch_size": 128,
           "ppo_mini_batch_size": 32, "ppo_micro_batch_size_per_gpu": 4, "rollout_n": 8,
           "max_response_length": 6144, "max_prompt_length": 1024, "total_epochs": 4,
           "total_training_steps": 150, "save_freq": 10, "test_freq": 10, "lora_rank": 64,
           "lora_alpha": 128.0, "gpu_memory_utilization": 0.6, "max_num_seqs": 256}


def write_phase(path: Path, start: int, steps: int, seed: int) -> None:
    """A verl-shaped metrics file: every key metric each step, validation every 10 steps."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        for s in range(start + 1, start + steps + 1):
            data = {m: rng.uniform(0.1, 2.0) for m in VERL_METRICS}
            if s % 10 == 0:
                data["val-core/task/acc/mean@1"] = 0.3 + 0.002 * s + rng.uniform(-0.02, 0.02)
                data["test-core/task/acc/mean@1"] = 0.3
            fh.write(json.dumps({"step": s, "data": data}) + "\n")


def text_tokens(prompt: Prompt, backend: AnthropicBackend, use_api: bool) -> tuple[int, int]:
    """(system tokens, per-call text tokens)."""
    if use_api:
        count = backend.client.messages.count_tokens
        system = count(model=backend.cfg.model, messages=[{"role": "user",
                                                            "content": prompt.system}])
        task = count(model=backend.cfg.model, messages=[{"role": "user", "content": prompt.text}])
        return system.input_tokens, task.input_tokens
    return (math.ceil(len(prompt.system) / CHARS_PER_TOKEN),
            math.ceil((len(prompt.text) + 20 * len(prompt.images)) / CHARS_PER_TOKEN))


def image_tokens(prompt: Prompt, max_px: int) -> int:
    total = 0
    for path in prompt.images:
        with Image.open(path) as img:
            img.thumbnail((max_px, max_px))
            total += math.ceil(img.width * img.height / 750)
    return total


def call_cost(cfg: AgentConfig, system: int, text: int, images: int, output: int,
              cache: str) -> float:
    """Dollars of one call; cache is 'write', 'read' or 'none' for the system block."""
    system_price = {"write": write_price(cfg, cfg.cache_ttl), "read": cfg.price_cache_read_per_mtok,
                    "none": cfg.price_input_per_mtok}[cache if system >= MIN_CACHEABLE_TOKENS
                                                       else "none"]
    return (system * system_price + (text + images) * cfg.price_input_per_mtok
            + output * cfg.price_output_per_mtok) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=16, help="search budget B")
    parser.add_argument("--count-with-api", action="store_true",
                        help="count text tokens with Anthropic's count_tokens endpoint")
    args = parser.parse_args()
    cfg = AgentConfig()
    if args.count_with_api and not os.environ.get(cfg.key_env):
        print(f"--count-with-api needs ${cfg.key_env}", file=sys.stderr)
        return 2
    backend = AnthropicBackend(cfg, os.environ.get(cfg.key_env, "unused"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_phase(work / "parent.jsonl", 0, 150, 1)
        write_phase(work / "best.jsonl", 0, 150, 2)
        write_phase(work / "current.jsonl", 60, 50, 3)
        parent = Node(1, None, Kind.SCRATCH, HPARAMS,
                      results=Results(checkpoints=list(range(10, 151, 10))))
        inp = ProposerInput(parent, read_metrics(work / "parent.jsonl"), 0.6)
        metrics = inp.metrics.without_test()
        prompts = {
            "proposer": Proposer(cfg, get_backend("verl"), backend).prompt(
                inp, metrics, parent.results.checkpoints, work / "plots"),
            "stopper": Stopper(cfg, backend).prompt(StopperInput(
                read_metrics(work / "current.jsonl"), 60, 210, read_metrics(work / "best.jsonl"),
                0.6), work)}
        print(f"model {cfg.model}; prices per MTok: input ${cfg.price_input_per_mtok}, output "
              f"${cfg.price_output_per_mtok}, cache write ${write_price(cfg, cfg.cache_ttl)} "
              f"({cfg.cache_ttl}), cache read ${cfg.price_cache_read_per_mtok}; images <= "
              f"{cfg.image_max_px}px; text tokens "
              + ("from count_tokens" if args.count_with_api else
                 f"estimated at {CHARS_PER_TOKEN} chars/token"))
        costs = {}
        print(f"{'agent':9} {'system':>7} {'text':>6} {'images':>10} {'output':>7} "
              f"{'$ cold':>8} {'$ warm':>8}")
        for agent, prompt in prompts.items():
            system, text = text_tokens(prompt, backend, args.count_with_api)
            images = image_tokens(prompt, cfg.image_max_px)
            out = OUTPUT_TOKENS[agent]
            cold = call_cost(cfg, system, text, images, out, "write")
            warm = call_cost(cfg, system, text, images, out, "read")
            costs[agent] = (cold, warm)
            print(f"{agent:9} {system:7d} {text:6d} {images:5d} ({len(prompt.images):2d}) "
                  f"{out:7d} {cold:8.4f} {warm:8.4f}")
    hours = sum(PHASE_WALL_HOURS) / len(PHASE_WALL_HOURS)
    per_phase = math.floor(hours * 3600 / STOPPER_INTERVAL_S)
    stopper_calls = args.iterations * per_phase
    proposer_total = args.iterations * costs["proposer"][0]
    stopper_total = costs["stopper"][0] + (stopper_calls - 1) * costs["stopper"][1]
    total = proposer_total + stopper_total
    print(f"average phase {hours:.2f} h over {len(PHASE_WALL_HOURS)} phases -> {per_phase} "
          f"stopper calls per phase")
    print(f"search of {args.iterations} iterations: proposer {args.iterations} calls "
          f"${proposer_total:.2f}, stopper {stopper_calls} calls ${stopper_total:.2f}, "
          f"total ${total:.2f} (target < $5: {'met' if total < 5 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
