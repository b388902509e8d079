"""A service's settings are declared once, on its config dataclass: `llmbus run KIND --help`
shows the defaults that come from the fields, and the options given become the config."""

from __future__ import annotations

import dataclasses

import pytest

from bus.options import flag_of
from gateway.config import GatewayConfig
from services.cli import build_parser
from services.health.policy import HealthConfig
from services.scheduler.batching.config import BatchingSettings, SchedulerConfig
from services.scheduler.config import SchedulerServiceConfig
from services.shard.config import ShardConfig

CONFIGS = {"scheduler": SchedulerServiceConfig, "shard": ShardConfig, "gateway": GatewayConfig,
           "health": HealthConfig}


def subparser(kind: str):
    run = next(a for a in build_parser()._subparsers._group_actions if "run" in a.choices)
    return run.choices["run"]._subparsers._group_actions[0].choices[kind]


def shown(f: dataclasses.Field) -> str:
    o = f.metadata["option"]
    v = round(f.default * o["per"], 9) if o["per"] != 1 else f.default
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_each_option_of_run_kind_is_a_config_field_with_its_default_and_help(kind):
    fields = [f for f in dataclasses.fields(CONFIGS[kind]) if "option" in f.metadata]
    assert fields
    help_text = " ".join(subparser(kind).format_help().split())
    for f in fields:
        o = f.metadata["option"]
        assert flag_of(f, o) in help_text
        assert " ".join(o["help"].split()) in help_text
        if f.default not in (None, "") and "default" not in o["help"]:
            assert f"{' '.join(o['help'].split())} (default: {shown(f)})" in help_text, f.name


def test_no_option_given_is_the_config_of_the_fields_defaults():
    from bus.options import options_of
    args = build_parser().parse_args(["run", "scheduler"])
    assert SchedulerServiceConfig(**options_of(SchedulerServiceConfig, args)) == SchedulerServiceConfig()
    args = build_parser().parse_args(["run", "scheduler", "--pace-ms", "60", "--max-queue", "9",
                                      "--refill-tokens", "32", "--context", "512"])
    got = SchedulerServiceConfig(**options_of(SchedulerServiceConfig, args))
    assert (got.pace_step_s, got.max_queue, got.max_refill_tokens, got.context_length) == \
        (0.06, 9, 32, 512)


def test_the_policy_takes_the_settings_the_service_was_given_and_no_others():
    service = SchedulerServiceConfig(max_batch_tokens=128, pace_step_s=0.05)
    policy = SchedulerConfig(**service.batching(), token_bytes=(b"a",))
    assert (policy.max_batch_tokens, policy.pace_step_s) == (128, 0.05)
    assert set(service.batching()) == {f.name for f in dataclasses.fields(BatchingSettings)}


def test_up_takes_the_gateways_cross_site_options_as_the_gateway_declares_them():
    from bus.options import argv_of
    from services.cli.up import GATEWAY_OPTIONS
    up = next(a for a in build_parser()._subparsers._group_actions if "up" in a.choices)
    help_text = " ".join(up.choices["up"].format_help().split())
    fields = {f.name: f for f in dataclasses.fields(GatewayConfig)}
    for name in GATEWAY_OPTIONS:
        o = fields[name].metadata["option"]
        assert flag_of(fields[name], o) in help_text and " ".join(o["help"].split()) in help_text
    args = build_parser().parse_args(["up", "--allowed-host", "a.lan", "--allowed-host", "b.lan",
                                      "--cors-origin", "https://front.example"])
    # What `up` hands to `llmbus run gateway`, which reads it back into the same fields.
    argv = argv_of(GatewayConfig, args, GATEWAY_OPTIONS)
    assert argv == ["--allowed-host", "a.lan", "--allowed-host", "b.lan",
                    "--cors-origin", "https://front.example"]
    from bus.options import options_of
    given = options_of(GatewayConfig, build_parser().parse_args(["run", "gateway", *argv]))
    assert given == {"allowed_hosts": ("a.lan", "b.lan"), "cors_origins": ("https://front.example",)}
