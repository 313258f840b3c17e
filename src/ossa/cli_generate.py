"""``ossa generate`` and ``ossa chat``: text streamed to the terminal as it is produced."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _sampling(args: argparse.Namespace) -> Any:
    from .sampling_params import SamplingParams

    return SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        max_tokens=args.max_tokens,
    )


def run_generate(args: argparse.Namespace, engine_kwargs: dict) -> int:
    from .llm import LLM

    sp = _sampling(args)  # validate before loading anything
    llm = LLM(args.model, **engine_kwargs)
    prompt: Any = args.prompt
    if args.chat:
        p = llm.input_processor.chat([{"role": "user", "content": args.prompt}])
        prompt = {"prompt": p.text, "prompt_token_ids": p.token_ids}
    else:
        sys.stdout.write(args.prompt)
    for delta in llm.stream(prompt, sp):
        sys.stdout.write(delta)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


def run_chat(args: argparse.Namespace, engine_kwargs: dict) -> int:
    from .llm import LLM

    sp = _sampling(args)
    llm = LLM(args.model, **engine_kwargs)
    history: list[dict[str, str]] = []
    if args.system:
        history.append({"role": "system", "content": args.system})
    base = list(history)
    interactive = sys.stdin.isatty()
    if interactive:
        print("ossa chat: /reset clears the history, Ctrl-D quits.", file=sys.stderr)
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            if interactive:
                print(file=sys.stderr)
            return 0
        if not line.strip():
            continue
        if line.strip() == "/reset":
            history = list(base)
            print("(history cleared)", file=sys.stderr)
            continue
        history.append({"role": "user", "content": line})
        p = llm.input_processor.chat(history)
        try:
            llm.input_processor.check_length(p)
        except ValueError:
            print(
                f"(the conversation no longer fits max_model_len={llm.max_model_len}; /reset)",
                file=sys.stderr,
            )
            history.pop()
            continue
        reply = []
        for delta in llm.stream({"prompt": p.text, "prompt_token_ids": p.token_ids}, sp):
            reply.append(delta)
            sys.stdout.write(delta)
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
        history.append({"role": "assistant", "content": "".join(reply)})
