"""The parser's shape: one-line errors (with a NAME=VALUE hint), the ``--timeout`` type, and the option
groups several commands share.  Imports nothing heavy: ``memlab --help`` and a refused name stay fast."""
from __future__ import annotations

import argparse
import sys
from typing import NamedTuple, Sequence

from ..core.setting import DEFAULTS, DTYPES, GRADS, LOSSES, MAX_ACCUMULATE, MAX_TIMEOUT_S, MODES, OPTIMIZERS
from ..sharding.sweep_plan import BUILTIN_MODELS, DEFAULT_BATCH, MAX_WORLD

__all__ = ["MAX_TIMEOUT_S", "timeout_seconds", "OneLineParser", "pair_hint", "Shared", "shared_options",
           "SHARD_STRATEGIES", "SHARDED_MODELS", "SHARD_SIZES", "MAX_SHARD_WORLD", "ModelOrBuiltin",
           "add_sharding_options", "CHECKPOINT_BLOCKS_HELP"]

#: ``--shard-strategy`` values: ``none`` (one process, the step memlab measures without sharding) and
#: the strategies :mod:`memlab.sharding` runs (``memlab.sharding.formulas.STRATEGIES``)
SHARD_STRATEGIES = ("none", "ddp", "zero1", "fsdp")
#: the built-in models a sharded step runs by name (``memlab.sharding.model.MODELS``)
SHARDED_MODELS = BUILTIN_MODELS
#: most ranks a sharded run starts on one host (``memlab.sharding.launch.MAX_WORLD``)
MAX_SHARD_WORLD = MAX_WORLD
#: the sharded step's sizes and their defaults (``memlab.sharding.model.Sizes``'s fields), each set by
#: ``--param NAME=VALUE``; ``batch`` is the global batch (rows or sequences) split over the ranks.
#: Written here so that a bad name or value is refused before torch; tests/test_sharding_measure.py
#: keeps them equal to ``Sizes``
SHARD_SIZES = {"dim": 32, "hidden": 128, "layers": 3, "batch": DEFAULT_BATCH, "seed": 0, "heads": 4, "vocab": 256,
               "seq": 16}

#: options whose value is one ``NAME=...`` word, with the form a hint spells out
PAIR_OPTIONS = {"--param": "NAME=VALUE", "--grid": "NAME=V1,V2,..."}


def timeout_seconds(text: str) -> float:
    """argparse ``type=`` of every ``--timeout``: seconds, finite, > 0 and at most :data:`MAX_TIMEOUT_S`."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value <= MAX_TIMEOUT_S:  # NaN fails the comparison too
        raise argparse.ArgumentTypeError(f"{text!r} is not valid: expected seconds > 0 and <= {MAX_TIMEOUT_S} "
                                         f"(a week)")
    return value


def pair_hint(argv: Sequence[str], extras: Sequence[str]) -> str:
    """``--param chunk_size 1000`` leaves ``1000`` unrecognised: the form the option wanted, with the
    user's own words put together ("" when the extra word follows no such option)."""
    for i, word in enumerate(argv[:-2]):
        name, value = argv[i + 1], argv[i + 2]
        if word in PAIR_OPTIONS and "=" not in name and extras and value == extras[0]:
            return f"; expected {PAIR_OPTIONS[word]}, e.g. {word} {name}={value}"
    return ""


class OneLineParser(argparse.ArgumentParser):
    """A parser whose errors (bad value, unknown option, missing argument) are one line on stderr,
    exit status 2, like every other bad input (the usage is one ``--help`` away)."""

    argv: Sequence[str] = ()
    #: the sub-commands' names (set on the top parser): an unrecognised word's error points at the
    #: command's own --help
    commands: Sequence[str] = ()

    def parse_args(self, args=None, namespace=None):
        self.argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str):
        prefix, prog = "unrecognized arguments: ", self.prog
        if message.startswith(prefix):
            message += pair_hint(self.argv, message[len(prefix):].split())
            command = next((a for a in self.argv if a in self.commands), None)
            prog = f"{self.prog} {command}" if command else prog
        self.exit(2, f"memlab: error: {message}; see {prog} --help\n")


class Shared(NamedTuple):
    """The option groups (argparse parents) several commands take."""

    common: argparse.ArgumentParser  # --plugin
    meas: argparse.ArgumentParser    # how to measure: device, dtype, iterations, threads...
    model: argparse.ArgumentParser   # --model, --blocks
    gradients: argparse.ArgumentParser  # --accumulate, --grads (the training step's gradient options)
    sharded_model: argparse.ArgumentParser  # --model FILE.py or a built-in sharded model's name, --blocks


class ModelOrBuiltin(argparse.Action):
    """``--model``: a model file's path into ``model`` (checked as a file before torch), a built-in
    sharded model's name (:data:`SHARDED_MODELS`) into ``shard_model`` instead (it names no file;
    the command refuses it without ``--shard-strategy``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values in SHARDED_MODELS:
            namespace.shard_model = values
        else:
            setattr(namespace, self.dest, values)


#: ``--checkpoint-blocks``'s help (``memlab measure``, ``memlab advise``, ``memlab sweep``)
CHECKPOINT_BLOCKS_HELP = ("with --shard-strategy: every block runs under non-reentrant torch.utils.checkpoint, "
                          "inside each FSDP unit (only each block's input is saved for backward; the technique "
                          "checkpoint_blocks on one process)")


def add_sharding_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--shard-strategy``, ``--world``, ``--no-reshard`` and ``--checkpoint-blocks`` (``memlab measure``,
    ``memlab advise``); ``what``: the sentence ``--world`` ends with."""
    parser.add_argument("--shard-strategy", default="none", choices=SHARD_STRATEGIES, metavar="STRATEGY",
                        help=f"{'|'.join(SHARD_STRATEGIES)}: none (default) is one process; ddp, zero1 and fsdp "
                             "start --world gloo processes (NCCL on cuda) and trace every rank (docs/sharding.md)")
    parser.add_argument("--world", type=int, default=None, metavar="N", help=what)
    parser.add_argument("--no-reshard", action="store_true",
                        help="with --shard-strategy fsdp: reshard_after_forward=False (the label fsdp(keep))")
    parser.add_argument("--checkpoint-blocks", action="store_true", help=CHECKPOINT_BLOCKS_HELP)


def _measuring(meas: argparse.ArgumentParser) -> None:
    """The measuring options: a :class:`~memlab.core.setting.Setting`'s fields, with its defaults."""
    d = DEFAULTS
    meas.add_argument("--device", default=d.device, help=f"cpu, cuda or cuda:N (default {d.device})")
    meas.add_argument("--dtype", default=d.dtype, help=f"{', '.join(DTYPES)} (default {d.dtype})")
    meas.add_argument("--mode", default=d.mode, help=f"{MODES[0]} (forward+backward+optimizer step) or {MODES[1]} "
                                                     f"(no_grad forward); default {d.mode}")
    meas.add_argument("--iterations", type=int, default=d.iterations,
                      help=f"allocation-measured steps (default {d.iterations})")
    meas.add_argument("--optimizer", default=d.optimizer, metavar="NAME",
                      help=f"training step's optimizer: {', '.join(OPTIMIZERS)} (default {d.optimizer}); "
                           f"an _in_backward one steps each parameter in backward and frees its gradient at once")
    meas.add_argument("--loss", default=d.loss, metavar="NAME",
                      help=f"{LOSSES[0]} (backward from the workload's preallocated upstream gradient) or "
                           f"{LOSSES[1]} (mse_loss(output, 0): its gradient is allocated inside the step); "
                           f"default {d.loss}")
    meas.add_argument("--repeats", type=int, default=d.repeats,
                      help=f"timed steps; the median is reported (default {d.repeats})")
    meas.add_argument("--timeout", type=timeout_seconds, default=d.timeout,
                      help=f"seconds per isolated measurement (default {d.timeout:g})")
    meas.add_argument("--time-budget", type=float, default=d.time_budget, metavar="SECONDS",
                      help="keep timing steps (after --repeats) until their IQR is within 5%% of the median "
                           f"or this many seconds pass (default {d.time_budget:g})")
    meas.add_argument("--threads", type=int, default=None, metavar="N",
                      help="torch intra-op threads per measurement (default: one per core for the memory "
                           "phase, one for the timed phase). 1 keeps the relative step time load-robust on a "
                           "shared machine")
    meas.add_argument("--in-process", action="store_true", help="measure in this process instead of a fresh subprocess")
    meas.add_argument("--spawn", action="store_true",
                      help="a fresh Python process per measurement instead of a child forked from the warm "
                           "server (the default for CPU; CUDA always spawns)")


def _gradient_options(group: argparse.ArgumentParser) -> None:
    """``--accumulate K`` and ``--grads none|zero``: :class:`~memlab.core.setting.Setting` fields (measure, sweep)."""
    d = DEFAULTS
    group.add_argument("--accumulate", type=int, default=d.accumulate, metavar="K",
                       help=f"micro-batches of the batch accumulated into .grad before one optimizer step "
                            f"(1 to {MAX_ACCUMULATE}; the batch must divide by K; default {d.accumulate})")
    group.add_argument("--grads", default=d.grads, metavar="WHEN",
                       help=f"between steps the gradients are {GRADS[0]} (set to None) or {GRADS[1]} "
                            f"(zeroed in place: kept allocated); default {d.grads}")


def shared_options() -> Shared:
    """``--plugin``; the measuring options; ``--model`` and ``--blocks``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--plugin", action="append", metavar="FILE.py",
                        help="a Python file defining memlab.Technique subclasses, or a family folder shaped "
                             "like memlab/families/<name>/ (repeatable)")
    meas = argparse.ArgumentParser(add_help=False)
    _measuring(meas)
    model, sharded_model = argparse.ArgumentParser(add_help=False), argparse.ArgumentParser(add_help=False)
    _model_options(model, "store", "")
    _model_options(sharded_model, ModelOrBuiltin, f"; with --shard-strategy also {' or '.join(SHARDED_MODELS)} "
                                                  f"(default {SHARDED_MODELS[0]})")
    gradients = argparse.ArgumentParser(add_help=False)
    _gradient_options(gradients)
    return Shared(common, meas, model, gradients, sharded_model)


def _model_options(group: argparse.ArgumentParser, action, more: str) -> None:
    """``--model`` (stored by ``action``; ``more`` ends its help) and ``--blocks``."""
    group.add_argument("--model", metavar="FILE.py", action=action,
                       help="your own model: a file defining build() -> nn.Module, batch(size) -> tensors and "
                            "optionally loss(output, batch); technique names are then plain, checkpoint_blocks, "
                            "checkpoint_sqrt, selective_checkpoint, autocast_bf16, offload_activations, lora "
                            f"(see README, 'Your own model'){more}")
    group.add_argument("--blocks", metavar="PATH", help="with --model: the dotted path of the nn.ModuleList/"
                       "nn.Sequential of repeated blocks (default: guessed)")
