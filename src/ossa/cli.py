"""The ``ossa`` command: generate | chat | serve | bench | pull | inspect."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    from .config import EngineArgs

    EngineArgs.add_cli_args(p)  # every engine option, its default EngineArgs' own
    _add_gguf_file_arg(p)


def _add_gguf_file_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gguf-file",
        default=None,
        metavar="NAME",
        help="with a Hub id org/name: which GGUF file of the repository (same as org/name:NAME)",
    )


MODEL_HELP = "GGUF path, HF folder, Hub id org/name[:QUANT] or short name (default: smollm2-135m)"


def _fold_model_args(args: argparse.Namespace) -> None:
    """The model given as vLLM does (``serve MODEL``) or as a flag (``--model MODEL``), either way on
    every command: ``generate [MODEL] PROMPT``, ``chat [MODEL]``, ``serve [MODEL]``, all with ``--model``."""
    given: list[str] = []
    if args.command == "generate":
        if len(args.words) > 2:
            raise ValueError("generate takes [MODEL] PROMPT: quote a prompt of several words")
        *model, args.prompt = args.words
        given = model
    elif args.command == "chat":
        given = [args.model_positional] if args.model_positional is not None else []
    elif args.command == "serve":
        given = [args.model_option] if args.model_option is not None else []
    for other in given:
        if args.model is not None and args.model != other:
            raise ValueError(f"the model is given twice: {other!r} and {args.model!r}")
        args.model = other


_HUB_OPTIONS = ("revision", "download_dir", "hf_token")  # what `pull` and `inspect` take of a Hub id


def _fold_gguf_file(args: argparse.Namespace) -> None:
    """--gguf-file NAME with model org/name -> model org/name:NAME (ossa.hub resolves both)."""
    name = getattr(args, "gguf_file", None)
    if name is None:
        return
    from . import hub

    model = getattr(args, "model", None)
    if model is None or hub.parse_id(model) is None or ":" in model:
        raise ValueError("--gguf-file needs a Hugging Face model id org/name as the model")
    args.model = f"{model}:{name}"


def _add_serve_args(p: argparse.ArgumentParser) -> None:
    # Defaults live in ossa.server.launcher (not imported here: it pulls in the web stack).
    p.add_argument(
        "--chat-template",
        default=None,
        help="a chat template (a file, or the template itself) used instead of the model's",
    )
    p.add_argument(
        "--trust-request-chat-template",
        action="store_true",
        help="let requests bring their own chat template (rendered in a worker process under a time "
        "and memory limit); off by default",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=None,
        help="on SIGTERM, seconds in-flight requests get to finish before they are ended with an error "
        "(default 10)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        help="seconds a client has to send its request headers (default 10; 0: no limit)",
    )
    p.add_argument(
        "--timeout-keep-alive", type=float, default=None,
        help="seconds an idle keep-alive connection stays open (default 5)",
    )  # fmt: skip
    p.add_argument(
        "--limit-concurrency",
        type=int,
        default=None,
        help="connections and requests at once before new requests get a 503 (default 4096)",
    )
    p.add_argument(
        "--allowed-origins", type=json.loads, default=["*"], help='CORS origins, as JSON (default: ["*"])'
    )
    p.add_argument(
        "--allowed-methods", type=json.loads, default=["*"], help='CORS methods, as JSON (default: ["*"])'
    )
    p.add_argument(
        "--allowed-headers", type=json.loads, default=["*"], help='CORS headers, as JSON (default: ["*"])'
    )
    p.add_argument("--allow-credentials", action="store_true", help="CORS: allow credentials")
    p.add_argument(
        "--tool-call-parser",
        choices=[
            "hermes",
            "llama3_json",
            "mistral",
            "pythonic",
            "qwen3_coder",
            "glm45",
            "gemma4",
            "functiongemma",
            "deepseek_v3",
            "kimi_k2",
            "command_r7b",
            "minimax_m2",
            "seed_oss",
        ],  # fmt: skip
        default=None,
        help="the model's tool-call format for tool_choice=auto (default: recognised in the chat template)",
    )
    p.add_argument(
        "--reasoning-parser",
        choices=["auto", "none", "think", "gemma4", "mistral", "command", "seed"],
        default="auto",
        help="a thinking model's <think> block as reasoning_content: auto (where the chat template writes "
        "one), think (always looked for), none (the reply as it is)",
    )


def _engine_kwargs(args: argparse.Namespace) -> dict:
    """The engine options the flags give (validated), as ``LLM``'s keyword arguments."""
    from .config import EngineArgs

    options = dataclasses.asdict(EngineArgs.from_cli_args(args))
    del options["model"]
    return options


def _cmd_pull(args: argparse.Namespace) -> int:
    from . import models
    from .config import EngineArgs

    source, _ = EngineArgs.from_cli_args(args).hub_sources()
    path = models.pull(args.name, source=source)
    print(path)
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from . import models
    from .config import EngineArgs

    source, _ = EngineArgs.from_cli_args(args).hub_sources()
    info = models.inspect(
        models.resolve(args.model, source), kv_tokens=args.kv_tokens, kv_cache_dtype=args.kv_cache_dtype
    )
    print(models.format_inspect(info))
    if args.kv_cache_memory_bytes is not None:
        if args.kv_cache_memory_bytes <= 0:
            raise ValueError("--kv-cache-memory-bytes must be positive")
        block_bytes = info["kv_bytes_per_token"] * args.block_size
        blocks = args.kv_cache_memory_bytes // block_bytes
        print(
            f"KV budget     {args.kv_cache_memory_bytes} bytes = {blocks} blocks of {args.block_size} tokens "
            f"= {blocks * args.block_size} tokens"
        )
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from .cli_generate import run_generate

    return run_generate(args, _engine_kwargs(args))


def _cmd_chat(args: argparse.Namespace) -> int:
    from .cli_generate import run_chat

    return run_chat(args, _engine_kwargs(args))


def _cmd_serve(args: argparse.Namespace) -> int:
    if args.ray:
        from .ray.serve import run_from_cli

        return run_from_cli(args, _engine_kwargs(args))
    if args.num_replicas is not None or args.prefix_routing:
        raise ValueError("--num-replicas and --prefix-routing need --ray")
    from .server.launcher import run_server

    return run_server(args, _engine_kwargs(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(args, _engine_kwargs(args))


def build_parser() -> argparse.ArgumentParser:
    from .config import EngineArgs

    parser = argparse.ArgumentParser(prog="ossa", description="ossa: LLM inference on CPUs")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="generate text from a prompt, streamed to the terminal")
    p.add_argument(
        "words", nargs="+", metavar="[MODEL] PROMPT", help="the prompt, after the model if it is given here"
    )
    p.add_argument("--model", default=None, help=f"{MODEL_HELP} (or the first argument)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=-1)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    _add_engine_args(p)
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("chat", help="interactive multi-turn chat (/reset clears history, Ctrl-D quits)")
    p.add_argument("model_positional", nargs="?", default=None, metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--model", default=None, help="the same as MODEL")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=-1)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--system", default=None, help="system prompt")
    _add_engine_args(p)
    p.set_defaults(func=_cmd_chat)

    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    p.add_argument("model", nargs="?", default=None, metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--model", dest="model_option", metavar="MODEL", default=None, help="the same as MODEL")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    _add_serve_args(p)
    p.add_argument(
        "--ray", action="store_true", help="serve through Ray Serve replicas (pip install 'ossa[ray]')"
    )
    p.add_argument("--num-replicas", type=int, default=None, help="--ray: engine replicas (default 1)")
    p.add_argument(
        "--prefix-routing", action="store_true", help="--ray: send shared prompt prefixes to one replica"
    )
    _add_engine_args(p)
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("bench", help="benchmarks: throughput | latency | serve")
    p.add_argument("mode", choices=["throughput", "latency", "serve"])
    p.add_argument("--model", default=None)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--num-iters", type=int, default=5, help="latency: timed requests after a warm-up")
    p.add_argument(
        "--batch-sizes",
        default=None,
        help="throughput: sweep these batch sizes (e.g. 1,4,8,16,32): requests/s and output tok/s each",
    )
    _add_engine_args(p)
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser(
        "pull", help="fetch a known model into ~/.cache/ossa, or a Hub id org/name[:QUANT] into the HF cache"
    )
    p.add_argument("name", nargs="?", default="smollm2-135m")
    EngineArgs.add_cli_args(p, only=_HUB_OPTIONS)
    p.set_defaults(func=_cmd_pull)

    p = sub.add_parser("inspect", help="print a model's architecture, tensor types and memory needs")
    p.add_argument("model", nargs="?", default=None)
    p.add_argument("--kv-tokens", type=int, default=None, help="size the KV cache for this many tokens")
    p.add_argument(
        "--kv-cache-memory-bytes", type=int, default=None, help="report how many tokens this budget holds"
    )
    EngineArgs.add_cli_args(p, only=("kv_cache_dtype", "block_size", *_HUB_OPTIONS))
    _add_gguf_file_arg(p)
    p.set_defaults(func=_cmd_inspect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _fold_model_args(args)
        _fold_gguf_file(args)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"ossa: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
