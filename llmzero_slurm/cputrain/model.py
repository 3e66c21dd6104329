"""The tiny Llama and its LoRA adapter: real transformers + peft objects, built offline."""
from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import SafetensorError
from transformers import LlamaConfig, LlamaForCausalLM

from ..errors import DataError
from .tokenizer import CharTokenizer

# ~132k parameters: small enough for thousands of GRPO steps on two CPU cores.
ARCHITECTURE: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 256,
    "max_position_embeddings": 96,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


def llama_config(tokenizer: CharTokenizer) -> LlamaConfig:
    return LlamaConfig(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
                       bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id,
                       **ARCHITECTURE)


def random_model(tokenizer: CharTokenizer, seed: int) -> LlamaForCausalLM:
    """A freshly initialised model; the same seed gives the same weights."""
    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(tokenizer))


def weighed_id(name: str, weights: Path) -> str:
    """A base's id: its name (what shaped it) and a digest of its weights. The same data and
    plan warm-started on another numeric path (another CPU, a node's own cache) stop at
    another step: an adapter must not pass from one of those bases to the other."""
    digest = hashlib.sha256()
    with open(weights, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return f"{name}@{digest.hexdigest()[:12]}"


def base_name(base_id: str) -> str:
    """The name part of a weighed_id (the whole of one from an earlier release)."""
    return base_id.partition("@")[0]


def with_lora(base: LlamaForCausalLM, base_id: str, rank: int, alpha: float,
              target_modules: str, init_adapter: Path | None = None) -> PeftModel:
    """Wrap the frozen base in a trainable LoRA adapter, fresh or loaded from a parent's folder.

    A parent adapter must belong to the same base model and have the same rank: LoRA shape is
    fixed along a strategy, and an adapter trained on another base would be meaningless here.
    """
    base.name_or_path = base_id   # recorded in adapter_config.json as base_model_name_or_path
    if init_adapter is None:
        modules = "all-linear" if target_modules == "all-linear" else target_modules.split(",")
        config = LoraConfig(r=rank, lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates int, accepts float
                            lora_dropout=0.0,
                            target_modules=modules, task_type="CAUSAL_LM")
        with warnings.catch_warnings():   # peft calls a transformers API deprecated in v5
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing")
            return get_peft_model(base, config)
    saved = read_adapter_config(init_adapter)
    # An adapter from a release before weighed_id names the base without its digest.
    trained_on = saved.get("base_model_name_or_path")
    if trained_on not in (base_id, base_name(base_id)):
        same = base_name(str(trained_on)) == base_name(base_id)
        raise DataError(init_adapter, f"adapter was trained on base {trained_on!r}, this phase "
                        f"uses {base_id!r}" + (
                            ": the same data and warm start reached other weights here (another "
                            "CPU's numeric path, or another cache): let every phase of the run "
                            "share one trainer.cache_dir" if same else ""))
    if saved.get("r") != rank:
        raise DataError(init_adapter, f"adapter has lora_rank {saved.get('r')}, this phase asks "
                        f"for {rank} (LoRA rank is fixed along a strategy)")
    weights = Path(init_adapter) / "adapter_model.safetensors"
    try:
        return PeftModel.from_pretrained(base, str(init_adapter), is_trainable=True)
    except (SafetensorError, OSError) as exc:   # cut short by a full disk, a partial copy
        raise DataError(weights, f"cannot be loaded ({type(exc).__name__}: {exc}): the "
                        "checkpoint is damaged (written to a full disk, or copied in part)") from None


def read_adapter_config(folder: Path) -> dict[str, Any]:
    """adapter_config.json of a PEFT adapter folder, checked enough to load it."""
    path = Path(folder) / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(path, f"not a readable PEFT adapter config: {exc}") from None
    if not (Path(folder) / "adapter_model.safetensors").exists():
        raise DataError(folder, "has no adapter_model.safetensors")
    if not config.get("lora_alpha"):
        raise DataError(path, "lora_alpha is 0 or missing: the adapter would have no effect")
    return config
