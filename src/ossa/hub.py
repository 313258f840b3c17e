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

A tokenizer given as a Hub id (``LLM("model.gguf", tokenizer="org/name")``, as vLLM documents for
GGUF files) resolves to the snapshot folder of that repository holding its tokenizer files only
(tokenizer.json, tokenizer_config.json, the chat templates, generation_config.json for its end ids).

Every lookup takes vLLM's ``revision`` (a branch, tag or commit: refs/<revision> in the cache, the
``revision`` of the download), ``download_dir`` (a cache folder used instead of the default one) and
``hf_token`` (passed to ``huggingface_hub`` for gated or private repositories).

``huggingface_hub`` is an optional import (the ``hub`` extra): reading the cache needs only this
module, and fetching is the one thing that needs it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

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
# What a tokenizer needs (generation_config.json: the ids that end generation).
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt",
    "generation_config.json",
)  # fmt: skip
_TEMPLATES_DIR = "additional_chat_templates/"  # NAME.jinja: the named chat templates (tool_use, ...)


@dataclass(frozen=True)
class Source:
    """Where Hub ids are looked up and fetched from: vLLM's ``revision``, ``download_dir`` and
    ``hf_token`` options (None: the main branch, the default cache, huggingface_hub's own token)."""

    revision: str | None = None
    download_dir: str | None = None
    token: str | bool | None = None

    @property
    def ref(self) -> str:
        return self.revision or "main"

    def kwargs(self, cache: bool = True) -> dict[str, object]:
        """huggingface_hub's keyword arguments for this source (``cache``: with cache_dir, which
        downloads take and listings do not)."""
        out: dict[str, object] = {"cache_dir": cache_dir(self)} if cache else {}
        if self.revision is not None:
            out["revision"] = self.revision
        if self.token is not None:
            out["token"] = self.token
        return out


DEFAULT_SOURCE = Source()


def parse_id(text: str) -> tuple[str, str | None] | None:
    """``"org/name"`` -> ("org/name", None); ``"org/name:Q4_K_M"`` -> ("org/name", "Q4_K_M"); None if
    ``text`` is not a model id."""
    m = _ID.match(text)
    if m is None or ".." in text:
        return None
    return f"{m.group(1)}/{m.group(2)}", m.group(3)


def cache_dir(source: Source = DEFAULT_SOURCE) -> Path:
    """The Hugging Face hub cache: ``download_dir`` when given, else $HF_HUB_CACHE, else $HF_HOME/hub,
    else ~/.cache/huggingface/hub."""
    if source.download_dir:
        return Path(source.download_dir).expanduser()
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


def cached_snapshot(repo_id: str, revision: str = "main", source: Source = DEFAULT_SOURCE) -> Path | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (a ref such as "main", or a commit),
    honouring refs/<revision>; a cache without refs that holds one snapshot gives that one (for
    "main" only)."""
    repo = cache_dir(source) / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
        snap = repo / "snapshots" / commit
        return snap if snap.is_dir() else None
    snap = repo / "snapshots" / revision
    if snap.is_dir():
        return snap
    snaps = [p for p in (repo / "snapshots").glob("*") if p.is_dir()] if (repo / "snapshots").is_dir() else []
    alone = len(snaps) == 1 and not (repo / "refs").is_dir() and revision == "main"
    return snaps[0] if alone else None


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


def _templates(files: list[str]) -> list[str]:
    """The named chat templates (additional_chat_templates/NAME.jinja) among ``files``."""
    return [f for f in files if f.startswith(_TEMPLATES_DIR) and f.endswith(".jinja") and f.count("/") == 1]


def _folder_files(files: list[str]) -> list[str] | None:
    """The files a safetensors model needs, when ``files`` (the repository's names) make one; else
    None."""
    top = [f for f in files if "/" not in f]
    weights = [f for f in top if f.endswith(".safetensors")]
    if "config.json" not in top or not weights:
        return None
    return sorted(weights + [f for f in top if f in _MODEL_FILES] + _templates(files))


def _tokenizer_files(files: list[str]) -> list[str] | None:
    """The files a tokenizer needs, when ``files`` hold one (a tokenizer.json); else None."""
    if "tokenizer.json" not in files:
        return None
    return sorted([f for f in files if f in _TOKENIZER_FILES] + _templates(files))


def _local_files(snapshot: Path) -> list[str]:
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


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


def _fetch_hint(text: str, source: Source) -> str:
    """The command that fetches ``text`` from ``source`` into the cache it is looked up in."""
    flags = f" --revision {source.revision}" if source.revision else ""
    if source.download_dir:
        flags += f" --download-dir {source.download_dir}"
    return f"ossa pull {text}{flags}"


def from_cache(repo_id: str, quant: str | None, source: Source = DEFAULT_SOURCE) -> str | None:
    """The local path ``repo_id`` (with ``quant``) resolves to in the cache, or None if not cached."""
    snap = cached_snapshot(repo_id, source.ref, source)
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
        tag = f"{repo_id}:{quant or Path(_unsplit_name(gguf)).name}"
        raise ValueError(
            f"the Hugging Face cache ({cache_dir(source)}) holds {Path(gguf).name} of {repo_id} without "
            f"{len(missing)} of its shards ({Path(missing[0]).name}, ...), and HF_HUB_OFFLINE is set; "
            f"fetch them when online with: {_fetch_hint(tag, source)}"
        )
    return str(snap / gguf)


def _hub_module(repo_id: str, source: Source) -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ValueError(
            f"model {repo_id!r} is not in the Hugging Face cache ({cache_dir(source)}); fetching it needs "
            "huggingface_hub: pip install huggingface_hub (or 'ossa[hub]')"
        ) from None
    return huggingface_hub


def _fetching(repo_id: str, quiet: bool, source: Source, work: Callable[[Any], T]) -> T:
    """Runs ``work(huggingface_hub)`` with progress bars unless ``quiet``; any failure but a
    ValueError (network, authentication, missing repository or revision) -> one line for the user."""
    hf = _hub_module(repo_id, source)
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    try:
        if quiet:
            disable_progress_bars()
        try:
            return work(hf)
        finally:
            if quiet:
                enable_progress_bars()
    except ValueError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        at = f" at revision {source.revision!r}" if source.revision else ""
        raise ValueError(f"cannot fetch {repo_id!r}{at} from the Hugging Face Hub: {first}") from None


def fetch(repo_id: str, quant: str | None, quiet: bool = False, source: Source = DEFAULT_SOURCE) -> str:
    """Download what ``repo_id`` (with ``quant``) needs into the cache; return its local path."""

    def work(hf: Any) -> str:
        kw = source.kwargs()
        files = hf.list_repo_files(repo_id, **source.kwargs(cache=False))
        folder = None if quant is not None else _folder_files(files)
        if folder is not None:
            return str(hf.snapshot_download(repo_id, allow_patterns=folder, **kw))
        gguf = pick_gguf(repo_id, files, quant)
        if gguf is None:
            raise ValueError(
                f"{repo_id} holds neither safetensors weights with a config.json nor a GGUF file"
            )
        paths = [hf.hf_hub_download(repo_id, f, **kw) for f in gguf_shards(gguf)]
        return str(paths[0])  # a split model: every shard fetched, the first one loads them all

    return _fetching(repo_id, quiet, source, work)


def resolve(text: str, quiet: bool = False, source: Source = DEFAULT_SOURCE) -> str:
    """A model id -> a local path: from the cache, else fetched (unless offline). ValueError with one
    line saying what to do when neither works."""
    parsed = parse_id(text)
    if parsed is None:
        raise ValueError(f"{text!r} is not a Hugging Face model id (org/name or org/name:QUANT)")
    repo_id, quant = parsed
    path = from_cache(repo_id, quant, source)
    if path is not None:
        return path
    if offline():
        at = f" at revision {source.revision!r}" if source.revision else ""
        raise ValueError(
            f"model {text!r}{at} is neither a local path nor in the Hugging Face cache "
            f"({cache_dir(source)}), and HF_HUB_OFFLINE is set; fetch it when online with: "
            f"{_fetch_hint(text, source)}"
        )
    return fetch(repo_id, quant, quiet, source)


def resolve_tokenizer(text: str, quiet: bool = False, source: Source = DEFAULT_SOURCE) -> str:
    """A tokenizer given as a Hub id -> the local folder of its tokenizer files (from the cache, else
    fetched: those files only). A repository without a tokenizer.json (a GGUF-only one) resolves as a
    model does: its GGUF file carries the tokenizer."""
    parsed = parse_id(text)
    if parsed is None:
        raise ValueError(f"{text!r} is not a Hugging Face model id (org/name)")
    repo_id, quant = parsed
    if quant is None:
        snap = cached_snapshot(repo_id, source.ref, source)
        if snap is not None and (snap / "tokenizer.json").is_file():
            return str(snap)
        if not offline():

            def work(hf: Any) -> str | None:
                wanted = _tokenizer_files(hf.list_repo_files(repo_id, **source.kwargs(cache=False)))
                if wanted is None:
                    return None
                return str(hf.snapshot_download(repo_id, allow_patterns=wanted, **source.kwargs()))

            got = _fetching(repo_id, quiet, source, work)
            if got is not None:
                return got
    return resolve(text, quiet, source)
