"""The client host of the multi-host test: finds the scheduler by mDNS, keeps 8 greedy streams
going while the test changes the cluster, and checks each answer against the undisturbed one.

Driven by lines on stdin, answering JSON lines on stdout (run inside a network namespace):
    placed N        wait until a plan of N shards serves; reply {"event": "placed", ...}
    pipeline        wait until the scheduler has a pipeline (pinned shards); reply "pipeline"
    refused         wait until placement says the model does not fit; reply "refused"
    reference [T]   run every prompt once (T tokens, MAX_TOKENS by default), alone in a stable
                    cluster; keep the answers
    churn PLAN      keep 8 streams going; say "streaming" once each has tokens, "replaced"
                    when a plan newer than PLAN serves, then "checked" with every answer
    once            run every prompt once more, all at once; say "streaming" once each has tokens
    mark            say "marked" with how many tokens each stream of `once` has now
    wait            once the streams of `once` end, say "checked" with every answer
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import zmq.asyncio

from bus.client import RpcClient
from bus.config import BusConfig
from bus.directory import Directory
from tests.serve.stack import generate
from wire.messages.bus import Status
from wire.messages.scheduler import Generate

PROMPTS = ["Write a short story about a lighthouse keeper.",
           "Describe a journey by train across a continent.",
           "Tell me a tale about a dragon and a baker.",
           "Write a letter to a friend about winter.",
           "Explain how a bicycle works.",
           "Describe a busy market in the morning.",
           "Write a poem about the sea.",
           "Tell me about the history of bread."]
MAX_TOKENS = 40


def say(**event) -> None:
    print(json.dumps(event), flush=True)


def request(i: int, max_tokens: int = MAX_TOKENS) -> Generate:
    return Generate(messages=[{"role": "user", "content": PROMPTS[i]}], temperature=0.0,
                    max_tokens=max_tokens)


class Client:
    def __init__(self, cluster: str, host: str):
        self.ctx = zmq.asyncio.Context.instance()
        self.directory = Directory(self.ctx, BusConfig(cluster=cluster, host=host),
                                   me=f"client-{host}")
        self.reference: list[str] = []
        self.max_tokens = MAX_TOKENS
        self.endpoint = ""
        self.progress: list[int] = []
        self.streams: asyncio.Task | None = None

    async def placement(self) -> dict:
        c = RpcClient(self.ctx, self.endpoint)
        try:
            return (await c.call(Status(), 5.0)).info.get("placement", {})
        finally:
            await c.close()

    async def placed(self, n: int) -> None:
        while True:
            scheds = self.directory.of_kind("scheduler")
            if scheds and scheds[0].state == "ready":
                self.endpoint = scheds[0].rpc_endpoint
                p = await self.placement()
                if len(p.get("ranges", ())) == n and not p.get("paused"):
                    say(event="placed", plan=p["plan"], ranges=p["ranges"], scheduler=scheds[0].name)
                    return
            await asyncio.sleep(0.1)

    async def pipeline(self) -> None:
        while True:
            scheds = self.directory.of_kind("scheduler")
            if scheds and scheds[0].state == "ready":
                self.endpoint = scheds[0].rpc_endpoint
                c = RpcClient(self.ctx, self.endpoint)
                try:
                    info = (await c.call(Status(), 5.0)).info
                finally:
                    await c.close()
                if info.get("pipeline"):
                    say(event="pipeline", pipeline=info["pipeline"], scheduler=scheds[0].name)
                    return
            await asyncio.sleep(0.1)

    async def run_reference(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        done = await asyncio.gather(*(generate(self.endpoint, request(i, max_tokens))
                                      for i in range(len(PROMPTS))))
        self.reference = [r.text for r in done]
        say(event="reference", finish=[r.done.finish_reason for r in done],
            tokens=[len(r.token_ids) for r in done], texts=self.reference)

    async def once(self) -> None:
        self.progress = [0] * len(PROMPTS)

        async def one(i: int) -> dict:
            def seen(n: int) -> None:
                self.progress[i] = n
            r = await generate(self.endpoint, request(i, self.max_tokens), on_tokens=seen)
            return {"i": i, "ok": r.text == self.reference[i], "text": r.text, "want": self.reference[i],
                    "tokens": len(r.token_ids), "finish": r.done.finish_reason if r.done else None,
                    "detail": r.done.detail if r.done else "no Done event"}

        self.streams = asyncio.ensure_future(asyncio.gather(*(one(i) for i in range(len(PROMPTS)))))
        while not all(self.progress) and not self.streams.done():
            await asyncio.sleep(0.01)
        say(event="streaming")

    async def churn(self, plan: int) -> None:
        started: set[int] = set()
        results: list[dict] = []
        replaced = asyncio.Event()

        async def one_slot(i: int) -> None:
            while True:
                r = await generate(self.endpoint, request(i, self.max_tokens),
                                   on_tokens=lambda n: started.add(i))
                results.append({"i": i, "ok": r.text == self.reference[i], "text": r.text,
                                "want": self.reference[i],
                                "finish": r.done.finish_reason if r.done else None,
                                "detail": r.done.detail if r.done else "no Done event"})
                if replaced.is_set():
                    return

        slots = [asyncio.create_task(one_slot(i)) for i in range(len(PROMPTS))]
        while len(started) < len(PROMPTS):
            await asyncio.sleep(0.02)
        say(event="streaming")
        while True:
            p = await self.placement()
            last = p.get("last_change", {})
            if p.get("plan", 0) > plan and last.get("plan") == p["plan"] and last.get("serving"):
                say(event="replaced", t=time.monotonic(), plan=p["plan"], ranges=p["ranges"],
                    last_change=last)
                break
            await asyncio.sleep(0.05)
        replaced.set()
        await asyncio.gather(*slots)
        say(event="checked", results=results)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--host", required=True)
    args = ap.parse_args()
    client = Client(args.cluster, args.host)
    await client.directory.start()
    loop = asyncio.get_running_loop()
    try:
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).split():
            cmd, *rest = line
            if cmd == "placed":
                await client.placed(int(rest[0]))
            elif cmd == "pipeline":
                await client.pipeline()
            elif cmd == "refused":
                while not (p := await client.placement()).get("refused"):
                    await asyncio.sleep(0.1)
                say(event="refused", why=p["refused"])
            elif cmd == "reference":
                await client.run_reference(int(rest[0]) if rest else MAX_TOKENS)
            elif cmd == "churn":
                await client.churn(int(rest[0]))
            elif cmd == "once":
                await client.once()
            elif cmd == "mark":
                say(event="marked", tokens=list(client.progress))
            elif cmd == "wait":
                say(event="checked", results=await client.streams)
    finally:
        await client.directory.stop()


if __name__ == "__main__":
    asyncio.run(main())
