"""Decode weights in the GGUF's own bits (engine.models.gguf_weights, engine.models.gguf_blocks).

Q4_K and Q6_K super-blocks are packed by hand here (the ``gguf`` package cannot quantize to them)
and every claim is checked against the ``gguf`` package's own ``dequantize`` followed by a plain
float32 matmul: the unpacked parts bit for bit, each kernel form within its stated rounding, and
a tiny random Qwen2-shaped model written as a GGUF, whose logits through the decode forms stay as
close to the float32 model on the dequantized weights as the bfloat16 model's do.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from engine.errors import ModelLoadError
from engine.models import gguf_forms as forms
from engine.models import gguf_weights as gw
from engine.models.gguf_blocks import dequantize_q4_k, dequantize_q6_k, unpack_q4_k, unpack_q6_k
from engine.models.lean import LeanModel

Q4_K, Q6_K = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K


def pack_q4_k(rng: np.random.Generator, n: int, step: float = 2e-3) -> np.ndarray:
    """``n`` Q4_K super-blocks [n, 144] of random codes, 6-bit scales and mins and fp16 d/dmin
    (``step`` about d*sc; the mins centre the weights near zero)."""
    d = (step / 32 * rng.uniform(0.5, 1.5, n)).astype(np.float16)
    dmin = (step / 32 * rng.uniform(0.5, 1.5, n)).astype(np.float16)
    sc = rng.integers(0, 64, (n, 8), dtype=np.uint8)
    mn = rng.integers(0, 64, (n, 8), dtype=np.uint8)
    sc[0, 0], mn[0, 0], sc[0, 7], mn[0, 7] = 63, 63, 0, 0  # the extremes of both 6-bit fields
    q = rng.integers(0, 16, (n, 256), dtype=np.uint8)
    packed = np.zeros((n, 12), np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    pairs = q.reshape(n, 4, 2, 32)  # sub-blocks 2j and 2j+1 share bytes 32j..32j+31
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, 128)
    return np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), packed, qs], axis=1)


def pack_q6_k(rng: np.random.Generator, n: int, step: float = 2e-3) -> np.ndarray:
    """``n`` Q6_K super-blocks [n, 210] of random 6-bit codes, int8 scales and fp16 d."""
    d = (step / 64 * rng.uniform(0.5, 1.5, n)).astype(np.float16)
    sc = rng.integers(-128, 128, (n, 16)).astype(np.int8)
    q = rng.integers(0, 64, (n, 256), dtype=np.uint8).reshape(n, 2, 4, 32)
    low, high = q & 0x0F, q >> 4
    ql = (low[:, :, 0:2] | (low[:, :, 2:4] << 4)).reshape(n, 128)
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)).reshape(n, 64)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], axis=1)


def _rows(blocks: np.ndarray, rows: int) -> np.ndarray:
    return blocks.reshape(rows, -1)


def _reference(blocks: np.ndarray, qtype: gguf.GGMLQuantizationType, rows: int) -> torch.Tensor:
    return torch.from_numpy(gguf.quants.dequantize(_rows(blocks, rows), qtype).copy())


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def test_unpacked_blocks_equal_gguf_dequantize_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    b4, b6 = pack_q4_k(rng, 64), pack_q6_k(rng, 64)
    assert np.array_equal(dequantize_q4_k(unpack_q4_k(b4)), gguf.quants.dequantize(b4, Q4_K))
    assert np.array_equal(dequantize_q6_k(unpack_q6_k(b6)), gguf.quants.dequantize(b6, Q6_K))
    parts = unpack_q4_k(b4)
    assert parts.codes.max() == 15 and parts.codes.min() == 0
    codes6 = unpack_q6_k(b6).codes
    assert codes6.min() == -32 and codes6.max() == 31
    with pytest.raises(ValueError, match="144-byte"):
        unpack_q4_k(b4.reshape(-1)[:-1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_int4_kernel_runs_q4_k_as_dequantize_then_matmul(dtype: torch.dtype) -> None:
    """The int4 kernel over Q4_K's own codes, against dequantize + float32 matmul: within the
    rounding of each group's scale and zero to ``dtype`` (bfloat16: measured 2.6e-3 relative,
    bounded at 5e-3; float32: 4e-7, bounded at 1e-6)."""
    rng = np.random.default_rng(1)
    rows, cols = 192, 512
    blocks = pack_q4_k(rng, rows * cols // 256)
    w = _reference(blocks, Q4_K, rows)
    form = forms.Int4Groups.from_q4_k(blocks, rows, cols, dtype)
    x = torch.randn(3, cols, generator=torch.Generator().manual_seed(0))
    want = x.to(dtype).float() @ w.T  # the activations rounded as the model holds them
    got = form(x.to(dtype))
    assert got.dtype == dtype and got.shape == (3, rows)
    assert _rel(got, want) < (5e-3 if dtype == torch.bfloat16 else 1e-6)
    # rows are independent: a row among many is the same bits as alone (bench.qwen_gguf relies on it)
    many = torch.randn(70, cols, generator=torch.Generator().manual_seed(1)).to(dtype)
    assert all(torch.equal(form(many)[i:i + 1], form(many[i:i + 1])) for i in (0, 33, 69))


def test_q6_k_forms_against_dequantize_then_matmul() -> None:
    """Q6_K has no exact 4-bit form: dense bfloat16 rounds each weight (measured 2.3e-3 relative,
    bounded at 5e-3), int8 per row re-quantizes it (measured 7.4e-3, bounded at 1.5e-2: the row's
    largest weight sets every step)."""
    rng = np.random.default_rng(2)
    rows, cols = 128, 512
    blocks = pack_q6_k(rng, rows * cols // 256)
    tensor = gw.GGUFTensor("t", int(Q6_K), rows, cols, _rows(blocks, rows))
    w = _reference(blocks, Q6_K, rows)
    assert torch.equal(tensor.dense(), w)
    x = torch.randn(2, cols, generator=torch.Generator().manual_seed(0)).bfloat16()
    want = x.float() @ w.T
    dense = x @ w.bfloat16().T
    int8 = forms.Int8Rows.from_dense(w, torch.bfloat16)(x)
    assert _rel(dense, want) < 5e-3
    assert _rel(int8, want) < 1.5e-2


# ---------------------------------------------------------------------------- a tiny GGUF model

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS, VOCAB = 256, 512, 4, 2, 2, 128


def _tiny_tensors(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType, int]]:
    """name -> (bytes or float32 values, type, rows), Q4_K_M's choice of types: Q6_K for attn_v,
    ffn_down and the head, Q4_K elsewhere (the embeddings too), float32 biases."""
    d = HIDDEN // HEADS
    shapes = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (KV_HEADS * d, HIDDEN), "attn_v": (KV_HEADS * d, HIDDEN),
              "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (FFN, HIDDEN), "ffn_up": (FFN, HIDDEN),
              "ffn_down": (HIDDEN, FFN)}
    out: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType, int]] = {}
    for i in range(LAYERS):
        for name, (rows, cols) in shapes.items():
            six = name in ("attn_v", "ffn_down") and i % 2 == 0  # as Q4_K_M: some layers Q6_K
            step = 0.06 / np.sqrt(cols)
            pack = pack_q6_k if six else pack_q4_k
            out[f"blk.{i}.{name}.weight"] = (pack(rng, rows * cols // 256, step).reshape(rows, -1),
                                             Q6_K if six else Q4_K, rows)
        for name in ("attn_q", "attn_k", "attn_v"):
            rows = shapes[name][0]
            out[f"blk.{i}.{name}.bias"] = (rng.normal(0, 0.1, rows).astype(np.float32),
                                           gguf.GGMLQuantizationType.F32, 1)
    out["token_embd.weight"] = (pack_q4_k(rng, VOCAB * HIDDEN // 256, 0.2).reshape(VOCAB, -1), Q4_K, VOCAB)
    out["output.weight"] = (pack_q6_k(rng, VOCAB * HIDDEN // 256, 0.2 / np.sqrt(HIDDEN)).reshape(VOCAB, -1), Q6_K,
                            VOCAB)
    return out


def _write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType, int]],
                arch: str = "qwen2") -> None:
    writer = gguf.GGUFWriter(str(path), arch)
    for name, (data, qtype, _) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=qtype if qtype in (Q4_K, Q6_K) else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _dequantized(tensors: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType, int]]) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(np.asarray(gguf.quants.dequantize(data, qtype), dtype=np.float32).copy())
            for name, (data, qtype, _) in tensors.items()}


def _hf_model(w: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A float32 transformers Qwen2 on the dequantized weights (norms random, as the GGUF has none here)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=4096,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).eval()
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    state = {"model.embed_tokens.weight": w["token_embd.weight"], "lm_head.weight": w["output.weight"]}
    for key, value in w.items():
        if key.startswith("blk."):
            _, i, name, kind = key.split(".")
            state[f"model.layers.{i}.{names[name]}.{kind}"] = value
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Module) and type(module).__name__ == "Qwen2RMSNorm":
                module.weight.uniform_(0.8, 1.2)
    missing = model.load_state_dict(state, strict=False)
    assert not missing.unexpected_keys and all("norm" in k for k in missing.missing_keys)
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    rng = np.random.default_rng(3)
    tensors = _tiny_tensors(rng)
    path = tmp_path_factory.mktemp("gguf") / "tiny-qwen2.gguf"
    _write_gguf(path, tensors)
    return path, _hf_model(_dequantized(tensors))


def _lean(hf: torch.nn.Module, dtype: torch.dtype) -> LeanModel:
    import copy

    return LeanModel(copy.deepcopy(hf).to(dtype), "tiny-gguf", keep_source=False)


def _logits(model: LeanModel, ids: list[int]) -> torch.Tensor:
    from engine.attention import attend

    pos = np.arange(len(ids))
    out = model.forward(ids, pos, lambda li, q, k, v, rows: attend(q, k, v, pos, pos, model.scaling, None),
                        logit_rows=pos)
    assert out.logits is not None
    return out.logits


def test_tiny_model_in_gguf_bits_is_as_close_to_float32_as_bfloat16(tiny: tuple[Path, torch.nn.Module]) -> None:
    """The decode forms run for every row here (``max_rows`` above the prompt): their logits against
    float32 transformers on the dequantized GGUF, beside the bfloat16 model's in the same run
    (relative L2 error over all 48 x 128 logits, measured: bfloat16 3.3e-2, Q6_K dense 2.9e-2, Q6_K
    int8 2.2e-2; at this size the bfloat16 activations dominate, so the bounds are loose)."""
    path, hf = tiny
    ids = torch.randint(0, VOCAB, (48,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    bf16 = _lean(hf, torch.bfloat16)
    errors = {"bfloat16": _rel(_logits(bf16, ids), ref)}
    for q6_k in gw.Q6K_FORMS:
        model = gw.build(bf16, gw.convert(path, q6_k, torch.bfloat16), max_rows=1_000)
        assert isinstance(model.projections(0)["qkv"], forms.ByRows)
        errors[q6_k] = _rel(_logits(model, ids), ref)
    assert errors["dense"] <= 1.5 * errors["bfloat16"], errors
    assert errors["int8"] <= 3 * errors["bfloat16"], errors
    # float32 activations: the kernel's scales and zeros are exact, so is the whole model
    f32 = gw.build(_lean(hf, torch.float32), gw.convert(path, "dense", torch.float32), max_rows=1_000)
    assert _rel(_logits(f32, ids), ref) < 1e-5


def test_decode_rows_use_the_gguf_form_and_prefill_the_dense(tiny: tuple[Path, torch.nn.Module]) -> None:
    path, hf = tiny
    bf16 = _lean(hf, torch.bfloat16)
    model = gw.build(bf16, gw.convert(path, "dense", torch.bfloat16), max_rows=2)
    qkv = model.projections(1)["qkv"]
    assert isinstance(qkv, forms.ByRows) and qkv.prefill is bf16.projections(1)["qkv"]
    # layer 0's ffn_down is Q6_K, kept dense: decode shares the prefill weights (no second copy)
    assert not isinstance(model.projections(0)["down"], forms.ByRows)
    x = torch.randn(5, HIDDEN).bfloat16()
    assert torch.equal(qkv(x), qkv.prefill(x)) and torch.equal(qkv(x[:2]), qkv.decode(x[:2]))
    assert gw.decode_bytes(model) < gw.decode_bytes(bf16)
    # a step of more rows than max_rows reads the dense weights, as it runs them
    assert gw.decode_bytes(model, rows=2) == gw.decode_bytes(model)
    assert gw.decode_bytes(model, rows=3) == gw.decode_bytes(bf16)


def test_a_gguf_that_does_not_fit_the_model_is_refused(tiny: tuple[Path, torch.nn.Module], tmp_path: Path) -> None:
    path, hf = tiny
    state = gw.convert(path, "dense", torch.bfloat16)
    shuffled = dict(state)
    shuffled["layers.0.qkv.0.packed"] = state["layers.0.qkv.0.packed"].flip(0)  # rows in another order
    with pytest.raises(ModelLoadError, match="does not match"):
        gw.build(_lean(hf, torch.bfloat16), shuffled)
    other = tmp_path / "gemma.gguf"
    _write_gguf(other, _tiny_tensors(np.random.default_rng(0)), arch="gemma3")
    with pytest.raises(ModelLoadError, match="gemma3"):
        gw.convert(other, "dense", torch.bfloat16)
    with pytest.raises(ModelLoadError, match="q6_k"):
        gw.convert(path, "int3", torch.bfloat16)


def test_weights_gguf_for_a_model_without_one_names_the_value() -> None:
    from engine.engine import Engine

    with pytest.raises(ModelLoadError, match="has no GGUF") as err:
        Engine.from_pretrained("tiny-random-qwen2", dtype=torch.bfloat16, weights="gguf")
    assert err.value.field == "weights"
    with pytest.raises(ModelLoadError, match="weights must be one of dense, gguf"):
        Engine.from_pretrained("tiny-random-qwen2", weights="int3")


def test_decode_forms_are_converted_once_into_the_cache(tiny: tuple[Path, torch.nn.Module], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The first call converts (with a progress line), later ones read the file; a file written
    by another torch (its packed layout) is converted again."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from engine.models import loading
    from engine.models.catalog import QWEN_CODER

    path, _ = tiny
    monkeypatch.setenv("AKV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(loading, "gguf_file", lambda spec: path)
    calls: list[str] = []
    real = gw.convert
    monkeypatch.setattr(gw, "convert", lambda *a, **k: calls.append("convert") or real(*a, **k))
    file = gw.decode_file(QWEN_CODER, "dense", torch.bfloat16)
    assert file.parent.name == "qwen2.5-coder-1.5b-gguf-dense-bfloat16" and calls == ["convert"]
    assert "packing layer 2/2" in capsys.readouterr().err
    assert gw.decode_file(QWEN_CODER, "dense", torch.bfloat16) == file and calls == ["convert"]
    with safe_open(str(file), framework="pt") as fh:
        meta, state = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
    save_file(state, str(file), metadata={**meta, "torch": "0.0"})
    gw.decode_file(QWEN_CODER, "dense", torch.bfloat16)
    assert calls == ["convert", "convert"]


def test_the_embedding_looked_up_in_its_gguf_blocks_is_the_same_bits(tiny: tuple[Path, torch.nn.Module]) -> None:
    path, hf = tiny
    state = gw.convert(path, "dense", torch.bfloat16)
    assert state["embed.q4_k"].dtype == torch.uint8
    dense = _lean(hf, torch.bfloat16)
    ids = list(range(0, VOCAB, 3))
    want = _logits(gw.build(dense, state), ids)
    own = gw.build(dense, state, own_embedding=True)
    assert dense.embed_tokens.weight.numel() == 0  # released: the process holds the blocks only
    assert isinstance(own.embed, forms.BlockRows) and torch.equal(_logits(own, ids), want)
    other = dict(state, **{"embed.q4_k": state["embed.q4_k"].roll(1, 0)})
    with pytest.raises(ModelLoadError, match="embedding rows differ"):
        gw.build(_lean(hf, torch.bfloat16), other, own_embedding=True)
