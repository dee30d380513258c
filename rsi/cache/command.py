"""Server command-line templates: ``akv serve --model {model} --port {port}`` -> argv.

A template is split like a POSIX shell line (``shlex``), then each word is formatted with the
placeholders below, so a substituted value is always one argument and never re-split or
interpreted by a shell. Light on purpose: the search config validates templates when it loads.

Placeholders:
    ``{port}`` (required): the TCP port the launcher chose for this replica.
    ``{model}``: ``model.name`` of the config (a name or a checkpoint path on the replica's node).
    ``{gpu}``: the GPU id(s) Ray gave the replica, comma-separated ("" on CPU). The launcher also
        sets ``CUDA_VISIBLE_DEVICES`` to it, so inside the server that GPU is ``cuda:0``.
    ``{host}``: the interface to bind (127.0.0.1: servers are reached by their own replica only).
    ``{python}``: the interpreter running the replica (``sys.executable``).
Literal braces are written ``{{`` and ``}}``.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass

from engine.errors import AKVError

PLACEHOLDERS = ("port", "model", "gpu", "host", "python")
REQUIRED = ("port",)


class CommandError(AKVError):
    """A server command template that cannot be used (unknown placeholder, bad syntax, no port)."""


@dataclass(frozen=True)
class CommandTemplate:
    """A validated server command template (see the module docstring).

    Raises:
        CommandError: empty, unbalanced quotes or braces, a placeholder not in
            :data:`PLACEHOLDERS` (the message lists them), positional ``{}``, format specs or
            conversions, or no ``{port}``.
    """

    text: str

    def __post_init__(self) -> None:
        where = "executor.server_command"
        if not isinstance(self.text, str) or not self.text.strip():
            raise CommandError(f"{where} must be a non-empty command line, got {self.text!r}", field=where,
                               value=self.text)
        try:
            words = shlex.split(self.text)
        except ValueError as err:
            raise CommandError(f"{where}: cannot split {self.text!r}: {err}", field=where, value=self.text) from err
        found: set[str] = set()
        for word in words:
            try:
                parsed = list(string.Formatter().parse(word))
            except ValueError as err:
                raise CommandError(f"{where}: bad braces in {word!r}: {err} (write {{{{ and }}}} for literal braces)",
                                   field=where, value=word) from err
            for _, name, spec, conversion in parsed:
                if name is None:
                    continue
                if name not in PLACEHOLDERS:
                    shown = "{}" if name == "" else "{" + name + "}"
                    raise CommandError(f"{where}: unknown placeholder {shown} in {word!r}; valid placeholders: "
                                       f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}", field=where, value=name)
                if spec or conversion:
                    raise CommandError(f"{where}: placeholder {{{name}}} takes no format spec or conversion "
                                       f"(in {word!r})", field=where, value=word)
                found.add(name)
        missing = [p for p in REQUIRED if p not in found]
        if missing:
            raise CommandError(f"{where}: the command must contain {{{missing[0]}}} (the launcher chooses the port): "
                               f"{self.text!r}", field=where, value=self.text)

    @property
    def placeholders(self) -> frozenset[str]:
        return frozenset(name for word in shlex.split(self.text) for _, name, _, _ in string.Formatter().parse(word)
                         if name)

    def argv(self, values: Mapping[str, object]) -> list[str]:
        """The command as an argument list, each word formatted with ``values`` (all placeholders given)."""
        absent = sorted(self.placeholders - set(values))
        if absent:
            raise CommandError(f"no value for placeholder {{{absent[0]}}}", field="executor.server_command",
                               value=absent[0])
        shown = {k: str(v) for k, v in values.items()}
        return [word.format(**shown) for word in shlex.split(self.text)]
