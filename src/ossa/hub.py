"""Hugging Face Hub model ids: ``org/name`` and ``org/name:QUANT`` -> a local model path.

A model id is looked up first in the local Hugging Face cache, the layout ``huggingface_hub``
writes and every HF tool shares::

    $HF_HUB_CACHE (or $HF_HOME/hub, or ~/.cache/huggingface/hub)
      models--Qwen--Qwen2.5-0.5B-Instruct/
        refs/main                  the commit "main" points to
        snapshots/<commit>/        config.json, model.safetensors, tokenizer.json, ... (links to blobs/)

and, when it is not there and the Hub is reachable (``HF_HUB_OFFLINE`` unset), fetched with
``huggingface_hub`` into that same cache: only the files a model needs (config, safetensors,
tokenizer files, chat template), or the one GGUF file asked for, with a progress bar.

What a repository resolves to: its folder when it holds config.json and safetensors weights, else
one of its GGUF files: the one named by ``:QUANT`` (``Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M``, a
quantization tag at the end of the file name, or the file name itself), else the only one, else
Q4_K_M when present, as llama.cpp's ``-hf`` and Ollama pick. A split GGUF model
(``x-Q4_K_M-00001-of-00003.gguf`` …) counts as one file named ``x-Q4_K_M.gguf``: every shard is
fetched, and the path is its first shard's (loading any shard loads them all).

``huggingface_hub`` is an optional import (the ``hub`` extra): reading the cache needs only this
module, and fetching is the one thing that needs it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DEFAULT_QUANT = "Q4_K_M"
_ID = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(?::([^/:\s]+))?$")
# A shard of a split GGUF model (llama.cpp's gguf-split): name-00001-of-00003.gguf, ...
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# The files of a safetensors repository a model needs; weights are the *.safetensors at the top level.
_MODEL_FILES = (
    "config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt",
)  # fmt: skip


def parse_id(text: str) -> tuple[str, str | None] | None:
    """``"org/name"`` -> ("org/name", None); ``"org/name:Q4_K_M"`` -> ("org/name", "Q4_K_M"); None if
    ``text`` is not a model id."""
    m = _ID.match(text)
    if m is None or ".." in text:
        return None
    return f"{m.group(1)}/{m.group(2)}", m.group(3)


def cache_dir() -> Path:
    """The Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HF_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface") / "hub"


def offline() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) asks not to reach the Hub."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(key, "").strip().lower() in ("1", "true", "yes", "on"):
            return True
    return False


def cached_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (a ref such as "main", or a commit),
    honouring refs/<revision>; a cache without refs that holds one snapshot gives that one."""
    repo = cache_dir() / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
        snap = repo / "snapshots" / commit
        return snap if snap.is_dir() else None
    snap = repo / "snapshots" / revision
    if snap.is_dir():
        return snap
    snaps = [p for p in (repo / "snapshots").glob("*") if p.is_dir()] if (repo / "snapshots").is_dir() else []
    return snaps[0] if len(snaps) == 1 and not (repo / "refs").is_dir() else None


def _ggufs(files: list[str]) -> list[str]:
    """The GGUF models among ``files``: whole files, and split models by their first shard."""
    out = []
    for f in files:
        m = _SPLIT.search(f)
        if f.lower().endswith(".gguf") and (m is None or int(m.group(1)) == 1):
            out.append(f)
    return sorted(out)


def _unsplit_name(f: str) -> str:
    """A split model's name without its shard suffix (x-Q4_K_M-00001-of-00002.gguf -> x-Q4_K_M.gguf)."""
    return _SPLIT.sub(".gguf", f)


def gguf_shards(first: str) -> list[str]:
    """Every shard of the GGUF model whose first file is ``first`` (``[first]`` when it is not split)."""
    m = _SPLIT.search(first)
    if m is None:
        return [first]
    count, stem = int(m.group(2)), first[: m.start()]
    return [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def pick_gguf(repo_id: str, files: list[str], quant: str | None) -> str | None:
    """The GGUF file of ``files`` that ``quant`` names (see the module docstring); None when ``quant``
    is None and the repository has no GGUF. ValueError when the choice is missing or ambiguous."""
    ggufs = _ggufs(files)
    if quant is None:
        if len(ggufs) <= 1:
            return ggufs[0] if ggufs else None
        quant = DEFAULT_QUANT
        if not _matching(ggufs, quant):
            raise ValueError(
                f"{repo_id} holds several GGUF files; pick one with {repo_id}:QUANT or --gguf-file NAME: "
                + ", ".join(Path(f).name for f in ggufs)
            )
    found = _matching(ggufs, quant)
    if len(found) != 1:
        what = "no GGUF file" if not found else "several GGUF files"
        listing = ", ".join(Path(f).name for f in ggufs) or "none"
        raise ValueError(f"{repo_id} has {what} matching {quant!r} (its GGUF files: {listing})")
    return found[0]


def _matching(ggufs: list[str], quant: str) -> list[str]:
    """Files named ``quant`` exactly, or whose name ends in ``[-._]quant.gguf`` (any case)."""
    q = quant.lower()
    exact = [f for f in ggufs if q in (f.lower(), Path(f).name.lower(), Path(_unsplit_name(f)).name.lower())]
    if exact:
        return exact
    tail = re.compile(r"[-._]" + re.escape(q) + r"\.gguf$")
    return [f for f in ggufs if tail.search(Path(_unsplit_name(f)).name.lower())]


def _folder_files(files: list[str]) -> list[str] | None:
    """The files a safetensors model needs, when ``files`` (top-level names) make one; else None."""
    top = [f for f in files if "/" not in f]
    weights = [f for f in top if f.endswith(".safetensors")]
    if "config.json" not in top or not weights:
        return None
    return sorted(weights + [f for f in top if f in _MODEL_FILES])


def _local_files(snapshot: Path) -> list[str]:
    return sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())


def _complete_folder(snapshot: Path) -> bool:
    """A cached safetensors snapshot with config.json and every weight file its index names."""
    if not (snapshot / "config.json").is_file():
        return False
    index = snapshot / "model.safetensors.index.json"
    if index.is_file():
        import json

        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            return False
        return all((snapshot / s).is_file() for s in shards)
    return (snapshot / "model.safetensors").is_file()


def from_cache(repo_id: str, quant: str | None) -> str | None:
    """The local path ``repo_id`` (with ``quant``) resolves to in the cache, or None if not cached."""
    snap = cached_snapshot(repo_id)
    if snap is None:
        return None
    files = _local_files(snap)
    if quant is None and _complete_folder(snap):
        return str(snap)
    if quant is None and not offline() and not _matching(_ggufs(files), DEFAULT_QUANT):
        return None  # which GGUF an untagged id means depends on the whole repository: ask the Hub
    try:
        gguf = pick_gguf(repo_id, files, quant)
    except ValueError:
        if offline():
            raise  # names the GGUF files that are cached
        return None  # the one asked for may be on the Hub (fetch lists them all)
    if gguf is None:
        return None
    missing = [f for f in gguf_shards(gguf) if not (snap / f).is_file()]
    if missing and not offline():
        return None  # a split model partly downloaded: fetch fetches the rest
    if missing:
        raise ValueError(
            f"the Hugging Face cache ({cache_dir()}) holds {Path(gguf).name} of {repo_id} without "
            f"{len(missing)} of its shards ({Path(missing[0]).name}, ...), and HF_HUB_OFFLINE is set; "
            f"fetch them when online with: ossa pull {repo_id}:{quant or Path(_unsplit_name(gguf)).name}"
        )
    return str(snap / gguf)


def fetch(repo_id: str, quant: str | None, quiet: bool = False) -> str:
    """Download what ``repo_id`` (with ``quant``) needs into the cache; return its local path."""
    try:
        import huggingface_hub
    except ImportError:
        raise ValueError(
            f"model {repo_id!r} is not in the Hugging Face cache ({cache_dir()}); fetching it needs "
            "huggingface_hub: pip install huggingface_hub (or 'ossa[hub]')"
        ) from None
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    try:
        files = huggingface_hub.list_repo_files(repo_id)
        folder = None if quant is not None else _folder_files(files)
        if quiet:
            disable_progress_bars()
        try:
            if folder is not None:
                return str(
                    huggingface_hub.snapshot_download(repo_id, allow_patterns=folder, cache_dir=cache_dir())
                )
            gguf = pick_gguf(repo_id, files, quant)
            if gguf is None:
                raise ValueError(
                    f"{repo_id} holds neither safetensors weights with a config.json nor a GGUF file"
                )
            paths = [
                huggingface_hub.hf_hub_download(repo_id, f, cache_dir=cache_dir()) for f in gguf_shards(gguf)
            ]
            return str(paths[0])  # a split model: every shard fetched, the first one loads them all
        finally:
            if quiet:
                enable_progress_bars()
    except ValueError:
        raise
    except Exception as e:  # network, authentication, missing repository: one line for the user
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot fetch {repo_id!r} from the Hugging Face Hub: {first}") from None


def resolve(text: str, quiet: bool = False) -> str:
    """A model id -> a local path: from the cache, else fetched (unless offline). ValueError with one
    line saying what to do when neither works."""
    parsed = parse_id(text)
    if parsed is None:
        raise ValueError(f"{text!r} is not a Hugging Face model id (org/name or org/name:QUANT)")
    repo_id, quant = parsed
    path = from_cache(repo_id, quant)
    if path is not None:
        return path
    if offline():
        raise ValueError(
            f"model {text!r} is neither a local path nor in the Hugging Face cache ({cache_dir()}), and "
            f"HF_HUB_OFFLINE is set; fetch it when online with: ossa pull {text}  "
            f"(or huggingface-cli download {repo_id})"
        )
    return fetch(repo_id, quant, quiet)
