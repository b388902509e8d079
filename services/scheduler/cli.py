"""`llmbus run scheduler`: the options of the scheduler service, derived from its config
(config.py; no numpy needed to parse them)."""

from __future__ import annotations

import argparse

from bus.options import add_options, options_of

from .config import SchedulerServiceConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_options(p, SchedulerServiceConfig)


def build(args: argparse.Namespace, config):
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from .service import SchedulerService
    return SchedulerService(config, SchedulerServiceConfig(**options_of(SchedulerServiceConfig, args)))
