"""Messages over a real DEALER <-> ROUTER pair on loopback, received without copying."""

import numpy as np
import pytest
import zmq

import wire
from wire.messages.bus import Echo, EchoReply

from .activations import activations


@pytest.fixture
def pair():
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for s in (router, dealer):
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 5000)  # a lost message fails the test instead of hanging it
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    yield router, dealer
    router.close()
    dealer.close()
    ctx.term()


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8", "raw"])
def test_echo_over_tcp_loopback(pair, codec):
    router, dealer = pair
    x = activations(4)
    sent = wire.Message(Echo(text="ping", payload=wire.Tensor(x, codec)), id=11, sender="c",
                        epoch=1)
    dealer.send_multipart(wire.encode(sent), copy=False)

    ident, *frames = router.recv_multipart(copy=False)
    got = wire.decode(frames)
    assert got.id == 11 and got.body.text == "ping"
    router.send_multipart([ident] + wire.encode(
        got.reply(EchoReply(text="pong", payload=got.body.payload), sender="srv", epoch=2)),
        copy=False)

    back = wire.decode(dealer.recv_multipart(copy=False))
    assert back.id == 11 and back.sender == "srv" and back.body.text == "pong"
    y = back.body.payload.array()
    assert y.shape == x.shape and back.body.payload == got.body.payload
    assert np.allclose(y, x, rtol=2**-11, atol=np.abs(x).max() / 254 if codec == "int8" else 0)


@pytest.mark.parametrize("codec", ["fp32", "raw"])
def test_received_zmq_frames_are_not_copied(pair, codec):
    router, dealer = pair
    x = activations(64)
    dealer.send_multipart(wire.encode(wire.Message(Echo(payload=wire.Tensor(x, codec)))))
    ident, *frames = router.recv_multipart(copy=False)
    y = wire.decode(frames).body.payload.array()
    assert np.array_equal(y, x)
    assert np.shares_memory(y, np.frombuffer(frames[1].buffer, np.uint8))

