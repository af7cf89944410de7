"""Model configuration (GPT shape and which attention each layer and head uses).

Attention choice, one per group of heads:
- ``flashprobe``: `flashprobe.attention` with a KernelSpec and a backend (emulator/Triton);
- ``sdpa``: `torch.nn.functional.scaled_dot_product_attention` in the ambient dtype (baselines,
  throughput);
- ``math``: standard attention computed in fp32 whatever the autocast dtype (the paper's
  "standard attention" control).

Overrides cascade: global `attention` → `layers[i]` → `layers[i].heads[h]`. An override mapping
changes only the keys it names; its `spec` is a preset name, a mapping with `preset` (a fresh
spec), or a mapping of fields applied on top of the parent's spec. Layers and heads are 0-based,
so the paper's "layer 2" is layer 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from flashprobe.backends import Backend
from flashprobe.config_tools import build_config, check_fields, config_to_dict, require, short_repr
from flashprobe.errors import FlashprobeError
from flashprobe.spec import KernelSpec, make_spec, resolve_spec

AttentionImpl = Literal["flashprobe", "sdpa", "math"]
#: The most layers and heads a model may have: far beyond any model this trains (GPT-2 XL: 48
#: layers, 25 heads), and small enough that resolving each layer's heads (a list per layer)
#: stays instant; a typo such as n_layer: 1000000000 is refused at once instead of hanging.
MAX_LAYERS = 1024
MAX_HEADS = 1024
#: The widest model and the longest context likewise (GPT-3 175B: 12,288 wide, 2,048 long):
#: n_embd: 2000000000 would otherwise ask for terabytes before failing.
MAX_EMBD = 65536
MAX_BLOCK_SIZE = 1 << 20
MAX_VOCAB = 1 << 24


# -- attention choice ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """How one group of heads computes attention."""

    impl: AttentionImpl = "flashprobe"
    spec: KernelSpec = dataclasses.field(default_factory=KernelSpec)
    backend: Backend = "auto"

    SECTION: ClassVar[str] = "model.attention"

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)
        try:
            object.__setattr__(self, "spec", resolve_spec(self.spec))
        except FlashprobeError as exc:
            raise FlashprobeError(f"{self.SECTION}.spec: {exc}") from None

    def label(self) -> str:
        if self.impl != "flashprobe":
            return self.impl
        return f"flashprobe[{self.spec.describe()}]"

    def override(self, data: Any, section: str) -> AttentionConfig:
        """This config with the keys named in `data` changed (spec fields merge, see module doc)."""
        if data is None:
            return self
        if not isinstance(data, Mapping):
            raise FlashprobeError(f"{section} must be a mapping, got {short_repr(data)}")
        fields = {"impl": self.impl, "spec": self.spec, "backend": self.backend}
        for key, value in data.items():
            if key not in fields:
                raise FlashprobeError(
                    f"unknown key {section}.{key}; known keys: impl, spec, backend"
                )
            fields[key] = value
        raw_spec = data.get("spec")
        try:
            if isinstance(raw_spec, Mapping) and "preset" not in raw_spec:
                fields["spec"] = make_spec(self.spec, raw_spec)
            elif raw_spec is not None:
                fields["spec"] = resolve_spec(raw_spec)
        except FlashprobeError as exc:
            raise FlashprobeError(f"{section}.spec: {exc}") from None
        return _with_section(section, fields)

    def to_dict(self) -> dict[str, Any]:
        return {"impl": self.impl, "spec": self.spec.to_dict(), "backend": self.backend}


def _with_section(section: str, fields: dict[str, Any]) -> AttentionConfig:
    # Errors raised while validating an override should name the override's own path.
    try:
        return AttentionConfig(**fields)
    except FlashprobeError as exc:
        message = str(exc)
        if message.startswith(AttentionConfig.SECTION + "."):
            message = section + message[len(AttentionConfig.SECTION) :]
        raise FlashprobeError(message) from None


@dataclasses.dataclass(frozen=True)
class HeadGroup:
    """Heads of one layer that share one attention config (head indices ascending)."""

    heads: tuple[int, ...]
    attention: AttentionConfig


# -- model ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """nanoGPT-style GPT-2. vocab_size None takes the dataset's vocabulary."""

    n_layer: int = 6
    n_head: int = 6
    #: Key/value heads (grouped-query attention: query head h reads key/value head
    #: h // (n_head / n_kv_head)); None: one per query head, as GPT-2.
    n_kv_head: int | None = None
    n_embd: int = 384
    block_size: int = 1024
    vocab_size: int | None = None
    bias: bool = False
    dropout: float = 0.0
    attention: AttentionConfig = dataclasses.field(default_factory=AttentionConfig)
    #: Per-layer overrides, as given: {layer: {impl?, spec?, backend?, heads?: {head: {...}}}}.
    layers: Mapping[int, Any] = dataclasses.field(default_factory=dict)

    SECTION: ClassVar[str] = "model"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ModelConfig:
        return build_config(cls, data, cls.SECTION)

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)
        for name in ("n_layer", "n_head", "n_embd", "block_size"):
            require(getattr(self, name) >= 1, f"model.{name} must be >= 1")
        for name, most in (
            ("n_layer", MAX_LAYERS),
            ("n_head", MAX_HEADS),
            ("n_embd", MAX_EMBD),
            ("block_size", MAX_BLOCK_SIZE),
        ):
            value = getattr(self, name)
            require(value <= most, f"model.{name} must be at most {most}, got {value}")
        require(
            self.n_embd % self.n_head == 0,
            f"model.n_embd ({self.n_embd}) must be a multiple of model.n_head ({self.n_head})",
        )
        require(
            self.n_kv_head is None or (self.n_kv_head >= 1 and self.n_head % self.n_kv_head == 0),
            f"model.n_kv_head ({self.n_kv_head}) must be a divisor of model.n_head "
            f"({self.n_head}), or null",
        )
        require(
            self.vocab_size is None or 2 <= self.vocab_size <= MAX_VOCAB,
            f"model.vocab_size must be in [2, {MAX_VOCAB}], got {self.vocab_size}",
        )
        require(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1), got {self.dropout}")
        attention = self.attention
        if isinstance(attention, str):  # shorthand: a preset name or an impl name
            attention = (
                {"impl": attention} if attention in ("sdpa", "math") else {"spec": attention}
            )
        if not isinstance(attention, AttentionConfig):
            attention = AttentionConfig().override(attention, "model.attention")
        object.__setattr__(self, "attention", attention)
        if not isinstance(self.layers, Mapping):
            raise FlashprobeError(f"model.layers must be a mapping, got {short_repr(self.layers)}")
        normalised = {}
        for key, value in self.layers.items():
            layer = _index(key, self.n_layer, "model.layers", "layer")
            normalised[layer] = value
        object.__setattr__(self, "layers", normalised)
        groups = tuple(self._resolve_layer(i) for i in range(self.n_layer))
        object.__setattr__(self, "_groups", groups)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        """Key/value heads per layer (n_kv_head, or n_head when it is None)."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    def with_vocab(self, vocab_size: int) -> ModelConfig:
        return dataclasses.replace(self, vocab_size=vocab_size)

    def head_groups(self, layer: int) -> tuple[HeadGroup, ...]:
        """The resolved attention of `layer`: head groups in order of their first head."""
        return self._groups[layer]  # type: ignore[attr-defined]

    def _resolve_layer(self, layer: int) -> tuple[HeadGroup, ...]:
        section = f"model.layers.{layer}"
        data = self.layers.get(layer)
        base = self.attention
        heads_data: Any = None
        if data is not None:
            if not isinstance(data, Mapping):
                raise FlashprobeError(f"{section} must be a mapping, got {short_repr(data)}")
            data = dict(data)
            heads_data = data.pop("heads", None)
            base = base.override(data, section)
        per_head = [base] * self.n_head
        if heads_data is not None:
            if not isinstance(heads_data, Mapping):
                raise FlashprobeError(f"{section}.heads must be a mapping of head → settings")
            for key, value in heads_data.items():
                head = _index(key, self.n_head, f"{section}.heads", "head")
                per_head[head] = base.override(value, f"{section}.heads.{head}")
        groups: dict[AttentionConfig, list[int]] = {}
        for head, config in enumerate(per_head):
            groups.setdefault(config, []).append(head)
        return tuple(HeadGroup(tuple(h), c) for c, h in groups.items())

    def describe_attention(self) -> list[str]:
        """One line per layer: which attention each head group uses."""
        lines = []
        for layer in range(self.n_layer):
            groups = self.head_groups(layer)
            if len(groups) == 1:
                lines.append(f"layer {layer}: {groups[0].attention.label()}")
            else:
                parts = [f"heads {list(g.heads)}: {g.attention.label()}" for g in groups]
                lines.append(f"layer {layer}: " + "; ".join(parts))
        return lines

    def to_dict(self) -> dict[str, Any]:
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("attention", "layers")
        }
        out["attention"] = self.attention.to_dict()
        out["layers"] = {str(k): config_to_dict(v) for k, v in self.layers.items()}
        return out


def _index(key: Any, count: int, section: str, what: str) -> int:
    try:
        index = int(key)  # YAML may give "1" when keys are quoted
    except (TypeError, ValueError):
        raise FlashprobeError(f"{section}: {what} index must be an integer, got {key!r}") from None
    if not 0 <= index < count:
        raise FlashprobeError(f"{section}: {what} {index} out of range 0..{count - 1}")
    return index
