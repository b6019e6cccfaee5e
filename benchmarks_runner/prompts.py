"""Synthetic prompt text and its calibration against the server's token counts.

No tokenizer can be downloaded here, so prompts are built from a fixed list of short, common
English words that most BPE vocabularies hold as single tokens (with their leading space).
One or two probe requests (``max_tokens=1``) read ``usage.prompt_tokens`` for known word
counts and fit ``prompt_tokens = tokens_per_word * words + overhead_tokens``; prompts are
then sized with that fit. After the run, the deviation between each request's
server-reported prompt tokens and its target is reported in run.json ``tokenizer``.

Shared prefixes: the text of a prefix group is a deterministic function of the builder's seed
and the group id, so every member starts with the same bytes (and another run's seed, other
bytes). Trace block groups (``blocks:<size>:<ids>``) are
built block by block, so two chains share exactly their common leading blocks.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from benchmarks_runner.workload import BLOCK_GROUP_PREFIX, RequestSpec

_WORD_TEXT = """
the of and to in is you that it he was for on are as with his they at be this have from or
one had by word but not what all were we when your can said there use an each which she do
how their if will up other about out many then them these so some her would make like him
into time has look two more write go see number no way could people my than first water been
call who oil its now find long down day did get come made may part over new sound take only
little work know place year live me back give most very after thing our just name good man
think say great where help through much before line right too mean old any same tell boy
follow came want show also around form three small set put end does another well large must
big even such because turn here why ask went men read need land different home us move try
kind hand picture again change off play spell air away animal house point page letter mother
answer found study still learn should world high every near add food between own below
country plant last school father keep tree never start city earth eye light thought head
under story saw left few while along might close something seem next hard open example begin
life always those both paper together got group often run important until children side feet
car mile night walk white sea began grow took river four carry state once book hear stop
without second later miss idea enough eat face watch far really almost let above girl
sometimes mountain cut young talk soon list song being leave family
"""
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


@dataclass(frozen=True, slots=True)
class Calibration:
    """``prompt_tokens ~= tokens_per_word * words + overhead_tokens`` for this server."""

    tokens_per_word: float = 1.0
    overhead_tokens: float = 0.0
    method: str = "assumed 1 token per word (no probe)"
    probes: tuple[tuple[int, int], ...] = ()

    def words_for(self, tokens: int, *, with_overhead: bool = True) -> int:
        extra = self.overhead_tokens if with_overhead else 0.0
        return max(1, round((tokens - extra) / self.tokens_per_word))

    def as_dict(self) -> dict[str, Any]:
        return {
            "tokenizer": "none locally; calibrated against server-reported prompt tokens"
            if self.probes
            else "none locally; not calibrated (assumed 1 token per word)",
            "method": self.method,
            "tokens_per_word": self.tokens_per_word,
            "overhead_tokens": self.overhead_tokens,
            "probes": [{"words": w, "prompt_tokens": t} for w, t in self.probes],
        }


def fit_calibration(probes: list[tuple[int, int]]) -> Calibration:
    """Fit tokens-per-word (and overhead with two probes) from (words, prompt_tokens) pairs."""
    usable = [(w, t) for w, t in probes if w > 0 and t > 0]
    if not usable:
        return Calibration()
    if len(usable) == 1 or usable[0][0] == usable[-1][0]:
        w, t = usable[0]
        return Calibration(t / w, 0.0, "one probe: tokens_per_word = tokens / words", tuple(usable))
    (w1, t1), (w2, t2) = usable[0], usable[-1]
    slope = (t2 - t1) / (w2 - w1)
    if slope <= 0:
        return Calibration(t2 / w2, 0.0, "two probes, non-positive slope: ratio", tuple(usable))
    overhead = max(0.0, t1 - slope * w1)
    return Calibration(slope, overhead, "two probes: linear fit with overhead", tuple(usable))


def _words(seed: str, n: int) -> list[str]:
    rnd = random.Random(hashlib.blake2b(seed.encode(), digest_size=8).digest())
    return rnd.choices(WORDS, k=n)


class PromptBuilder:
    """Deterministic prompt text for specs, sized by a :class:`Calibration`."""

    def __init__(self, calibration: Calibration, seed: int = 0) -> None:
        self.calibration = calibration
        self.seed = seed
        self._prefix_cache: dict[tuple[str, int], str] = {}

    def probe_text(self, words: int) -> str:
        return " ".join(_words(f"probe-{self.seed}-{words}", words))

    def _block_prefix(self, group: str, words: int) -> str:
        _, _, rest = group.partition(BLOCK_GROUP_PREFIX)
        size_s, _, ids_s = rest.partition(":")
        block_tokens = int(size_s)
        block_words = self.calibration.words_for(block_tokens, with_overhead=False)
        out: list[str] = []
        for h in ids_s.split(","):
            out.extend(_words(f"block-{self.seed}-{h}", block_words))
            if len(out) >= words:
                break
        return " ".join(out[:words])

    def prefix_text(self, group: str, prefix_tokens: int) -> str:
        words = self.calibration.words_for(prefix_tokens, with_overhead=False)
        key = (group, words)
        text = self._prefix_cache.get(key)
        if text is None:
            if group.startswith(BLOCK_GROUP_PREFIX):
                text = self._block_prefix(group, words)
            else:
                text = " ".join(_words(f"prefix-{self.seed}-{group}", words))
            self._prefix_cache[key] = text
        return text

    def text(self, spec: RequestSpec, *, unique: str = "") -> str:
        total_words = self.calibration.words_for(spec.input_len)
        body_seed = f"body-{self.seed}-{spec.request_index}{unique}"
        if spec.prefix_group and spec.prefix_len > 0:
            prefix = self.prefix_text(spec.prefix_group, spec.prefix_len)
            n_prefix = prefix.count(" ") + 1
            body = _words(body_seed, max(1, total_words - n_prefix))
            return prefix + " " + " ".join(body)
        return " ".join(_words(body_seed, total_words))


@dataclass(frozen=True, slots=True)
class ServerFeatures:
    """Optional request fields the server accepted in the probe."""

    ignore_eos: bool = True
    min_tokens: bool = True
    continuous_usage_stats: bool = True


def request_body(
    *,
    api: str,
    model: str,
    text: str,
    max_tokens: int,
    features: ServerFeatures,
    use_ignore_eos: bool,
    use_min_tokens: bool,
    use_continuous_usage: bool,
    temperature: float | None = None,
    extra_body: dict[str, Any] | None = None,
    stream: bool = True,
) -> bytes:
    """JSON body of one request (completions ``prompt`` or chat ``messages``)."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": stream}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if stream:
        opts: dict[str, Any] = {"include_usage": True}
        if use_continuous_usage and features.continuous_usage_stats:
            opts["continuous_usage_stats"] = True
        body["stream_options"] = opts
    if use_ignore_eos and features.ignore_eos:
        body["ignore_eos"] = True
    if use_min_tokens and features.min_tokens:
        body["min_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if extra_body:
        body.update(extra_body)
    return json.dumps(body, separators=(",", ":")).encode()
