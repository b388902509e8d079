"""The tokenizer service as a real process on a real socket: every answer equals the pure
Tokenizer's, and every bad input gets its typed error while the service keeps serving."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest
import pytest_asyncio
import zmq.asyncio

from bus.client import RpcClient
from bus.errors import BusError, RemoteError
from wire.messages.bus import Status
from wire.messages.tokenizer import (Decode, Encode, Ids, InfoRequest, Prompt, Render, Text,
                                     ModelInfo, VocabRequest, VocabTable)

from ..bus.procs import Procs, busctl_cmd, cli, env, free_port, unique_cluster

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3? Réponds en français ✓"}]
TEXTS = ["hi", "Hello, world!", "  leading spaces\n\ttabs", "日本語のテキスト 🦙", "<|im_start|>user", ""]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def svc(model_path):
    """One tokenizer process for the module, reached at a fixed port without mDNS."""
    procs = Procs()
    cluster, port = unique_cluster(), free_port()
    proc = procs.start(cli("run", "tokenizer", "--name", "tokenizer-0", "--model", str(model_path),
                           "--cluster", cluster, "--no-mdns", "--rpc-port", str(port)))
    client = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{port}", name="tokenizer-0")
    try:
        await _until_ready(client, proc, procs)
        yield client, cluster, port, proc
    finally:
        await client.close()
        procs.stop_all()


async def _until_ready(client: RpcClient, proc: subprocess.Popen, procs: Procs, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"tokenizer exited {proc.returncode}:\n{procs.output(proc)}")
        try:
            if (await client.call(Status(), timeout=1.0)).state == "ready":
                return
        except BusError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"tokenizer never became ready:\n{procs.report(stacks=True)}")


async def test_info_describes_the_model(svc, smollm, model_path):
    from services.modelstore.identity import model_identity
    client = svc[0]
    info = await client.call(InfoRequest())
    assert isinstance(info, ModelInfo)
    assert info.model == model_identity(model_path)
    assert (info.vocab_size, info.bos_id, info.eos_id) == (49152, smollm.bos_id, smollm.eos_id)
    assert info.eot_ids == sorted(smollm.eot_ids) and smollm.eos_id in info.eot_ids
    assert info.special_ids == sorted(smollm.special_ids)
    assert info.context_length == 8192
    assert info.templates[0] == "gguf" and "chatml" in info.templates
    # The heartbeat/status info names the model, so a scheduler can match it to shards.
    status = await client.call(Status())
    assert status.info["model"] == info.model and status.info["vocab_size"] == 49152


async def test_vocab_table_is_every_tokens_bytes(svc, smollm, reference):
    client = svc[0]
    table = await client.call(VocabRequest())
    assert isinstance(table, VocabTable) and table.start == 0
    assert len(table.token_bytes) == smollm.vocab_size
    assert table.token_bytes == smollm.token_bytes
    for chat in reference["chats"]:                # llama.cpp's pieces of its greedy tokens
        assert [table.token_bytes[i].hex() for i in chat["greedy_ids"]] == chat["greedy_token_bytes"]
    hi = smollm.encode("hi")[0]
    assert table.token_bytes[hi] == b"hi"
    im_end = smollm.vocab.tokens.index("<|im_end|>")
    assert table.token_bytes[im_end] == b""
    full = await client.call(VocabRequest(skip_special=False))
    assert full.token_bytes[im_end] == b"<|im_end|>" and full.token_bytes[hi] == b"hi"


async def test_vocab_pages_cover_the_table(svc, smollm):
    client = svc[0]
    n = smollm.vocab_size
    page = await client.call(VocabRequest(start=100, count=7))
    assert page.start == 100 and page.token_bytes == smollm.token_bytes[100:107]
    tail = await client.call(VocabRequest(start=n - 3, count=50))
    assert tail.token_bytes == smollm.token_bytes[n - 3:]


async def test_encode_gives_llama_cpps_ids(svc, reference):
    client = svc[0]
    assert reference["tokenize"]
    for case in reference["tokenize"]:
        got = await client.call(Encode(text=case["text"], parse_special=case["parse_special"]))
        assert got.ids == case["ids"], case["text"]


@pytest.mark.parametrize("text", TEXTS)
async def test_encode_matches_the_tokenizer(svc, smollm, text):
    client = svc[0]
    assert (await client.call(Encode(text=text))).ids == smollm.encode(text)
    special = await client.call(Encode(text=text, parse_special=True, add_special=True))
    assert special.ids == smollm.encode(text, parse_special=True, add_special=True)


async def test_parse_special_reads_control_tokens_only_when_asked(svc, smollm):
    client = svc[0]
    im_start = smollm.vocab.tokens.index("<|im_start|>")
    assert (await client.call(Encode(text="<|im_start|>", parse_special=True))).ids == [im_start]
    assert im_start not in (await client.call(Encode(text="<|im_start|>"))).ids


async def test_concurrent_encodes_each_get_their_own_answer(svc, smollm):
    client = svc[0]
    texts = [f"request number {i} " * (i + 1) for i in range(20)]
    replies = await asyncio.gather(*(client.call(Encode(text=t)) for t in texts))
    assert [r.ids for r in replies] == [smollm.encode(t) for t in texts]


async def test_render_equals_encode_chat(svc, smollm):
    client = svc[0]
    prompt = await client.call(Render(messages=CHAT))
    assert isinstance(prompt, Prompt)
    assert prompt.ids == smollm.encode_chat(CHAT)
    assert prompt.text == smollm.render_chat(CHAT)
    assert prompt.text.endswith("<|im_start|>assistant\n")
    done = await client.call(Render(messages=CHAT, add_generation_prompt=False, template="llama3"))
    assert done.ids == smollm.encode_chat(CHAT, add_generation_prompt=False, template="llama3")


async def test_render_takes_openai_content_parts_and_the_developer_role(svc, smollm):
    client = svc[0]
    parts = [{"role": "developer", "content": [{"type": "text", "text": "You are"},
                                                {"type": "text", "text": "terse."}]},
             {"role": "user", "content": "hi", "name": "alice"}]
    plain = [{"role": "system", "content": "You are\nterse."}, {"role": "user", "content": "hi"}]
    prompt = await client.call(Render(messages=parts))
    assert prompt.ids == smollm.encode_chat(plain)
    assert prompt.text.startswith("<|im_start|>system\nYou are\nterse.<|im_end|>")


async def test_decode(svc, smollm):
    client = svc[0]
    ids = smollm.encode_chat(CHAT)
    text = await client.call(Decode(ids=ids))
    assert isinstance(text, Text) and text.text == smollm.decode(ids, skip_special=True)
    assert "<|im_end|>" not in text.text and "français ✓" in text.text
    raw = await client.call(Decode(ids=ids, skip_special=False))
    assert raw.text == smollm.render_chat(CHAT)


BAD = [
    ("empty chat", Render(messages=[]), "bad_messages", "at least one message"),
    ("unknown role", Render(messages=[{"role": "wizard", "content": "x"}]), "bad_messages", "wizard"),
    ("image part", Render(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
     "bad_messages", "only text parts"),
    ("content missing", Render(messages=[{"role": "user"}]), "bad_messages", "content"),
    ("content a number", Render(messages=[{"role": "user", "content": 5}]), "bad_messages", "content"),
    ("unknown template", Render(messages=CHAT, template="nope"), "unknown_template", "chatml"),
    ("template refuses", Render(messages=[{"role": "user", "content": "a"},
                                          {"role": "user", "content": "b"}], template="mistral"),
     "template_error", "alternate"),
    ("id past vocab", Decode(ids=[1, 49152]), "bad_token_id", "49152"),
    ("negative id", Decode(ids=[-1]), "bad_token_id", "-1"),
    ("vocab start past end", VocabRequest(start=49153), "bad_token_id", "49152"),
    ("text too long", Encode(text="é" * 300_000), "text_too_long", "600000 bytes"),
    ("chat too long", Render(messages=[{"role": "user", "content": "x" * 600_000}]),
     "text_too_long", "rendered chat"),
    # Within the text limit, but a token a byte: "\x01" is 2 bytes of msgpack as an id, " a" 3
    # (with the rendered text beside): more than one reply header carries.
    ("more ids than a reply carries", Encode(text="\x01" * 524_000), "prompt_too_long",
     "524000 tokens"),
    ("a chat of more ids than a reply carries", Render(messages=[{"role": "user",
                                                                  "content": " a" * 262_000}]),
     "prompt_too_long", "more than one reply carries"),
    # Token 46778 is a newline and 80 spaces (81 bytes): 14,000 of them decode to 1.1 MB.
    ("decoded text longer than a reply carries", Decode(ids=[46778] * 14_000), "text_too_long",
     "14000 ids"),
]


@pytest.mark.parametrize("body,code,says", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
async def test_bad_input_gets_a_typed_error_and_the_service_keeps_serving(svc, body, code, says):
    client = svc[0]
    with pytest.raises(RemoteError) as e:
        await client.call(body)
    assert e.value.code == code and says in e.value.message
    assert isinstance(await client.call(Encode(text="still here")), Ids)


async def test_busctl_call_encode(svc, reference):
    _, cluster, port, _ = svc
    case = reference["tokenize"][0]                  # "Hello, world!" and llama.cpp's ids for it
    cmd = busctl_cmd("call", "tokenizer-0", "tokenizer.encode", json.dumps({"text": case["text"]}), "--json",
                     "--cluster", cluster, "--no-mdns", "--peer", f"127.0.0.1:{port}")
    r = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=30,
                                env=env())
    assert r.returncode == 0, r.stderr
    reply = json.loads(r.stdout)
    assert reply == {"type": "tokenizer.ids", "body": {"ids": case["ids"]}}


async def test_a_file_that_is_not_a_gguf_fails_with_a_message(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf at all")
    cmd = cli("run", "tokenizer", "--model", str(bad), "--cluster", unique_cluster(), "--no-mdns")
    r = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60,
                                env=env())
    assert r.returncode == 1 and "not a GGUF file" in r.stderr
