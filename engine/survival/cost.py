"""The cost model: how long prefill, decode and swaps take (what policies price and the simulator runs on).

Calibrated from the real engine by ``evals.survival.calibrate``; the defaults are MEASURED.md's
figures for gemma-3-270m on two CPU cores, labelled as assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import show
from engine.survival.types import SurvivalError, check_number


@dataclass(frozen=True)
class CostModel:
    """Speeds of the serving system, as policies and the simulator use them.

    Prefill of ``n`` new tokens after ``context`` earlier ones takes
    ``prefill[0] + prefill[1]*n + prefill[2]*n*(context + n)`` seconds (the last term is attention);
    one decode step of a batch of ``b`` sequences takes ``decode[0] + decode[1]*b``; moving
    ``x`` bytes between pool and host takes ``x / swap_bytes_per_s``.

    Attributes:
        prefill: (c0, c1, c2) as above.
        decode: (d0, d1) as above.
        swap_bytes_per_s: pool <-> host bandwidth.
        bytes_per_token: KV bytes of one token.
        source: where the numbers come from (``"measured: ..."`` or ``"assumed: ..."``).
    """

    prefill: tuple[float, float, float] = (0.01, 1 / 440, 0.0)
    decode: tuple[float, float] = (0.11, 0.005)
    swap_bytes_per_s: float = 5e9
    bytes_per_token: int = 36_864
    source: str = "assumed: MEASURED.md figures for gemma-3-270m on 2 CPU cores"

    def __post_init__(self) -> None:
        for i, c in enumerate(self.prefill):
            check_number(c, f"cost.prefill[{i}]", low=0.0)
        for i, c in enumerate(self.decode):
            check_number(c, f"cost.decode[{i}]", low=0.0)
        if not (check_number(self.swap_bytes_per_s, "cost.swap_bytes_per_s", low=0.0) or 0) > 0:
            raise SurvivalError("cost.swap_bytes_per_s must be positive", field="cost.swap_bytes_per_s", value=0)
        if isinstance(self.bytes_per_token, bool) or not isinstance(self.bytes_per_token, int) \
                or self.bytes_per_token <= 0:
            raise SurvivalError(f"cost.bytes_per_token must be a positive integer, got {show(self.bytes_per_token)}",
                                field="cost.bytes_per_token", value=self.bytes_per_token)

    def t_prefill(self, n: float, context: float = 0.0) -> float:
        """Seconds to compute ``n`` tokens after ``context`` stored ones (0 for ``n <= 0``)."""
        if n <= 0:
            return 0.0
        c0, c1, c2 = self.prefill
        return c0 + c1 * n + c2 * n * (context + n)

    def t_fwd(self, n: float) -> float:
        """Seconds to recompute ``n`` tokens from scratch (InferCept's T_fwd)."""
        return self.t_prefill(n, 0.0)

    def t_swap(self, nbytes: float) -> float:
        return max(0.0, nbytes) / self.swap_bytes_per_s

    def t_decode(self, batch: int) -> float:
        return self.decode[0] + self.decode[1] * max(1, batch) if batch > 0 else 0.0

    def wire(self) -> dict[str, Any]:
        return {"prefill": list(self.prefill), "decode": list(self.decode), "swap_bytes_per_s": self.swap_bytes_per_s,
                "bytes_per_token": self.bytes_per_token, "source": self.source}

    @classmethod
    def from_wire(cls, raw: Any) -> CostModel:
        if not isinstance(raw, Mapping):
            raise SurvivalError(f"cost model must be an object, got {show(raw)}", field="cost", value=raw)
        try:
            return cls(tuple(float(x) for x in raw["prefill"]), tuple(float(x) for x in raw["decode"]),  # type: ignore[arg-type]
                       float(raw["swap_bytes_per_s"]), int(raw["bytes_per_token"]), str(raw.get("source", "")))
        except (KeyError, TypeError, ValueError) as err:
            raise SurvivalError(f"cost model: missing or malformed field ({err})", field="cost", value=None) from err
