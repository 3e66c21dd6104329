"""The base model: a deterministic supervised warm start, cached by the hash of what made it.

GRPO needs a policy that sometimes gets the answer right. A few hundred supervised steps on
the training split's answers give a base with modest accuracy, leaving room for RL to show
real gains. The cache key covers architecture, vocabulary, SFT settings and the data itself,
so two jobs that would train the same base share one, and a changed input never reuses it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from filelock import FileLock
from transformers import LlamaForCausalLM

from ..tasks.dataset import Example
from .model import ARCHITECTURE, random_model
from .tokenizer import CharTokenizer

SFT = {"steps": 300, "batch_size": 64, "lr": 3e-3, "seed": 0}


def base_id(tok: CharTokenizer, examples: Sequence[Example]) -> str:
    """A name for the base model that changes whenever anything that shaped it changes."""
    digest = hashlib.sha256(json.dumps([ARCHITECTURE, SFT, tok.fingerprint()]).encode())
    for ex in examples:
        digest.update(json.dumps([ex.messages, ex.ground_truth]).encode())
    return f"llmzero-tiny-llama-{digest.hexdigest()[:16]}"


def load_base(tok: CharTokenizer, examples: Sequence[Example], cache_dir: Path,
              log=print) -> tuple[LlamaForCausalLM, str]:
    """The warm-started base for this training data, training and caching it on first use."""
    name = base_id(tok, examples)
    folder = Path(cache_dir) / "base" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / "config.json").exists():
            log(f"warm start: training base {name} ({SFT['steps']} SFT steps)")
            model = supervised_warm_start(tok, examples)
            tmp = folder.with_name(f".{name}.{os.getpid()}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            model.save_pretrained(tmp)
            os.replace(tmp, folder)
    model = LlamaForCausalLM.from_pretrained(folder)
    for p in model.parameters():
        p.requires_grad_(False)
    return model, name


def supervised_warm_start(tok: CharTokenizer, examples: Sequence[Example]) -> LlamaForCausalLM:
    """Teacher-forced training on prompt -> answer + EOS; only answer tokens carry loss."""
    model = random_model(tok, SFT["seed"])
    gen = torch.Generator().manual_seed(SFT["seed"])
    optim = torch.optim.AdamW(model.parameters(), lr=SFT["lr"])
    pairs = [(tok.prompt_ids(ex.messages), tok.encode(ex.ground_truth) + [tok.eos_id])
             for ex in examples]
    model.train()
    for _ in range(SFT["steps"]):
        pick = torch.randint(len(pairs), (SFT["batch_size"],), generator=gen).tolist()
        ids, labels = _teacher_batch([pairs[i] for i in pick], tok.pad_id)
        logits = model(input_ids=ids, attention_mask=(ids != tok.pad_id).long()).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[:, 1:].reshape(-1), ignore_index=-100)
        optim.zero_grad()
        loss.backward()
        optim.step()
    return model


def _teacher_batch(pairs: list[tuple[list[int], list[int]]],
                   pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(a) for p, a in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    for row, (p, a) in enumerate(pairs):
        ids[row, :len(p) + len(a)] = torch.tensor(p + a)
        labels[row, len(p):len(p) + len(a)] = torch.tensor(a)
    return ids, labels
