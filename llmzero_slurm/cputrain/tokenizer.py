"""A character-level tokenizer built in code: nothing to download, identical everywhere."""
from __future__ import annotations

from typing import Iterable, Sequence

PAD, BOS, EOS, UNK = 0, 1, 2, 3
_SPECIALS = 4
_CHARS = "".join(chr(c) for c in range(32, 127))   # printable ASCII


class CharTokenizer:
    """Printable ASCII characters plus PAD/BOS/EOS/UNK; other characters map to UNK."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self) -> None:
        self._ids = {ch: i + _SPECIALS for i, ch in enumerate(_CHARS)}
        self.vocab_size = _SPECIALS + len(_CHARS)

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(ch, UNK) for ch in text]

    def answer_length(self, text: str) -> int:
        """The tokens of a response that writes `text`: its characters and the EOS ending it,
        which max_response_length counts too."""
        return len(text) + 1

    def unknown(self, text: str) -> set[str]:
        """The characters of `text` this vocabulary lacks: read as UNK, never generated."""
        return {ch for ch in text if ch not in self._ids}

    def decode(self, ids: Iterable[int]) -> str:
        """Text up to the first EOS; padding and other special tokens are dropped."""
        out = []
        for i in ids:
            if i == EOS:
                break
            if i >= _SPECIALS:
                out.append(_CHARS[i - _SPECIALS])
        return "".join(out)

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """BOS followed by the chat's message contents (a tiny model needs no chat template)."""
        return [BOS] + self.encode("".join(m["content"] for m in messages))

    def fingerprint(self) -> str:
        """What identifies this vocabulary in the base-model cache key."""
        return f"char:{_SPECIALS}:{_CHARS}"
