"""`llmbus generate "PROMPT"`: start a shard pipeline on this machine and stream one answer.

One request, one sequence, driven step by step through real shard processes: the smallest
whole path from text to text. The scheduler-driven stack (`llmbus up`) serves many at once.
Its shards are a private stack of this command, keyed as `llmbus up` keys its own (a key of
their own unless --key-file or --insecure says otherwise). A base model (no chat template)
continues the prompt as it is, as Ollama's /api/generate does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="run a shard pipeline here and answer one prompt")
    p.add_argument("prompt")
    p.add_argument("--model", type=Path, default=None, help="GGUF file (default: pulled)")
    p.add_argument("--shards", type=int, default=2, help="shard processes to cut the model into")
    p.add_argument("--codec", default="fp16", choices=("fp32", "fp16", "int8"))
    p.add_argument("--system", default=None, help="system message (default: the template's)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--logs", type=Path, default=None, help="folder for the shards' logs")
    from .stacks import add_key_arguments
    add_key_arguments(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_generate(args))
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as e:   # bad option values, a bad model file
        print(f"llmbus generate: {e}", file=sys.stderr)
        return 2


async def _generate(args) -> int:
    import numpy as np

    import wire
    from bus.config import BusConfig, ServiceConfig
    from bus.errors import BusError
    from services.health.processes import Children, free_port
    from services.modelstore.gguf_meta import read_metadata
    from services.modelstore.pull import pull
    from services.scheduler.pipelines.answers import PipelineClient
    from services.scheduler.placement.policy import split_layers
    from services.tokenizer import Tokenizer
    from wire.messages.sampling import SamplingParams
    from wire.messages.shard import Forward, RouteStage

    from .stacks import private_cluster, stack_key_of

    model = args.model or pull(quiet=False)
    meta = read_metadata(model)
    arch = meta.get("general.architecture", "?")
    n_layers = int(meta.get(f"{arch}.block_count", 0))
    ranges = split_layers(n_layers, args.shards)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed).resolved()
    tok = Tokenizer.from_gguf(model)
    ids = prompt_ids(tok, args.prompt, args.system)
    page = 16
    pages = (len(ids) + args.max_tokens + page - 1) // page + 1

    cluster = private_cluster()
    ports = [free_port() for _ in ranges]
    me = free_port()        # this process on the bus: the last shard sends it every answer
    peers_args = [a for p in (*ports, me) for a in ("--peer", f"127.0.0.1:{p}")]
    kids = Children(log_dir=args.logs)
    key, own_key = stack_key_of(args, cluster)
    # The shards take this key file, and no other ($LLMBUS_KEY_FILE is only --key-file's default).
    key_args = ["--key-file", str(args.key_file.resolve())] if key is not None else []
    client = PipelineClient(ServiceConfig(
        name="generate", kind="client", rpc_port=me, discover=True,
        bus=BusConfig(cluster=cluster, mdns=False, peers=tuple(f"127.0.0.1:{p}" for p in ports),
                      key=key)))
    t0 = time.monotonic()
    try:
        for (a, b), port in zip(ranges, ports):
            kids.start(f"shard-{a}", ["run", "shard", "--name", f"shard-{a}", "--cluster", cluster,
                                      "--no-mdns", "--rpc-port", str(port), *peers_args, *key_args,
                                      "--model", str(model), "--layers", f"{a}:{b}",
                                      "--codec", args.codec, "--pages", str(pages)])
        await client.start()
        directory = client.directory
        while len([e for e in directory.of_kind("shard") if e.state == "ready"]) < len(ranges):
            if kids.dead():
                print("llmbus generate: a shard exited while starting (see --logs)", file=sys.stderr)
                return 1
            if time.monotonic() - t0 > 300:
                print(f"llmbus generate: shards not ready: {directory.explain()}", file=sys.stderr)
                return 1
            await asyncio.sleep(0.1)
        await client.reached_by(f"shard-{ranges[-1][0]}")
        print(f"[{len(ranges)} shards {ranges} ready in {time.monotonic() - t0:.1f}s]",
              file=sys.stderr)

        stream = tok.stream(skip_special=True)
        history = list(ids)
        feed, start = list(ids), 0
        table = [list(range(pages))]
        # Every batch takes the shards started here, in their epochs: a replica's KV is not ours.
        route = [RouteStage(f"shard-{a}", directory.get(f"shard-{a}").epoch) for a, _ in ranges]
        t_first = time.monotonic()
        for step in range(args.max_tokens):
            body = Forward(
                batch_id=step, first_layer=0,
                positions=list(range(start, start + len(feed))), query_lens=[len(feed)],
                page_table=table,
                tokens=wire.Tensor(np.asarray(feed, np.int32)),
                sampling=[params], steps=[step], route=route)
            try:
                reply = await client.answers.forward(f"shard-{ranges[0][0]}", body, timeout=60)
            except BusError as e:
                print(f"\nllmbus generate: {e}", file=sys.stderr)
                return 1
            if reply.errors:
                print(f"\nllmbus generate: {reply.errors[0]}", file=sys.stderr)
                return 1
            token = int(reply.tokens.array()[0])
            if step == 0:
                t_first = time.monotonic()
            if token in tok.eot_ids:
                break
            print(stream.push(token), end="", flush=True)
            history.append(token)
            start += len(feed)
            feed = [token]
        print(stream.flush(), flush=True)
        n = len(history) - len(ids)
        rate = (n - 1) / (time.monotonic() - t_first) if n > 1 else 0.0
        print(f"[{n} tokens, {rate:.1f} tokens/s after the first]", file=sys.stderr)
        return 0
    finally:
        await client.shutdown()
        kids.stop()
        if own_key is not None:
            own_key.unlink(missing_ok=True)


def prompt_ids(tok, prompt: str, system: str | None) -> list[int]:
    """The prompt's ids: the chat of `system` and `prompt` rendered by the model's template, or
    for a base model (none), the prompt as it is, as Ollama's /api/generate sends it."""
    if tok.templates.default_name is not None:
        return tok.encode_chat(([{"role": "system", "content": system}] if system else [])
                               + [{"role": "user", "content": prompt}])
    if system:
        raise ValueError("--system needs a chat template, which this model (a base model) has "
                         "none of: write it into the prompt")
    return tok.encode(prompt, add_special=True)
