"""Decode weights in the GGUF's own bits: ``Engine.from_pretrained(name, weights="gguf")``.

A decode step reads every weight once for one row of activations, so its speed is the weights'
bytes. This module gives a model loaded in bfloat16 (its activations, KV and prefill weights) a
second form of its projections, read from the model's GGUF and used for inputs of at most
``max_rows`` rows (decode); longer inputs (prefill, scoring) keep the dense weights, since the 4-bit
kernel loses to a bfloat16 GEMM at many rows.

- Q4_K tensors run in torch's int4 kernel (``_weight_int4pack_mm_for_cpu``) as groups of 32 with
  the block's own scale ``d*sc`` and zero ``8*d*sc - dmin*m`` (the kernel computes
  ``(q - 8) * scale + zero``), rounded once to the activation dtype: the 4-bit codes are the GGUF's,
  nothing is re-quantized.
- Q6_K tensors (16-weight groups, 6-bit codes: no exact int4 form) take the form ``q6_k`` names:
  ``"dense"`` keeps the dequantized weight in the activation dtype (the prefill copy itself, so it
  costs no memory), ``"int8"`` re-quantizes it per output row for ``_weight_int8pack_mm`` (half the
  bytes, not exact).
- Biases come from the GGUF, norms from the checkpoint. With ``own_embedding`` the embedding table
  stays in its GGUF blocks (a lookup dequantizes the rows it needs: the same bits as the dense
  table) and the dense table is released.

The forms are converted once into the model cache (``models/<name>-gguf-<q6_k>-<dtype>``, a
safetensors file, with a progress line) and read back in seconds. Only GGUFs whose projections
are stored as transformers stores them are accepted (``ARCHITECTURES``): llama-family GGUFs
permute the query and key rows.

Not for: quantizing anything (the codes are the file's), GPUs (the kernels are CPU ones), or
prefill speed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from engine.errors import ModelLoadError
from engine.models.catalog import MODELS, ModelSpec, find_spec
from engine.models.gguf_blocks import dequantize_q4_k, dequantize_q6_k, unpack_q4_k, unpack_q6_k
from engine.models.gguf_forms import BlockRows, ByRows, Int4Groups, Int8Rows, Stacked
from engine.models.lean import LeanModel, Projection, packs_projections

WEIGHT_FORMS = ("dense", "gguf")
"""``weights=`` of ``Engine.from_pretrained``: the checkpoint's dense weights, or these."""
Q6K_FORMS = ("dense", "int8")
DECODE_ROWS = 4
"""Inputs of at most this many rows use the decode form. At 512 rows a bfloat16 GEMM was 7-13x
faster than the int4 kernel on this 2-core machine (load 5, other jobs running); the crossover
near 4 rows is a guess from the same noisy run, which ``bench.qwen_gguf``'s kernel rows (1, 4, 64)
are there to settle."""
ARCHITECTURES = ("qwen2",)
FORMAT = "akv-gguf-decode/2"

_PROJECTIONS: dict[str, tuple[str, ...]] = {
    "qkv": ("attn_q", "attn_k", "attn_v"), "o": ("attn_output",),
    "gate_up": ("ffn_gate", "ffn_up"), "down": ("ffn_down",),
}
_Q4_K, _Q6_K = 12, 14  # gguf.GGMLQuantizationType values (the enum is read lazily with the package)
_FLOAT_TYPES = (0, 1, 30)  # F32, F16, BF16
_ROW_TYPES = {_Q4_K: "q4_k", _Q6_K: "q6_k"}


class GGUFTensor(NamedTuple):
    """One tensor of a GGUF: ``rows`` x ``cols`` weights (transformers' [out, in]) stored as ``data``."""

    name: str
    qtype: int
    rows: int
    cols: int
    data: np.ndarray

    def dense(self) -> torch.Tensor:
        """[rows, cols] float32, as ``gguf.quants.dequantize`` gives it."""
        if self.qtype == _Q4_K:
            w = dequantize_q4_k(unpack_q4_k(self.data))
        elif self.qtype == _Q6_K:
            w = dequantize_q6_k(unpack_q6_k(self.data))
        else:
            from gguf import GGMLQuantizationType
            from gguf.quants import dequantize

            w = dequantize(self.data, GGMLQuantizationType(self.qtype))
        # a copy: the memory-mapped file is read-only
        return torch.from_numpy(np.array(w, dtype=np.float32).reshape(self.rows, self.cols))


def read_gguf(path: Path) -> tuple[str, dict[str, GGUFTensor]]:
    """The architecture and tensors of a GGUF file (memory-mapped, nothing decoded).

    Raises:
        ModelLoadError: the file cannot be read as a GGUF.
    """
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (ValueError, OSError) as err:
        raise ModelLoadError(f"{str(path)!r} is not a readable GGUF: {err}", field="weights", value="gguf") from None
    field = reader.get_field("general.architecture")
    arch = str(field.contents()) if field is not None else "unknown"
    tensors = {}
    for t in reader.tensors:
        shape = [int(s) for s in t.shape]
        cols, rows = shape[0], int(np.prod(shape[1:])) if len(shape) > 1 else 1
        tensors[t.name] = GGUFTensor(t.name, int(t.tensor_type), rows, cols, t.data)
    return arch, tensors


def _kind(t: GGUFTensor, q6_k: str) -> str:
    if t.qtype == _Q4_K:
        return "int4"
    if t.qtype == _Q6_K:
        return q6_k
    if t.qtype in _FLOAT_TYPES:
        return "dense"
    from gguf import GGMLQuantizationType

    raise ModelLoadError(f"weights='gguf': tensor {t.name} is {GGMLQuantizationType(t.qtype).name}; only Q4_K, Q6_K "
                         "and float tensors have a decode form", field="weights", value="gguf")


def _runs(tensors: list[GGUFTensor], q6_k: str) -> Iterator[tuple[str, list[GGUFTensor]]]:
    """Consecutive tensors of one decode kind, which become one part of a stacked projection."""
    run: list[GGUFTensor] = []
    kind = ""
    for t in tensors:
        k = _kind(t, q6_k)
        if run and k != kind:
            yield kind, run
            run = []
        kind = k
        run.append(t)
    if run:
        yield kind, run


def _convert_projection(tensors: list[GGUFTensor], bias: list[GGUFTensor] | None, q6_k: str, dtype: torch.dtype,
                        prefix: str) -> dict[str, torch.Tensor]:
    """The state of one projection's decode form (empty: its dense prefill weights serve decode too)."""
    runs = list(_runs(tensors, q6_k))
    if len(runs) == 1 and runs[0][0] == "dense" and not bias:
        return {}
    state: dict[str, torch.Tensor] = {}
    for j, (kind, run) in enumerate(runs):
        rows = sum(t.rows for t in run)
        if kind == "int4":
            form = Int4Groups.from_q4_k(np.concatenate([np.asarray(t.data) for t in run]), rows, run[0].cols, dtype)
            state[f"{prefix}.{j}.packed"], state[f"{prefix}.{j}.scales_zeros"] = form.packed, form.scales_zeros
        else:
            w = torch.cat([t.dense() for t in run])
            if kind == "int8":
                i8 = Int8Rows.from_dense(w, dtype)
                state[f"{prefix}.{j}.int8"], state[f"{prefix}.{j}.scales"] = i8.weight, i8.scales
            else:
                state[f"{prefix}.{j}.dense"] = w.to(dtype)
    if bias:
        state[f"{prefix}.bias"] = torch.cat([b.dense().reshape(-1) for b in bias]).to(dtype)
    return state


def n_layers(tensors: Mapping[str, GGUFTensor]) -> int:
    return len({name.split(".")[1] for name in tensors if name.startswith("blk.")})


def convert(path: Path, q6_k: str, dtype: torch.dtype,
            stage: Callable[[str], None] = lambda _: None) -> dict[str, torch.Tensor]:
    """The decode forms of the GGUF at ``path`` as one flat state dict (see :func:`build`).

    Keys: ``layers.<i>.<projection>.<part>.{packed,scales_zeros | int8,scales | dense}``, the
    projection's ``.bias``, and likewise ``head.*`` for the LM head.

    Raises:
        ModelLoadError: not a supported architecture, or a projection in a type without a decode form.
    """
    if q6_k not in Q6K_FORMS:
        raise ModelLoadError(f"q6_k must be one of {', '.join(Q6K_FORMS)}, got {q6_k!r}", field="q6_k", value=q6_k)
    arch, tensors = read_gguf(path)
    if arch not in ARCHITECTURES:
        raise ModelLoadError(f"weights='gguf' reads {', '.join(ARCHITECTURES)} GGUFs; {path.name} is {arch}",
                             field="weights", value="gguf")
    state: dict[str, torch.Tensor] = {}
    layers = n_layers(tensors)
    for i in range(layers):
        stage(f"packing layer {i + 1}/{layers} in the GGUF's bits")
        for name, parts in _PROJECTIONS.items():
            weights = [tensors[f"blk.{i}.{p}.weight"] for p in parts]
            biases = [tensors.get(f"blk.{i}.{p}.bias") for p in parts]
            if any(b is not None for b in biases) and not all(b is not None for b in biases):
                raise ModelLoadError(f"weights='gguf': layer {i} {name}: some parts have a bias, some not",
                                     field="weights", value="gguf")
            bias = [b for b in biases if b is not None] or None
            state.update(_convert_projection(weights, bias, q6_k, dtype, f"layers.{i}.{name}"))
    stage("packing the LM head")
    head = tensors.get("output.weight", tensors["token_embd.weight"])  # tied when the GGUF has no output
    state.update(_convert_projection([head], None, q6_k, dtype, "head"))
    embed = tensors["token_embd.weight"]
    if embed.qtype in _ROW_TYPES:  # the table's own blocks: a lookup dequantizes the rows it needs
        state[f"embed.{_ROW_TYPES[embed.qtype]}"] = torch.from_numpy(np.array(embed.data, dtype=np.uint8))
    return state


def _decode_form(state: Mapping[str, torch.Tensor], prefix: str) -> Stacked | None:
    parts: list[Any] = []
    while True:
        p = f"{prefix}.{len(parts)}"
        if f"{p}.packed" in state:
            parts.append(Int4Groups(state[f"{p}.packed"], state[f"{p}.scales_zeros"]))
        elif f"{p}.int8" in state:
            parts.append(Int8Rows(state[f"{p}.int8"], state[f"{p}.scales"]))
        elif f"{p}.dense" in state:
            w = state[f"{p}.dense"]
            parts.append(Projection.of(w, None, packs_projections(w.device, w.dtype)))
        else:
            break
    if not parts:
        return None
    return Stacked(tuple(parts), state.get(f"{prefix}.bias"))


def build(model: LeanModel, state: Mapping[str, torch.Tensor], max_rows: int = DECODE_ROWS,
          own_embedding: bool = False) -> LeanModel:
    """``model`` whose projections and LM head run ``state``'s decode forms (:func:`convert`) for
    inputs of at most ``max_rows`` rows and its own dense weights beyond; a projection ``state``
    has no form for runs dense throughout.

    ``own_embedding``: look tokens up in the GGUF's own blocks of the embedding table (the same
    bits, checked) and release ``model``'s dense table, which then no longer runs (untied models
    only; a tied table is the LM head's weight too).

    Raises:
        ModelLoadError: ``state`` does not fit ``model`` (another model's GGUF, or its rows in
            another order): one random row through layer 0's projections and the LM head differs
            from the dense weights by more than the 4-bit and bfloat16 roundings allow (5%), or
            an embedding row differs at all.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    layers = []
    for i in range(len(model.layers)):
        dense = model.projections(i)
        own = {}
        for name, prefill in dense.items():
            decode = _decode_form(state, f"layers.{i}.{name}")
            if decode is not None:
                own[name] = ByRows(decode, prefill, max_rows)
        layers.append(own)
    head = _decode_form(state, "head")
    embed = None
    table = model.embed_tokens.weight
    tied = model.lm_head.weight.data_ptr() == table.data_ptr()
    kind = next((k for k in _ROW_TYPES.values() if f"embed.{k}" in state), None)
    if own_embedding and kind is not None and not tied:
        embed = BlockRows(state[f"embed.{kind}"], kind, model.dtype)
    out = model.with_weights(layers, ByRows(head, model.logit_head(), max_rows) if head is not None else None, embed)
    _check_fits(model, out)
    if embed is not None:
        ids = torch.unique(torch.tensor([0, 1, table.shape[0] - 1, *torch.randint(0, table.shape[0], (13,),
                                         generator=torch.Generator().manual_seed(0)).tolist()]))
        if not torch.equal(embed(ids), model.embed_tokens(ids)):
            raise ModelLoadError(f"weights='gguf': the GGUF's embedding rows differ from {model.name}'s",
                                 field="weights", value="gguf")
        model.embed_tokens.weight = torch.nn.Parameter(table.new_empty(0), requires_grad=False)
    return out


def _check_fits(dense: LeanModel, gguf: LeanModel) -> None:
    g = torch.Generator().manual_seed(0)
    cfg = dense.config
    width = {"qkv": cfg.hidden_size, "o": dense.n_heads * dense.head_dim, "gate_up": cfg.hidden_size,
             "down": cfg.intermediate_size}
    checks = [(f"layer 0 {k}", v, gguf.projections(0)[k], width[k]) for k, v in dense.projections(0).items()]
    checks.append(("the LM head", dense.logit_head(), gguf.logit_head(), cfg.hidden_size))
    for what, want_fn, got_fn, cols in checks:
        if not isinstance(got_fn, ByRows):
            continue
        x = torch.randn(1, cols, generator=g).to(dense.dtype)
        want, got = want_fn(x).float(), got_fn.decode(x).float()
        rel = float((got - want).norm() / want.norm().clamp_min(1e-30))
        if not rel < 0.05:
            raise ModelLoadError(f"weights='gguf': {what} of the GGUF does not match {dense.name}'s weights "
                                 f"(relative difference {rel:.3g}): another model's GGUF, or rows in another order",
                                 field="weights", value="gguf")


def decode_bytes(model: LeanModel, rows: int = 1) -> int:
    """Bytes of the weights one decode step of ``rows`` sequences reads: each projection's form for
    that many rows (its decode form up to its ``max_rows``, its dense weights beyond or where it has
    none), and the LM head's."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    seen: set[int] = set()

    def size(fn: Any) -> int:
        if isinstance(fn, ByRows):
            return size(fn.decode if rows <= fn.max_rows else fn.prefill)
        if isinstance(fn, Stacked):
            return sum(size(p) for p in fn.parts) + (size_of(fn.bias) if fn.bias is not None else 0)
        if isinstance(fn, Int4Groups):
            return size_of(fn.packed) + size_of(fn.scales_zeros)
        if isinstance(fn, Int8Rows):
            return size_of(fn.weight) + size_of(fn.scales)
        if isinstance(fn, Projection):
            return size_of(fn.weight) + (size_of(fn.bias) if fn.bias is not None else 0)
        raise AssertionError(f"unknown projection {type(fn).__name__}")

    def size_of(t: torch.Tensor) -> int:
        if id(t) in seen:  # a prefill weight that decode shares
            return 0
        seen.add(id(t))
        return t.numel() * t.element_size()

    total = sum(size(p) for i in range(len(model.layers)) for p in model.projections(i).values())
    return total + size(model.logit_head())


def spec_with_gguf(name: str) -> ModelSpec:
    """The named model ``name``, whose weights come from a GGUF.

    Raises:
        ModelLoadError: ``name`` is a local checkpoint or a tiny random model (no GGUF).
    """
    spec = find_spec(name)
    if spec is None:
        raise ModelLoadError(f"--weights gguf: model {name!r} has no GGUF (named models: {', '.join(MODELS)})",
                             field="weights", value="gguf")
    return spec


def decode_file(spec: ModelSpec, q6_k: str = "dense", dtype: torch.dtype = torch.bfloat16) -> Path:
    """The cached decode forms of ``spec``'s GGUF for ``q6_k`` and activation ``dtype``
    (``models/<name>-gguf-<q6_k>-<dtype>/decode.safetensors``), converted at the first call with a
    progress line on stderr, and again after a torch upgrade (the packed layout is torch's).

    Raises:
        ModelLoadError: an unknown ``q6_k``, the GGUF's packages are missing, or its architecture
            is not supported.
    """
    from safetensors.torch import save_file

    from engine.models.loading import converted_dir, dtype_name, gguf_file

    if q6_k not in Q6K_FORMS:
        raise ModelLoadError(f"q6_k must be one of {', '.join(Q6K_FORMS)}, got {q6_k!r}", field="q6_k", value=q6_k)
    path = gguf_file(spec)
    arch, _ = read_gguf(path)
    if arch not in ARCHITECTURES:
        raise ModelLoadError(f"--weights gguf reads {', '.join(ARCHITECTURES)} GGUFs; {spec.name}'s is {arch}",
                             field="weights", value="gguf")
    meta = {"format": FORMAT, "torch": torch.__version__, "q6_k": q6_k, "dtype": dtype_name(dtype),
            "gguf": path.name}

    def write(tmp: Path, stage: Callable[[str], None]) -> None:
        state = convert(path, q6_k, dtype, stage)
        stage("saving the decode forms")
        save_file(state, str(tmp / "decode.safetensors"), metadata=meta)

    def current(directory: Path) -> bool:
        from safetensors import safe_open

        file = directory / "decode.safetensors"
        if not file.is_file():
            return False
        with safe_open(str(file), framework="pt") as fh:
            return fh.metadata() == meta

    return converted_dir(spec, f"gguf-{q6_k}-{dtype_name(dtype)}", write, current) / "decode.safetensors"


def attach(model: LeanModel, q6_k: str = "dense", max_rows: int = DECODE_ROWS,
           own_embedding: bool = False) -> LeanModel:
    """``model`` (a named model loaded on CPU) with its GGUF's decode forms (:func:`build`), read from
    the cache (:func:`decode_file`, which converts them at the first call).

    Raises:
        ModelLoadError: ``model`` is not a named model with a GGUF (a local checkpoint or a tiny
            one), not on CPU, or its GGUF is of another architecture.
    """
    from safetensors.torch import load_file

    spec = spec_with_gguf(model.name)
    if model.device.type != "cpu":
        raise ModelLoadError(f"--weights gguf runs on CPU only, not {model.device}", field="weights", value="gguf")
    return build(model, load_file(str(decode_file(spec, q6_k, model.dtype))), max_rows, own_embedding)
